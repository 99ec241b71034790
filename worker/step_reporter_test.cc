// StepReporter: the job thread runs at most `lag` steps ahead of the
// coordinator's replies, learns a stop at the next step boundary, flushes
// before the end, and never waits past its deadline. The fake coordinator
// answers only when the test opens its gate, so every expectation below is
// exact (no sleeps; polls with a deadline).
#include "worker/step_reporter.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Answers report i only after the test released i (Release(n): reports
// 0..n-1 may be answered). Stops the job at stop_at, fails at fail_at.
class GatedReporter : public JobReporter {
 public:
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& r) override {
    absl::MutexLock l(&mu_);
    received_.push_back(r);
    const int64_t i = static_cast<int64_t>(received_.size()) - 1;
    auto open = [this, i]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return released_ > i; };
    mu_.Await(absl::Condition(&open));
    if (r.step() == fail_at_) return absl::UnavailableError("coordinator: connection reset");
    return stop_at_ >= 0 && r.step() >= stop_at_;
  }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }

  void Release(int64_t n) {
    absl::MutexLock l(&mu_);
    released_ = n;
  }
  int64_t received() {
    absl::MutexLock l(&mu_);
    return static_cast<int64_t>(received_.size());
  }
  std::vector<v1::ReportStepRequest> reports() {
    absl::MutexLock l(&mu_);
    return received_;
  }
  void set_stop_at(int64_t s) {
    absl::MutexLock l(&mu_);
    stop_at_ = s;
  }
  void set_fail_at(int64_t s) {
    absl::MutexLock l(&mu_);
    fail_at_ = s;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::ReportStepRequest> received_ ABSL_GUARDED_BY(mu_);
  int64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stop_at_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t fail_at_ ABSL_GUARDED_BY(mu_) = -1;
};

// Polls `f` until true or 10 s pass.
template <typename F>
bool Eventually(F f) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (f()) return true;
    std::this_thread::yield();
  }
  return f();
}

v1::ReportStepRequest Report(int64_t step) {
  v1::ReportStepRequest r;
  r.set_worker_id("w-1");
  r.set_job_id(3);
  r.set_step(step);
  return r;
}

// A job thread that submits steps 0..steps-1 with WaitForRoom first and
// records how far it got.
struct Job {
  explicit Job(StepReporter* reporter, int64_t steps, const std::vector<float>* weights)
      : thread([this, reporter, steps, weights] {
          for (int64_t s = 0; s < steps; ++s) {
            absl::Status st = reporter->WaitForRoom();
            if (st.ok()) st = reporter->WaitHashed();
            if (!st.ok()) {
              result = st;
              return;
            }
            v1::ReportStepRequest r = Report(s);
            reporter->Submit(&r, *weights);
            submitted.store(s + 1);
          }
          result = reporter->Flush();
          flushed.store(true);
        }) {}
  ~Job() { Join(); }
  void Join() {
    if (thread.joinable()) thread.join();
  }
  std::atomic<int64_t> submitted{0};
  std::atomic<bool> flushed{false};
  absl::Status result;
  std::thread thread;
};

TEST(StepReporter, RunsAtMostLagStepsAheadOfTheReplies) {
  for (int lag : {0, 1, 2, 3}) {
    SCOPED_TRACE(lag);
    GatedReporter coordinator;
    StepReporterOptions o;
    o.lag = lag;
    o.batch = 1;  // one report per call (batches: below)
    o.job_id = 3;
    StepReporter reporter(&coordinator, o);
    const std::vector<float> weights = {1.0f, 2.0f, 3.0f};
    {
      Job job(&reporter, 10, &weights);
      for (int64_t answered = 0; answered <= 10; ++answered) {
        // With `answered` replies in, the job submits exactly
        // answered + lag + 1 reports (step s starts once step s-lag-1 is
        // answered), and stays there.
        const int64_t expect = std::min<int64_t>(10, answered + lag + 1);
        ASSERT_TRUE(Eventually([&] { return job.submitted.load() == expect; }))
            << "answered " << answered << ": submitted " << job.submitted.load();
        ASSERT_TRUE(Eventually([&] { return coordinator.received() == std::min(expect, answered + 1); }));
        if (answered < 10) {
          // It does not run further while the reply is missing.
          EXPECT_EQ(job.submitted.load(), expect);
          EXPECT_FALSE(job.flushed.load());
        }
        coordinator.Release(answered + 1);
      }
      ASSERT_TRUE(Eventually([&] { return job.flushed.load(); }));
    }
    EXPECT_EQ(reporter.answered(), 10);
    // In step order, each with the hash of the weights it was given.
    const std::vector<v1::ReportStepRequest> got = coordinator.reports();
    ASSERT_EQ(got.size(), 10u);
    for (int64_t s = 0; s < 10; ++s) {
      EXPECT_EQ(got[s].step(), s);
      EXPECT_EQ(got[s].weights_hash(), HashWeights(weights).ToHex());
    }
    EXPECT_EQ(reporter.last_hash(), HashWeights(weights));
  }
}

