#include "worker/worker_metrics.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/inproc_transport.h"
#include "common/clock.h"
#include "common/collective/ps_aggregator.h"
#include "common/log.h"
#include "common/metrics/metrics.h"
#include "gtest/gtest.h"
#include "worker/job_runner.h"

namespace lockstep {
namespace {

// The sample lines of `name` (no # lines), as rendered.
std::vector<std::string> Lines(const MetricsRegistry& r, const std::string& name) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(r.Render(), '\n')) {
    if (absl::StartsWith(line, name + "{") || absl::StartsWith(line, name + " ")) {
      out.emplace_back(line);
    }
  }
  return out;
}

TEST(WorkerMetrics, CountsTransportPayloadBytes) {
  MetricsRegistry r;
  WorkerMetrics m(&r);
  auto eps = MakeInProcessTransports(2);
  auto a = m.CountTransport(eps[0].get(), "tcp");
  auto b = m.CountTransport(eps[1].get(), "tcp");
  EXPECT_EQ(a->rank(), 0);
  EXPECT_EQ(b->world_size(), 2);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<uint8_t> msg(12, 7), out(12);
  ASSERT_TRUE(a->Send(1, MakeKey(1, 0, 0, 0), msg, deadline).ok());
  ASSERT_TRUE(a->SendBorrowed(1, MakeKey(1, 0, 0, 1), absl::MakeSpan(msg).subspan(0, 5),
                              deadline)
                  .ok());
  ASSERT_TRUE(a->FlushSends(deadline).ok());
  ASSERT_TRUE(b->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(out), deadline).ok());
  // A failed receive (wrong size) counts nothing.
  EXPECT_FALSE(b->Recv(0, MakeKey(1, 0, 0, 1), absl::MakeSpan(out), deadline).ok());
  EXPECT_EQ(Lines(r, "lockstep_transport_sent_bytes_total"),
            (std::vector<std::string>{"lockstep_transport_sent_bytes_total{transport=\"grpc\"} 0",
                                      "lockstep_transport_sent_bytes_total{transport=\"ps\"} 0",
                                      "lockstep_transport_sent_bytes_total{transport=\"shm\"} 0",
                                      "lockstep_transport_sent_bytes_total{transport=\"tcp\"} 17"}));
  EXPECT_EQ(
      Lines(r, "lockstep_transport_received_bytes_total"),
      (std::vector<std::string>{"lockstep_transport_received_bytes_total{transport=\"grpc\"} 0",
                                "lockstep_transport_received_bytes_total{transport=\"ps\"} 0",
                                "lockstep_transport_received_bytes_total{transport=\"shm\"} 0",
                                "lockstep_transport_received_bytes_total{transport=\"tcp\"} 12"}));
}

TEST(WorkerMetrics, CountsPsBytesAndErrors) {
  MetricsRegistry r;
  WorkerMetrics m(&r);
  auto clients = MakeInProcessPsClients(/*num_workers=*/1, /*num_shards=*/1, /*n=*/4);
  auto c = m.CountPs(clients[0].get());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<float> grad = {1, 2, 3, 4}, out(4);
  int64_t count = 0;
  ASSERT_TRUE(c->Push(1, 0, 0, grad, 5, deadline).ok());
  ASSERT_TRUE(c->Pull(1, 0, 0, absl::MakeSpan(out), &count, deadline).ok());
  EXPECT_EQ(count, 5);
  // Nobody pushed step 1: the pull runs into its (past) deadline.
  EXPECT_FALSE(c->Pull(1, 1, 0, absl::MakeSpan(out), &count, absl::Now()).ok());
  EXPECT_EQ(Lines(r, "lockstep_transport_sent_bytes_total{transport=\"ps\"}"),
            std::vector<std::string>{"lockstep_transport_sent_bytes_total{transport=\"ps\"} 24"});
  EXPECT_EQ(
      Lines(r, "lockstep_transport_received_bytes_total{transport=\"ps\"}"),
      std::vector<std::string>{"lockstep_transport_received_bytes_total{transport=\"ps\"} 24"});
  EXPECT_EQ(Lines(r, "lockstep_worker_rpc_errors_total"),
            std::vector<std::string>{
                "lockstep_worker_rpc_errors_total{method=\"Pull\",code=\"DEADLINE_EXCEEDED\"} 1"});
}

TEST(WorkerMetrics, StepsExamplesTimesAndRate) {
  MetricsRegistry r;
  WorkerMetrics m(&r);
  StepTiming t;
  t.examples = 60;
  t.compute_seconds = 0.25;
  t.exposed_seconds = 0.25;
  t.communication_seconds = 0.25;
  t.wait_seconds = 0.125;  // 0.625 s per step: compute + exposed + wait
  m.OnStep(t);
  // Less than 1 s of steps: no rate yet.
  EXPECT_EQ(Lines(r, "lockstep_worker_examples_per_second"),
            std::vector<std::string>{"lockstep_worker_examples_per_second 0"});
  m.OnStep(t);  // 120 examples in 1.25 s
  EXPECT_EQ(Lines(r, "lockstep_worker_examples_per_second"),
            std::vector<std::string>{"lockstep_worker_examples_per_second 96"});
  EXPECT_EQ(Lines(r, "lockstep_worker_steps_total"),
            std::vector<std::string>{"lockstep_worker_steps_total 2"});
  EXPECT_EQ(Lines(r, "lockstep_worker_examples_total"),
            std::vector<std::string>{"lockstep_worker_examples_total 120"});
  EXPECT_EQ(Lines(r, "lockstep_worker_step_wait_seconds_sum"),
            std::vector<std::string>{"lockstep_worker_step_wait_seconds_sum 0.25"});
  EXPECT_EQ(Lines(r, "lockstep_worker_step_compute_seconds_bucket{le=\"0.25\"}"),
            std::vector<std::string>{"lockstep_worker_step_compute_seconds_bucket{le=\"0.25\"} 2"});
  EXPECT_EQ(Lines(r, "lockstep_worker_step_compute_seconds_bucket{le=\"0.1\"}"),
            std::vector<std::string>{"lockstep_worker_step_compute_seconds_bucket{le=\"0.1\"} 0"});
  m.OnJobEnd(1);
  EXPECT_EQ(Lines(r, "lockstep_worker_examples_per_second"),
            std::vector<std::string>{"lockstep_worker_examples_per_second 0"});
  EXPECT_EQ(Lines(r, "lockstep_worker_jobs_total"),
            std::vector<std::string>{"lockstep_worker_jobs_total 1"});
}

