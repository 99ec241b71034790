// //bench:scaling's pieces (bench/scaling.cc runs the matrix; bench/
// scaling_report.cc plans its rows and prints the method, the table and
// the targets). One ScalingBench per process, used from main's thread only.
#ifndef LOCKSTEP_BENCH_SCALING_BENCH_H_
#define LOCKSTEP_BENCH_SCALING_BENCH_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(int, poll_ms);

namespace lockstep::bench {

// One row of the tables.
struct Run {
  std::string key;    // unique
  std::string label;  // what the row shows
  enum Kind { kTrain, kTorch, kCluster } kind = kCluster;
  int k = 1;                 // processes
  int64_t global_batch = 0;  // examples per step, all processes
  std::string mode;          // cluster: tcp | grpc | ps1 | ps2 | ps1t | ps2t; torch: plain | ddp
  std::string scaling;       // "weak", "strong", "" (K=1 / anchors)
  std::string same_as;       // key of an identical run (not run again)
};

struct Sample {
  double eps = 0;        // examples/s as measured (see PrintMethod)
  double coord_eps = 0;  // cluster: the coordinator's own figure
  double wall = 0;       // cluster: job started -> finished, seconds
  bool fallback = false;  // cluster: too few polls, eps = coord_eps
};

class ScalingBench {
 public:
  ScalingBench(std::string root, std::string dir) : root_(std::move(root)), dir_(std::move(dir)) {}

  int Main();

 private:
  void Plan();
  void PrintMethod() const;
  // Each returns a sample or an error naming the run.
  absl::StatusOr<Sample> RunTrain(int64_t batch, const std::string& tag);
  // lockstep-train started (StartTrain) and its figure read once it exited
  // (FinishTrain), so that several can run at once (RunTrainTogether).
  absl::StatusOr<pid_t> StartTrain(int64_t batch, const std::string& tag);
  absl::StatusOr<Sample> FinishTrain(pid_t pid, int64_t batch, const std::string& tag);
  // `k` lockstep-train processes at batch `batch` started together: the sum
  // of their examples/s (the machine's ceiling for weak scaling at K = k:
  // no communication, no service).
  absl::StatusOr<Sample> RunTrainTogether(int k, int64_t batch, const std::string& tag);
  absl::StatusOr<Sample> RunTorch(const Run& r);
  void RunClusters(int rep);
  void Record(const Run& r, int rep, const absl::StatusOr<Sample>& s);
  void PrintTable() const;
  int PrintTargets() const;
  double RatioMedian(const std::string& key, const std::string& denominator) const;
  std::vector<std::string> JobFlags(const Run& r) const;

  const std::string root_, dir_;
  int64_t steps_ = 0, batch_ = 0, strong_ = 0, warmup_ = 1;
  int repeats_ = 0;
  std::vector<int> worlds_;  // 1 first
  std::vector<std::string> modes_;
  bool torch_ = false;
  std::vector<Run> runs_;
  // key -> repeat -> sample; "train128a"/"train128b" are the two anchors.
  std::map<std::string, std::map<int, Sample>> samples_;
  std::map<std::string, std::string> failures_;  // key -> first error
  std::string train_hash_, k1_hash_;              // weights hashes for the info line
};

}  // namespace lockstep::bench

#endif  // LOCKSTEP_BENCH_SCALING_BENCH_H_