TEST(StepReporter, AStopIsSeenAtTheNextBoundaryAndNothingIsSentAfterIt) {
  GatedReporter coordinator;
  coordinator.set_stop_at(4);  // the reply to step 4 says stop
  StepReporterOptions o;
  o.lag = 2;
  o.batch = 1;
  o.job_id = 3;
  StepReporter reporter(&coordinator, o);
  const std::vector<float> weights = {1.0f};
  Job job(&reporter, 100, &weights);
  coordinator.Release(4);  // steps 0..3 answered: the job submits 0..6
  ASSERT_TRUE(Eventually([&] { return job.submitted.load() == 7; }));
  EXPECT_EQ(job.submitted.load(), 7);
  coordinator.Release(100);
  job.Join();
  // Step 4's reply said stop: the job ends at the boundary before step 7,
  // and reports 5 and 6 (already queued) are not sent.
  EXPECT_EQ(job.result.code(), absl::StatusCode::kCancelled) << job.result;
  EXPECT_EQ(job.submitted.load(), 7);
  const std::vector<v1::ReportStepRequest> got = coordinator.reports();
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got.back().step(), 4);
}

TEST(StepReporter, StopAndErrorsComeBackNamingTheStep) {
  {
    GatedReporter coordinator;
    coordinator.set_stop_at(2);
    coordinator.Release(100);
    StepReporterOptions o;
    o.job_id = 3;
    o.batch = 1;
    StepReporter reporter(&coordinator, o);
    const std::vector<float> weights = {1.0f};
    Job job(&reporter, 100, &weights);
    job.Join();
    const absl::Status result = job.result;
    EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
    EXPECT_NE(result.message().find("job 3 stopped by the coordinator (its reply to step 2's"),
              std::string::npos)
        << result;
  }
  {
    GatedReporter coordinator;
    coordinator.set_fail_at(1);
    coordinator.Release(100);
    StepReporter reporter(&coordinator, StepReporterOptions{});
    const std::vector<float> weights = {1.0f};
    Job job(&reporter, 100, &weights);
    job.Join();
    const absl::Status result = job.result;
    EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
    EXPECT_EQ(coordinator.received(), 2);  // nothing after the failed report
  }
}

TEST(StepReporter, EveryWaitHasADeadlineAndTheStopFlagEndsIt) {
  GatedReporter coordinator;  // never answers until released
  std::atomic<bool> stop{false};
  StepReporterOptions o;
  o.lag = 0;
  o.timeout = absl::Milliseconds(50);
  o.stop = &stop;
  o.job_id = 3;
  StepReporter reporter(&coordinator, o);
  const std::vector<float> weights = {1.0f};
  ASSERT_TRUE(reporter.WaitForRoom().ok());
  v1::ReportStepRequest r = Report(0);
  reporter.Submit(&r, weights);
  absl::Status s = reporter.WaitForRoom();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("step 0 of job 3"), std::string::npos) << s;
  s = reporter.Flush();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  stop.store(true);
  s = reporter.Flush();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  coordinator.Release(1);  // lets the destructor join the reporter thread
}