// ---- the job runner's StepTiming ----

void Spin(absl::Duration d) {
  const auto end = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(d);
  while (std::chrono::steady_clock::now() < end) {
  }
}

// World of one: the buffer is already the sum; takes a known time.
class SlowIdentityCombiner : public GradientCombiner {
 public:
  absl::Status Combine(uint64_t, int64_t, absl::Span<float>, int64_t*, absl::Duration) override {
    Spin(absl::Milliseconds(3));
    return absl::OkStatus();
  }
};

// Answers each report 2 ms after the job thread finished its step (the
// observer's OnStep, the last thing the job thread does in a step before
// the next step's wait for the reply).
class SlowReporter : public JobReporter {
 public:
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& r) override {
    {
      absl::MutexLock l(&mu_);
      auto seen = [this, &r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return observed_ > r.step(); };
      mu_.Await(absl::Condition(&seen));
    }
    Spin(absl::Milliseconds(2));
    return false;
  }
  void Observed(int64_t step) {
    absl::MutexLock l(&mu_);
    observed_ = step + 1;
  }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }

 private:
  absl::Mutex mu_;
  int64_t observed_ ABSL_GUARDED_BY(mu_) = 0;
};

class Recorder : public StepObserver {
 public:
  explicit Recorder(SlowReporter* reporter = nullptr) : reporter_(reporter) {}
  void OnStep(const StepTiming& t) override {
    const auto now = std::chrono::steady_clock::now();
    {
      absl::MutexLock l(&mu_);
      steps_.push_back(t);
      called_.push_back(now);
    }
    if (reporter_ != nullptr) reporter_->Observed(t.step);
  }
  // When each OnStep was called.
  std::vector<std::chrono::steady_clock::time_point> called() {
    absl::MutexLock l(&mu_);
    return called_;
  }
  std::vector<StepTiming> steps() {
    absl::MutexLock l(&mu_);
    return steps_;
  }

 private:
  SlowReporter* const reporter_;
  absl::Mutex mu_;
  std::vector<StepTiming> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<std::chrono::steady_clock::time_point> called_ ABSL_GUARDED_BY(mu_);
};

TEST(JobRunnerObserver, SplitsEachStepIntoComputeCommunicationAndWait) {
  TrainTest data;
  data.train.name = "tiny";
  data.train.dim = 2;
  data.train.num_classes = 2;
  data.train.num_examples = 10;
  for (int i = 0; i < 10; ++i) {
    data.train.x.push_back(static_cast<float>(i));
    data.train.x.push_back(1.0f);
    data.train.y.push_back(static_cast<float>(i % 2));
  }
  JobRunnerOptions o;
  o.job_id = 9;
  o.spec.set_model("softmax");
  o.spec.set_sync_mode(v1::RING);
  o.spec.set_num_workers(1);
  o.spec.set_global_batch(4);  // steps of 4, 4, 2 examples per epoch
  o.spec.set_epochs(2);
  o.spec.mutable_optimizer()->set_kind("sgd");
  o.spec.mutable_lr()->set_base_lr(0.1f);
  SlowReporter reporter;
  Recorder recorder(&reporter);
  o.observer = &recorder;
  // No log lines (warnings only): nothing slow between a step's end and
  // the next step's wait.
  auto sink = std::make_shared<StringLogSink>();
  const Logger logger(sink, std::make_shared<RealClock>(),
                      LogOptions{LogFormat::kText, LogLevel::kWarn});
  o.logger = &logger;
  // Lag 0: each step waits for the previous step's reply (2 ms), so that
  // wait shows in every step but the first.
  o.report_lag = 0;
  SlowIdentityCombiner combiner;
  JobRunner runner(o, &data, &combiner, &reporter);
  auto out = runner.Run();
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<StepTiming> steps = recorder.steps();
  const auto called = recorder.called();
  ASSERT_EQ(steps.size(), 6u);
  const std::vector<int64_t> examples = {4, 4, 2, 4, 4, 2};
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].job, 9u);
    EXPECT_EQ(steps[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(steps[i].examples, examples[i]);
    EXPECT_GE(steps[i].communication_seconds, 0.003);
    EXPECT_EQ(steps[i].exposed_seconds, steps[i].communication_seconds);  // no overlap
    // Step i's wait ends no earlier than the reply to step i-1, which comes
    // 2 ms after OnStep(i-1) was called; the wait starts at most `gap`
    // after that call (gap: from OnStep(i-1) to OnStep(i), less step i's
    // measured time), so wait >= 2 ms - gap, however the threads were
    // scheduled.
    if (i > 0) {
      const double gap =
          std::chrono::duration<double>(called[i] - called[i - 1]).count() -
          steps[i].step_seconds();
      EXPECT_GE(steps[i].wait_seconds, 0.002 - gap - 1e-6) << "step " << i << ", gap " << gap;
    }
    EXPECT_GE(steps[i].compute_seconds, 0.0);
  }
}

}  // namespace
}  // namespace lockstep
