// Small pieces every bench shares: a monotonic clock in seconds, the median
// of repeated runs, and the main job's model on the real dataset (what
// //bench:train_throughput and //bench:nonfinite_cost time).
// Single-threaded helpers; nothing here is on a service path.
#ifndef LOCKSTEP_BENCH_BENCH_UTIL_H_
#define LOCKSTEP_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/train/replica.h"
#include "worker/job_data.h"

namespace lockstep::bench {

// Seconds on the steady clock (only differences mean anything).
double NowSeconds();

// Median of v (mean of the two middle values for an even count); 0 if empty.
double Median(std::vector<double> v);

// The main job's training state, built as a K = 1 worker builds it:
// the dataset loaded like a job's (`dataset` as the job flag --dataset; ""
// is the default Fashion-MNIST), SGD momentum 0.9, the given model and
// batch, and a replica with `flag_slots` non-finite flag slots.
struct MainJobBench {
  TrainTest data;
  TrainSpec spec;
  std::unique_ptr<Replica> replica;
};
absl::StatusOr<MainJobBench> LoadMainJobBench(const std::string& model, int64_t batch,
                                              const std::string& dataset, int flag_slots = 0);

}  // namespace lockstep::bench

#endif  // LOCKSTEP_BENCH_BENCH_UTIL_H_