TEST(StepReporter, SubmitHashesOnTheCallingThreadWhileTheReporterWaitsForAReply) {
  GatedReporter coordinator;
  StepReporterOptions o;
  o.lag = 2;
  o.batch = 1;
  o.block_starts = {0, 1};  // two blocks: {1.0} and {2.0} of a
  StepReporter reporter(&coordinator, o);
  const std::vector<float> a = {1.0f, 2.0f}, b = {3.0f, 4.0f};
  ASSERT_TRUE(reporter.WaitForRoom().ok());
  v1::ReportStepRequest r = Report(0);
  reporter.Submit(&r, a);
  // Hashed before Submit returned, whatever the reporter thread does.
  EXPECT_EQ(reporter.last_hash(), HashWeights(a));
  // The reporter thread blocks in step 0's ReportStep.
  ASSERT_TRUE(Eventually([&] { return coordinator.received() == 1; }));
  ASSERT_TRUE(reporter.WaitForRoom().ok());
  r = Report(1);
  reporter.Submit(&r, b);
  // Not answered, and b's hash is there: the job thread never waits for it.
  EXPECT_EQ(reporter.last_hash(), HashWeights(b));
  ASSERT_TRUE(reporter.WaitHashed().ok());
  coordinator.Release(2);
  ASSERT_TRUE(reporter.Flush().ok());
  ASSERT_EQ(coordinator.reports().size(), 2u);
  EXPECT_EQ(coordinator.reports()[0].weights_hash(), HashWeights(a).ToHex());
  EXPECT_EQ(coordinator.reports()[1].weights_hash(), HashWeights(b).ToHex());
  const absl::Span<const float> bs(b);
  ASSERT_EQ(coordinator.reports()[1].block_hashes_size(), 2);
  EXPECT_EQ(coordinator.reports()[1].block_hashes(0), HashBlock(bs.subspan(0, 1)));
  EXPECT_EQ(coordinator.reports()[1].block_hashes(1), HashBlock(bs.subspan(1, 1)));
}

TEST(StepReporter, HashesTakenDuringTheUpdateEqualThoseTakenAfterIt) {
  // Two replicas in lockstep: A hashes while the optimizer writes
  // (HashDuringUpdate), B after it (Submit alone). Every report must be
  // identical: weights hash, block hashes, optimizer hash and identity, for
  // plain SGD (no slots), momentum (slots streamed) and Adam (slots hashed
  // at Submit); also when a step is skipped (no update after
  // HashDuringUpdate) and when the weights change after the update
  // (DiscardUpdateHash).
  const int64_t n = 2 * UpdateObserver::kChunkFloats + 100;
  std::vector<OptimizerConfig> configs(3);
  configs[1].momentum = 0.9f;
  configs[2].kind = "adam";
  for (size_t c = 0; c < configs.size(); ++c) {
    auto opt_a = Optimizer::Create(configs[c], n);
    auto opt_b = Optimizer::Create(configs[c], n);
    ASSERT_TRUE(opt_a.ok() && opt_b.ok());
    GatedReporter coord_a, coord_b;
    coord_a.Release(1000);
    coord_b.Release(1000);
    StepReporterOptions o;
    o.block_starts = {0, 100, 3000};
    o.optimizer = opt_a->get();
    StepReporter rep_a(&coord_a, o);
    o.optimizer = opt_b->get();
    StepReporter rep_b(&coord_b, o);
    std::vector<float> wa(n), wb(n), g(n);
    for (int64_t i = 0; i < n; ++i) wa[i] = wb[i] = 0.001f * static_cast<float>(i % 97);
    for (int64_t step = 0; step < 6; ++step) {
      for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>((i * (step + 3)) % 13);
      ASSERT_TRUE(rep_a.WaitForRoom().ok());
      ASSERT_TRUE(rep_b.WaitForRoom().ok());
      UpdateObserver* observer = rep_a.HashDuringUpdate(wa);
      if (step != 2) {  // step 2 is skipped: no update after HashDuringUpdate
        (*opt_a)->Step(absl::MakeSpan(wa), g, 0.1f, observer);
        (*opt_b)->Step(absl::MakeSpan(wb), g, 0.1f);
      }
      if (step == 4) {  // a fault changes the weights after the update
        wa[5] += 1.0f;
        wb[5] += 1.0f;
        rep_a.DiscardUpdateHash();
      }
      v1::ReportStepRequest ra = Report(step), rb = Report(step);
      rep_a.Submit(&ra, wa);
      rep_b.Submit(&rb, wb);
      ASSERT_TRUE(rep_a.WaitHashed().ok());
      ASSERT_TRUE(rep_b.WaitHashed().ok());
      EXPECT_EQ(rep_a.last_hash(), HashWeights(wa)) << "config " << c << " step " << step;
      EXPECT_EQ(rep_a.last_hash(), rep_b.last_hash()) << "config " << c << " step " << step;
      EXPECT_EQ(rep_a.last_identity(), rep_b.last_identity())
          << "config " << c << " step " << step;
    }
    // Steps 0, 1, 3 and 5 used the hashes taken during the update; the
    // skipped step and the changed weights were hashed afterwards.
    EXPECT_EQ(rep_a.update_hashes_used(), 4) << "config " << c;
    EXPECT_EQ(rep_b.update_hashes_used(), 0) << "config " << c;
    ASSERT_TRUE(rep_a.Flush().ok());
    ASSERT_TRUE(rep_b.Flush().ok());
    const auto a = coord_a.reports(), b = coord_b.reports();
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].weights_hash(), b[i].weights_hash()) << "config " << c << " report " << i;
      EXPECT_EQ(a[i].optimizer_hash(), b[i].optimizer_hash()) << "config " << c << " report " << i;
      ASSERT_EQ(a[i].block_hashes_size(), 3);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(a[i].block_hashes(k), b[i].block_hashes(k)) << "config " << c << " block " << k;
      }
    }
    // The optimizer hash is HashReplica of no parameters (steps, slots).
    EXPECT_EQ(a.back().optimizer_hash(),
              HashReplica({}, (*opt_a)->steps(), (*opt_a)->slots()).ToHex());
    EXPECT_EQ(a.back().block_hashes(1),
              HashBlock(absl::MakeConstSpan(wa).subspan(100, 2900)));
  }
}

