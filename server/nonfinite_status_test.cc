// Non-finite gradients at the coordinator (issue 10): skipped steps are
// counted once per step from the ranks' step reports and shown in
// JobStatus, and kept across a coordinator restart (--state_dir); a
// submitted spec's on_nonfinite is validated.
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/state/state_db.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

class NonFiniteStatusTest : public ::testing::Test {
 protected:
  NonFiniteStatusTest() : clock_(absl::FromUnixSeconds(1700000000)) { Restart(nullptr); }

  // A new coordinator (on `db` when not null: restores what it holds).
  void Restart(StateDb* db) {
    coord_.reset();
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    coord_ = std::make_unique<Coordinator>(o, &clock_);
    if (db != nullptr) {
      absl::Status s = coord_->AttachStateDb(db);
      EXPECT_TRUE(s.ok()) << s;
    }
  }

  v1::JobSpec Spec(int k, const std::string& policy) {
    v1::JobSpec spec;
    spec.set_model("mlp:8");
    spec.set_sync_mode(v1::RING);
    spec.set_num_workers(k);
    spec.set_global_batch(8 * k);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(10);
    spec.set_on_nonfinite(policy);
    return spec;
  }

  uint64_t StartJob(int k, std::vector<std::string>* workers) {
    for (int i = 1; i <= k; ++i) {
      v1::RegisterWorkerRequest req;
      req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
      auto r = coord_->RegisterWorker(req);
      EXPECT_TRUE(r.ok()) << r.status();
      workers->push_back(r.ok() ? r->worker_id() : "");
    }
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = Spec(k, "skip");
    auto s = coord_->SubmitJob(submit);
    EXPECT_TRUE(s.ok()) << s.status();
    const uint64_t job = s.ok() ? s->job_id() : 0;
    for (const std::string& w : *workers) {
      for (uint64_t j : {uint64_t{0}, job}) {
        v1::HeartbeatRequest beat;
        beat.set_worker_id(w);
        beat.set_job_id(j);
        EXPECT_TRUE(coord_->Heartbeat(beat).ok());
      }
    }
    return job;
  }

  absl::Status Step(uint64_t job, int rank, const std::string& worker, int64_t step,
                    bool skipped, std::vector<int> ranks = {}) {
    v1::ReportStepRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(absl::StrFormat("%032x", step + 1));
    req.set_loss(1.0);
    req.set_examples(8);
    req.set_update_skipped(skipped);
    for (int r : ranks) req.add_nonfinite_ranks(r);
    return coord_->ReportStep(req).status();
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
};

TEST_F(NonFiniteStatusTest, SkippedStepsAreCountedOncePerStepWithTheirRanks) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w);
  ASSERT_EQ(coord_->GetJob(job)->state(), v1::RUNNING);
  for (int64_t step = 0; step < 6; ++step) {
    const bool skipped = step == 2 || step == 4;
    const std::vector<int> ranks = step == 2 ? std::vector<int>{1} : std::vector<int>{0, 2};
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(Step(job, r, w[r], step, skipped, skipped ? ranks : std::vector<int>{}).ok());
    }
    // A duplicate report of the same step does not count again.
    ASSERT_TRUE(Step(job, 0, w[0], step, skipped, skipped ? ranks : std::vector<int>{}).ok());
    const v1::JobStatus st = *coord_->GetJob(job);
    EXPECT_EQ(st.skipped_steps(), step >= 4 ? 2 : step >= 2 ? 1 : 0) << "step " << step;
    if (step >= 2) {
      EXPECT_EQ(st.last_skipped_step(), step >= 4 ? 4 : 2);
      const std::vector<int> got(st.last_nonfinite_ranks().begin(),
                                 st.last_nonfinite_ranks().end());
      EXPECT_EQ(got, step >= 4 ? (std::vector<int>{0, 2}) : (std::vector<int>{1}));
    }
    EXPECT_EQ(st.state(), v1::RUNNING);
    EXPECT_FALSE(st.out_of_sync());
  }
}

TEST_F(NonFiniteStatusTest, TheCountSurvivesACoordinatorRestart) {
  std::string dir = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                 "/nonfinite_state_XXXXXX");
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  auto db = StateDb::Open({dir + "/state"});
  ASSERT_TRUE(db.ok()) << db.status();
  Restart(db->get());
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  for (int64_t step = 0; step < 4; ++step) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(Step(job, r, w[r], step, step == 1, step == 1 ? std::vector<int>{1}
                                                               : std::vector<int>{})
                      .ok());
    }
    clock_.Advance(absl::Seconds(2));  // the job row is written at most every 1 s
  }
  ASSERT_TRUE((*db)->Flush(absl::Now() + absl::Seconds(10)).ok());
  coord_.reset();
  db->reset();
  auto reopened = StateDb::Open({dir + "/state"});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  Restart(reopened->get());
  const v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.skipped_steps(), 1);
  EXPECT_EQ(st.last_skipped_step(), 1);
  ASSERT_EQ(st.last_nonfinite_ranks_size(), 1);
  EXPECT_EQ(st.last_nonfinite_ranks(0), 1);
  coord_.reset();
}

TEST_F(NonFiniteStatusTest, ABadPolicyIsRefusedNamingTheField) {
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = Spec(1, "ignore");
  auto s = coord_->SubmitJob(submit);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "spec.on_nonfinite: expected fail or skip, got \"ignore\"");
}

}  // namespace
}  // namespace lockstep
