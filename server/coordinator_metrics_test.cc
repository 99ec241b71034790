#include "server/coordinator_metrics.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string Hash(int i) { return absl::StrFormat("%032x", i); }

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  CoordinatorMetricsTest() : clock_(absl::FromUnixSeconds(1000)) {
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    coord_ = std::make_unique<Coordinator>(o, &clock_);
    RegisterCoordinatorMetrics(coord_.get(), &registry_);
  }

  std::string Register(int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(absl::StrCat("host", i));
    auto r = coord_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }
  v1::HeartbeatReply Beat(const std::string& w, uint64_t job = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    auto r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }
  uint64_t Submit(int k) {
    v1::SubmitJobRequest req;
    v1::JobSpec& spec = *req.mutable_spec();
    spec.set_model("mlp:8");
    spec.set_sync_mode(v1::RING);
    spec.set_num_workers(k);
    spec.set_global_batch(16);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(10);
    auto r = coord_->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }
  void Step(uint64_t job, int rank, const std::string& w, int64_t step, const std::string& h) {
    v1::ReportStepRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(h);
    req.set_loss(1.0);
    req.set_examples(8);
    EXPECT_TRUE(coord_->ReportStep(req).ok());
  }
  // The sample lines of the rendered text (no # lines).
  std::string Samples() {
    std::string out;
    for (absl::string_view line : absl::StrSplit(registry_.Render(), '\n')) {
      if (!line.empty() && line[0] != '#') absl::StrAppend(&out, line, "\n");
    }
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
  MetricsRegistry registry_;
};

TEST_F(CoordinatorMetricsTest, JobsWorkersStepsChecksAndThroughput) {
  const std::string w1 = Register(1), w2 = Register(2);
  Register(3);
  const uint64_t job = Submit(2);
  Submit(2);  // waits PENDING: one worker is idle
  for (const std::string& w : {w1, w2}) {
    ASSERT_TRUE(Beat(w).has_assignment());
    Beat(w, job);
  }
  Step(job, 0, w1, 0, Hash(1));
  Step(job, 1, w2, 0, Hash(1));
  clock_.Advance(absl::Seconds(1));
  Step(job, 0, w1, 1, Hash(2));
  Step(job, 1, w2, 1, Hash(2));
  EXPECT_EQ(Samples(),
            "lockstep_hash_checks_total 2\n"
            "lockstep_hash_mismatches_total 0\n"
            "lockstep_job_examples_per_second{job=\"1\"} 16\n"
            "lockstep_jobs{state=\"CANCELLED\"} 0\n"
            "lockstep_jobs{state=\"FAILED\"} 0\n"
            "lockstep_jobs{state=\"PENDING\"} 1\n"
            "lockstep_jobs{state=\"RUNNING\"} 1\n"
            "lockstep_jobs{state=\"SUCCEEDED\"} 0\n"
            "lockstep_jobs_submitted_total 2\n"
            "lockstep_steps_total 2\n"
            "lockstep_workers{state=\"BUSY\"} 2\n"
            "lockstep_workers{state=\"IDLE\"} 1\n"
            "lockstep_workers{state=\"LOST\"} 0\n"
            "lockstep_workers_lost_total 0\n");

  // Rank 1 drifts at step 2: a mismatch, and the job halts FAILED.
  Step(job, 0, w1, 2, Hash(3));
  Step(job, 1, w2, 2, Hash(4));
  std::string s = Samples();
  EXPECT_TRUE(absl::StrContains(s, "lockstep_hash_checks_total 3\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "lockstep_hash_mismatches_total 1\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "lockstep_jobs{state=\"FAILED\"} 1\n")) << s;
  EXPECT_FALSE(absl::StrContains(s, "lockstep_job_examples_per_second")) << s;

  // Nobody heartbeats for 4 s: all three workers are lost.
  clock_.Advance(absl::Seconds(4));
  coord_->Tick();
  s = Samples();
  EXPECT_TRUE(absl::StrContains(s, "lockstep_workers{state=\"LOST\"} 3\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "lockstep_workers_lost_total 3\n")) << s;
  EXPECT_EQ(coord_->counters().workers_lost, 3);
}

}  // namespace
}  // namespace lockstep