TEST(StepReporter, WithoutBlocksOrOptimizerReportsTheWeightsHashAlone) {
  // A K = 1 job's options (job_runner.cc): no block starts, no optimizer.
  // The hashes taken during a momentum update are still used, and equal
  // HashWeights; the reports carry no block hashes and no optimizer hash.
  const int64_t n = 3 * UpdateObserver::kChunkFloats + 7;
  OptimizerConfig config;
  config.momentum = 0.9f;
  auto opt = Optimizer::Create(config, n);
  ASSERT_TRUE(opt.ok());
  GatedReporter coord;
  coord.Release(1000);
  StepReporter rep(&coord, StepReporterOptions{});
  std::vector<float> w(n), g(n);
  for (int64_t i = 0; i < n; ++i) w[i] = 0.002f * static_cast<float>(i % 89);
  for (int64_t step = 0; step < 4; ++step) {
    for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>((i * (step + 5)) % 11);
    ASSERT_TRUE(rep.WaitForRoom().ok());
    (*opt)->Step(absl::MakeSpan(w), g, 0.1f, rep.HashDuringUpdate(w));
    v1::ReportStepRequest r = Report(step);
    rep.Submit(&r, w);
    ASSERT_TRUE(rep.WaitHashed().ok());
    EXPECT_EQ(rep.last_hash(), HashWeights(w)) << "step " << step;
    EXPECT_EQ(rep.last_identity(), HashWeights(w).Fold()) << "step " << step;
  }
  EXPECT_EQ(rep.update_hashes_used(), 4);
  ASSERT_TRUE(rep.Flush().ok());
  const auto reports = coord.reports();
  ASSERT_EQ(reports.size(), 4u);
  for (const v1::ReportStepRequest& r : reports) {
    EXPECT_EQ(r.block_hashes_size(), 0) << "step " << r.step();
    EXPECT_EQ(r.optimizer_hash(), "") << "step " << r.step();
    EXPECT_EQ(r.weights_hash().size(), 32u) << "step " << r.step();
  }
  EXPECT_EQ(reports.back().weights_hash(), HashWeights(w).ToHex());
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// Records every ReportSteps batch (the steps it carried) and answers it when
// the test released that many calls; stops the job at stop_at.
class BatchReporter : public JobReporter {
 public:
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest&) override {
    return absl::InternalError("the StepReporter sends batches");
  }
  absl::StatusOr<bool> ReportStepsWithReply(absl::Span<const v1::ReportStepRequest* const> reports,
                                            v1::ReportStepReply* reply) override {
    reply->Clear();
    absl::MutexLock l(&mu_);
    std::vector<int64_t> steps;
    bool stop = false;
    for (const v1::ReportStepRequest* r : reports) {
      steps.push_back(r->step());
      stop = stop || (stop_at_ >= 0 && r->step() >= stop_at_);
    }
    calls_.push_back(steps);
    const int64_t i = static_cast<int64_t>(calls_.size()) - 1;
    auto open = [this, i]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return released_ > i; };
    mu_.Await(absl::Condition(&open));
    return stop;
  }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }

  void Release(int64_t calls) {
    absl::MutexLock l(&mu_);
    released_ = calls;
  }
  std::vector<std::vector<int64_t>> calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  void set_stop_at(int64_t s) {
    absl::MutexLock l(&mu_);
    stop_at_ = s;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<int64_t>> calls_ ABSL_GUARDED_BY(mu_);
  int64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stop_at_ ABSL_GUARDED_BY(mu_) = -1;
};

