// What divergence repair in the combine (issue 10; worker/job_runner.h,
// on_divergence=repair with a state board, as lockstep-worker runs every
// K > 1 job) costs a training step, side by side with the same job without
// it.
//
// Part 1, the job loop: K JobRunners in this process (one thread each)
// over the raw-TCP peer transport on loopback (ring), MLP 784-256-10 on
// Fashion-MNIST, batch 128 per rank, SGD momentum 0.9, 1 BLAS thread, a
// reporter that answers at once (no coordinator). Two configurations run
// alternately (so both see the same machine load), `repeats` times each:
//   without: no state board: the reporter thread still hashes the weights,
//            the per-tensor blocks and the optimizer state of every step
//            (they go with every report), but nothing rides in the combine;
//   with:    a state board per rank: each rank's 64-bit state identity
//            (8 byte-valued floats) rides in every combine, written after
//            the reporter thread has hashed the previous step, and the K
//            identities are compared after the combine (no fault: no state
//            is ever copied).
// Per run, on rank 0 after `warmup` steps: the median of the step times
// (end of step t - end of step t-1; robust against the moments another
// process takes a core) and the mean. Reports, over the runs, the medians
// of both per configuration and the median of the paired differences (run
// i with - run i without, back to back).
//
// Part 2, the reporter thread's hashing per step (off the job thread, but
// on the same two cores): XXH3-128 of the weights alone, and with one
// XXH3-64 per tensor and the optimizer state's XXH3-128 (what divergence
// location adds); medians over repeats.
//   bazel run -c opt //bench:repair_cost [-- --steps=300 --repeats=7 --k=2]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/blas.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/optim/hash.h"
#include "common/train/state_board.h"
#include "worker/combiner.h"
#include "worker/job_runner.h"
#include "common/net/data_auth.h"
#include "worker/net/tcp_transport.h"

ABSL_FLAG(int64_t, steps, 300, "Training steps per run (after the warm-up steps)");
ABSL_FLAG(int64_t, warmup, 20, "Steps not timed at the start of each run");
ABSL_FLAG(int32_t, repeats, 7, "Runs per configuration; medians are reported");
ABSL_FLAG(int32_t, k, 2, "Workers (threads over raw TCP on loopback)");
ABSL_FLAG(int64_t, batch, 128, "Batch per rank");
ABSL_FLAG(std::string, model, "mlp:256", "Model spec");

namespace lockstep {
namespace {

using bench::Median;
using bench::NowSeconds;

class NullSink final : public LogSink {
 public:
  void Write(absl::string_view) override {}
};

class InstantReporter final : public JobReporter {
 public:
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest&) override { return false; }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }
};

// Rank 0's step ends (job thread; no allocation after construction).
class EndTimes final : public StepObserver {
 public:
  explicit EndTimes(int64_t steps) : t_(steps, 0.0) {}
  void OnStep(const StepTiming& t) override {
    if (t.step >= 0 && t.step < static_cast<int64_t>(t_.size())) t_[t.step] = NowSeconds();
  }
  const std::vector<double>& t() const { return t_; }

 private:
  std::vector<double> t_;
};

struct RunTimes {
  double median = 0;  // seconds per step
  double mean = 0;
};

// One run of the job: rank 0's steady-state step times.
absl::StatusOr<RunTimes> RunJob(const TrainTest& data, int k, int64_t warmup, int64_t steps,
                              bool repair, uint64_t job_id) {
  v1::JobSpec spec;
  spec.set_model(absl::GetFlag(FLAGS_model));
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(k);
  spec.set_global_batch(absl::GetFlag(FLAGS_batch) * k);
  spec.set_steps(warmup + steps);
  spec.set_seed(1);
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(0.05f);
  auto hub = TcpPeerHub::Start("127.0.0.1", 0);
  if (!hub.ok()) return hub.status();
  const std::string addr = absl::StrCat("127.0.0.1:", (*hub)->port());
  std::vector<std::unique_ptr<StateBoard>> boards;
  for (int r = 0; r < k; ++r) boards.push_back(std::make_unique<StateBoard>());
  InstantReporter reporter;
  const Logger logger(std::make_shared<NullSink>(), std::make_shared<RealClock>());
  EndTimes ends(warmup + steps);
  std::vector<absl::Status> status(k);
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      TcpTransportOptions to;
      to.secret = std::string(dataauth::kSecretBytes, 'r');  // the job's data-plane secret
      auto t = TcpTransport::Create(hub->get(), job_id, r, std::vector<std::string>(k, addr), to);
      if (!t.ok()) {
        status[r] = t.status();
        return;
      }
      JobRunnerOptions o;
      o.job_id = job_id;
      o.spec = spec;
      o.rank = r;
      o.world = k;
      o.worker_id = absl::StrCat("w-", r);
      o.combine_timeout = absl::Seconds(60);
      if (r == 0) o.observer = &ends;
      o.logger = &logger;
      if (repair) {
        o.state_board = boards[r].get();
        o.fetch_state = [](int, int64_t, int64_t, absl::Time) -> absl::StatusOr<std::string> {
          return absl::UnavailableError("no fault in this bench");
        };
      }
      RingCombiner ring(t->get());
      JobRunner runner(o, &data, &ring, &reporter);
      status[r] = runner.Run().status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < k; ++r) {
    if (!status[r].ok()) return status[r];
  }
  const std::vector<double>& t = ends.t();
  std::vector<double> dt;
  for (int64_t i = warmup; i < warmup + steps; ++i) dt.push_back(t[i] - t[i - 1]);
  RunTimes out;
  out.median = Median(dt);
  out.mean = (t[warmup + steps - 1] - t[warmup - 1]) / static_cast<double>(steps);
  return out;
}

