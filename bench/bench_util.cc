#include "bench/bench_util.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "proto/job.pb.h"

namespace lockstep::bench {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

absl::StatusOr<MainJobBench> LoadMainJobBench(const std::string& model, int64_t batch,
                                              const std::string& dataset, int flag_slots) {
  v1::DataSpec data_spec;
  if (!dataset.empty()) data_spec.set_dataset(dataset);
  auto loaded = LoadJobData(data_spec);
  if (!loaded.ok()) return loaded.status();
  MainJobBench out;
  out.data = *std::move(loaded);
  out.spec.model = model;
  out.spec.global_batch = batch;
  out.spec.optimizer.momentum = 0.9f;
  const Dataset& train = out.data.train;
  auto replica = Replica::Create(out.spec, train.dim, train.num_classes, flag_slots);
  if (!replica.ok()) return replica.status();
  out.replica = *std::move(replica);
  return out;
}

}  // namespace lockstep::bench