TEST(StepReporterBatches, TwoStepsPerCallAndTheLagBoundHolds) {
  BatchReporter coordinator;
  StepReporterOptions o;  // lag 2, batch 2
  ASSERT_EQ(o.lag, 2);
  ASSERT_EQ(o.batch, 2);
  o.job_id = 3;
  StepReporter reporter(&coordinator, o);
  const std::vector<float> weights = {1.0f, 2.0f};
  {
    Job job(&reporter, 9, &weights);
    // Nothing answered: steps 0..2 run (step 3 needs step 0's reply), and
    // the pair (0, 1) went out as soon as step 1 was submitted.
    ASSERT_TRUE(Eventually([&] { return job.submitted.load() == 3; }));
    ASSERT_TRUE(Eventually([&] { return coordinator.calls().size() == 1u; }));
    EXPECT_EQ(coordinator.calls()[0], (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(job.submitted.load(), 3);
    // Its reply lets steps 3 and 4 run (step 5 needs step 2's reply); the
    // pair (2, 3) went out.
    coordinator.Release(1);
    ASSERT_TRUE(Eventually([&] { return job.submitted.load() == 5; }));
    ASSERT_TRUE(Eventually([&] { return coordinator.calls().size() == 2u; }));
    EXPECT_EQ(coordinator.calls()[1], (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(job.submitted.load(), 5);
    EXPECT_EQ(reporter.answered(), 2);
    coordinator.Release(100);
    job.Join();
    EXPECT_TRUE(job.result.ok()) << job.result;
  }
  // Nine reports in step order; the last one alone (Flush sends what is
  // queued without waiting for a pair).
  EXPECT_EQ(coordinator.calls(), (std::vector<std::vector<int64_t>>{
                                     {0, 1}, {2, 3}, {4, 5}, {6, 7}, {8}}));
  EXPECT_EQ(reporter.answered(), 9);
}

TEST(StepReporterBatches, AnOddLastReportIsSentWhenTheJobEndsWithoutFlush) {
  // A job thread that fails after step 2 returns without Flush: the pair
  // (0, 1) went out, step 2 waits for a partner that never comes. The
  // destructor sends it, so the coordinator's check of step 2 completes.
  BatchReporter coordinator;
  coordinator.Release(100);
  const std::vector<float> weights = {1.0f};
  {
    StepReporter reporter(&coordinator, StepReporterOptions{});
    for (int64_t s = 0; s < 3; ++s) {
      ASSERT_TRUE(reporter.WaitForRoom().ok());
      v1::ReportStepRequest r = Report(s);
      reporter.Submit(&r, weights);
    }
    ASSERT_TRUE(Eventually([&] { return coordinator.calls().size() == 1u; }));
  }
  EXPECT_EQ(coordinator.calls(), (std::vector<std::vector<int64_t>>{{0, 1}, {2}}));

  // A job whose stop flag is set (cancelled) does not send what is queued.
  BatchReporter cancelled;
  cancelled.Release(100);
  std::atomic<bool> stop{false};
  {
    StepReporterOptions o;
    o.stop = &stop;
    StepReporter reporter(&cancelled, o);
    for (int64_t s = 0; s < 3; ++s) {
      ASSERT_TRUE(reporter.WaitForRoom().ok());
      v1::ReportStepRequest r = Report(s);
      reporter.Submit(&r, weights);
    }
    ASSERT_TRUE(Eventually([&] { return cancelled.calls().size() == 1u; }));
    stop.store(true);
  }
  EXPECT_EQ(cancelled.calls(), (std::vector<std::vector<int64_t>>{{0, 1}}));

  // After a reply said stop, nothing more is sent, queued or not.
  BatchReporter stopping;
  stopping.set_stop_at(1);
  stopping.Release(100);
  {
    StepReporter reporter(&stopping, StepReporterOptions{});
    for (int64_t s = 0; s < 3; ++s) {
      if (!reporter.WaitForRoom().ok()) break;
      v1::ReportStepRequest r = Report(s);
      reporter.Submit(&r, weights);
    }
    ASSERT_TRUE(Eventually([&] { return reporter.WaitForRoom().code() == absl::StatusCode::kCancelled; }));
  }
  EXPECT_EQ(stopping.calls(), (std::vector<std::vector<int64_t>>{{0, 1}}));
}

TEST(StepReporterBatches, ABatchIsAtMostLagPlusOneReports) {
  // lag 0 (synchronous): every step waits for its own reply, so each call
  // carries one report although the batch is 2.
  BatchReporter coordinator;
  coordinator.Release(100);
  StepReporterOptions o;
  o.lag = 0;
  StepReporter reporter(&coordinator, o);
  const std::vector<float> weights = {1.0f};
  Job job(&reporter, 4, &weights);
  job.Join();
  EXPECT_TRUE(job.result.ok()) << job.result;
  EXPECT_EQ(coordinator.calls(),
            (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}}));
}

TEST(StepReporterBatches, AStopInABatchNamesItsStepsAndNothingIsSentAfterIt) {
  BatchReporter coordinator;
  coordinator.set_stop_at(3);  // the reply to the pair (2, 3) says stop
  StepReporterOptions o;
  o.job_id = 3;
  StepReporter reporter(&coordinator, o);
  const std::vector<float> weights = {1.0f};
  Job job(&reporter, 100, &weights);
  coordinator.Release(1);  // (0, 1) answered: steps 0..4 run
  ASSERT_TRUE(Eventually([&] { return job.submitted.load() == 5; }));
  coordinator.Release(100);
  job.Join();
  EXPECT_EQ(job.result.code(), absl::StatusCode::kCancelled) << job.result;
  EXPECT_NE(job.result.message().find(
                "job 3 stopped by the coordinator (its reply to the reports of steps 2-3 said "
                "stop)"),
            std::string::npos)
      << job.result;
  // The stop is seen before step 5 starts; report 4 (queued) is not sent.
  EXPECT_EQ(job.submitted.load(), 5);
  EXPECT_EQ(coordinator.calls(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
}

TEST(StepReporterBatches, TheDefaultSendsABatchReportByReportUpToTheStop) {
  GatedReporter one_by_one;  // implements ReportStep only
  one_by_one.set_stop_at(1);
  one_by_one.Release(100);
  const v1::ReportStepRequest a = Report(0), b = Report(1), c = Report(2);
  const std::vector<const v1::ReportStepRequest*> batch = {&a, &b, &c};
  v1::ReportStepReply reply;
  absl::StatusOr<bool> stop = one_by_one.ReportStepsWithReply(batch, &reply);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_TRUE(*stop);
  ASSERT_EQ(one_by_one.reports().size(), 2u);  // report 2 is not sent after the stop
  EXPECT_EQ(one_by_one.reports()[1].step(), 1);
}

}  // namespace
}  // namespace lockstep