int Main() {
  SetBlasThreads(1);
  const int64_t steps = absl::GetFlag(FLAGS_steps), warmup = std::max<int64_t>(1, absl::GetFlag(FLAGS_warmup));
  const int repeats = absl::GetFlag(FLAGS_repeats), k = absl::GetFlag(FLAGS_k);
  auto job = bench::LoadMainJobBench(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_batch),
                                     "fashion-mnist");
  if (!job.ok()) {
    std::fprintf(stderr, "repair_cost: %s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  // Part 1.
  std::vector<double> without_us, with_us, without_mean_us, with_mean_us, diff_us;
  uint64_t job_id = 1;
  for (int i = 0; i < repeats; ++i) {
    for (bool repair : {false, true}) {
      auto dt = RunJob(job->data, k, warmup, steps, repair, job_id++);
      if (!dt.ok()) {
        std::fprintf(stderr, "repair_cost: %s\n", std::string(dt.status().message()).c_str());
        return 1;
      }
      (repair ? with_us : without_us).push_back(1e6 * dt->median);
      (repair ? with_mean_us : without_mean_us).push_back(1e6 * dt->mean);
    }
    diff_us.push_back(with_us.back() - without_us.back());
  }
  std::sort(without_us.begin(), without_us.end());
  std::sort(with_us.begin(), with_us.end());
  std::printf("repair_cost: %s, K=%d ring over raw TCP on loopback, batch %lld per rank, "
              "1 BLAS thread (core %s), %lld+%lld steps x %d runs per configuration "
              "(alternating)\n",
              job->replica->model().Describe().c_str(), k,
              static_cast<long long>(absl::GetFlag(FLAGS_batch)), BlasCoreName(),
              static_cast<long long>(warmup), static_cast<long long>(steps), repeats);
  const double a = Median(without_us), b = Median(with_us);
  std::printf("%-52s %10.1f  (runs: min %.1f, max %.1f; mean step %.1f)\n",
              "step, without the repair path (us)", a, without_us.front(), without_us.back(),
              Median(without_mean_us));
  std::printf("%-52s %10.1f  (runs: min %.1f, max %.1f; mean step %.1f)\n",
              "step, with state board + in-combine check (us)", b, with_us.front(),
              with_us.back(), Median(with_mean_us));
  std::printf("%-52s %+10.1f  (%+.2f%%)\n", "difference of the medians (us)", b - a,
              100 * (b - a) / a);
  std::printf("%-52s %+10.1f\n", "median of the paired differences (us)", Median(diff_us));

  // Part 2: the reporter thread's hashing of one step's state.
  const Replica& replica = *job->replica;
  const absl::Span<const float> w = replica.params();
  std::vector<int64_t> starts;
  for (const ParamBlock& blk : replica.model().layout()) starts.push_back(blk.offset);
  const absl::Span<const float> slots = replica.optimizer().slots();
  std::vector<double> weights_us, location_us;
  uint64_t sink = 0;
  WeightHasher hasher;
  const int kHashes = 200;
  for (int i = 0; i < 5 * repeats; ++i) {
    double t0 = NowSeconds();
    for (int j = 0; j < kHashes; ++j) sink ^= HashWeights(w).lo;
    weights_us.push_back(1e6 * (NowSeconds() - t0) / kHashes);
    t0 = NowSeconds();
    for (int j = 0; j < kHashes; ++j) {
      for (size_t s = 0; s < starts.size(); ++s) {
        const size_t begin = static_cast<size_t>(starts[s]);
        const size_t end = s + 1 < starts.size() ? static_cast<size_t>(starts[s + 1]) : w.size();
        sink ^= HashBlock(w.subspan(begin, end - begin));
      }
      hasher.Reset();
      hasher.UpdateU64(0);
      hasher.UpdateU64(static_cast<uint64_t>(replica.optimizer().steps()));
      hasher.UpdateU64(slots.size());
      hasher.Update(slots);
      sink ^= hasher.Finish().lo;
    }
    location_us.push_back(1e6 * (NowSeconds() - t0) / kHashes);
  }
  std::printf("reporter thread, per step (in cache, %lld weights, %zu tensors, %zu optimizer "
              "floats; checksum %llx):\n",
              static_cast<long long>(w.size()), starts.size(), slots.size(),
              static_cast<unsigned long long>(sink & 0xff));
  std::printf("%-52s %10.1f\n", "  weights hash (XXH3-128) (us)", Median(weights_us));
  std::printf("%-52s %10.1f\n", "  + per-tensor and optimizer hashes (us)", Median(location_us));
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lockstep::Main();
}
