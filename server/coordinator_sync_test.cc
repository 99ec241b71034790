// Coordinator: step reports and the per-step replica check (matching
// hashes, batches, divergence, no majority, repair, duplicates, bad
// senders) (server/coordinator_test_fixture.h).
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_fixture.h"

namespace lockstep {
namespace testing_coordinator {
namespace {

TEST_F(CoordinatorTest, StepsWithMatchingHashesAreChecked) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(7), 1.0, 1).ok());
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(7), 2.0, 1).ok());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.checked_steps(), 0);
  EXPECT_EQ(st.step(), 0);
  EXPECT_EQ(st.ranks(0).step(), 1);
  EXPECT_EQ(st.ranks(2).step(), 0);
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 2, w[2], 0, Hash(7), 3.0, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stop());
  st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.checked_steps(), 1);
  EXPECT_EQ(st.mismatched_steps(), 0);
  EXPECT_EQ(st.step(), 1);
  EXPECT_EQ(st.total_steps(), 10);
  EXPECT_DOUBLE_EQ(st.loss(), (1.0 + 2.0 + 3.0 * 2) / 4);  // examples-weighted
  EXPECT_DOUBLE_EQ(st.examples_per_second(), 4.0 / 2.0);
  EXPECT_FALSE(st.out_of_sync());
  for (const v1::RankStatus& rs : st.ranks()) {
    EXPECT_TRUE(rs.in_sync());
    EXPECT_EQ(rs.last_hash(), Hash(7));
  }
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checked_steps(), 1);
  EXPECT_EQ(h->first_mismatch_step(), -1);
  ASSERT_EQ(h->checks_size(), 1);
  EXPECT_EQ(h->checks(0).step(), 0);
  EXPECT_TRUE(h->checks(0).all_match());
  EXPECT_EQ(h->checks(0).majority_hash(), Hash(7));
  EXPECT_EQ(h->checks(0).differing_ranks_size(), 0);
  ASSERT_EQ(h->checks(0).rank_hashes_size(), 3);
  EXPECT_EQ(h->checks(0).rank_hashes(2), Hash(7));

  // Second step: throughput counts the steps after the first, over the time
  // since the first completed (start-up excluded).
  clock_.Advance(absl::Seconds(2));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Step(job, r, w[r], 1, Hash(8), 0.5, 4).ok());
  st = Job(job);
  EXPECT_EQ(st.checked_steps(), 2);
  EXPECT_EQ(st.step(), 2);
  EXPECT_DOUBLE_EQ(st.loss(), 0.5);
  EXPECT_DOUBLE_EQ(st.examples_per_second(), 12.0 / 2.0);
}

// ReportSteps (issue 9: a worker sends two steps' reports per call): the
// reports count as that many ReportStep calls, in order; a mismatch in the
// batch's first step fails the job naming that step and stops the batch
// there; a batch that is empty or too long is refused naming `reports`.
TEST_F(CoordinatorTest, StepReportBatchesActAsReportsInOrder) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w, "halt");
  auto report = [&](int rank, int64_t step, const std::string& hash) {
    v1::ReportStepRequest req;
    req.set_worker_id(w[rank]);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(hash);
    req.set_loss(1.0);
    req.set_examples(8);
    return req;
  };
  v1::StepReports batch;
  *batch.add_reports() = report(0, 0, Hash(1));
  *batch.add_reports() = report(0, 1, Hash(2));
  absl::StatusOr<v1::ReportStepReply> r = coord_->ReportSteps(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stop());
  EXPECT_EQ(Job(job).ranks(0).step(), 2);  // steps 0 and 1 reported
  // Rank 1: step 0 matches, step 1 is checked next.
  batch.Clear();
  *batch.add_reports() = report(1, 0, Hash(1));
  *batch.add_reports() = report(1, 1, Hash(2));
  r = coord_->ReportSteps(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stop());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.checked_steps(), 2);
  EXPECT_EQ(st.step(), 2);
  EXPECT_EQ(st.mismatched_steps(), 0);
  // A bad report names its step (and changes nothing).
  batch.Clear();
  *batch.add_reports() = report(0, 2, "xyz");
  r = coord_->ReportSteps(batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("report of step 2: weights_hash: expected 32 hex"),
            std::string::npos)
      << r.status();
  // Steps 2 and 3: rank 1 differs at step 2; its batch stops there.
  batch.Clear();
  *batch.add_reports() = report(0, 2, Hash(3));
  *batch.add_reports() = report(0, 3, Hash(4));
  ASSERT_TRUE(coord_->ReportSteps(batch).ok());
  batch.Clear();
  *batch.add_reports() = report(1, 2, Hash(9));
  *batch.add_reports() = report(1, 3, Hash(4));
  r = coord_->ReportSteps(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stop());
  st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find("replicas diverged at step 2: "), std::string::npos) << st.reason();
  EXPECT_EQ(st.ranks(1).step(), 3);  // step 3's report was not looked at
  // Bounds.
  batch.Clear();
  r = coord_->ReportSteps(batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("reports: expected 1 to 8 step reports, got 0"),
            std::string::npos)
      << r.status();
  for (int i = 0; i < 9; ++i) *batch.add_reports() = report(0, 10 + i, Hash(1));
  EXPECT_EQ(coord_->ReportSteps(batch).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, DivergedRankFailsJobAndIsNamed) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w, "halt");
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Step(job, r, w[r], 0, Hash(1)).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 1, Hash(2)).ok());
  ASSERT_TRUE(Step(job, 1, w[1], 1, Hash(2)).ok());
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 2, w[2], 1, Hash(3));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stop());  // the reporter learns at once
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_TRUE(st.out_of_sync());
  // No block hashes in these reports: the block is "weights".
  EXPECT_EQ(st.reason(),
            "replicas diverged at step 1: rank 2 differs from the majority in block weights");
  EXPECT_EQ(st.last_divergence(), "step 1: rank 2 differs from the majority in block weights");
  EXPECT_EQ(st.checked_steps(), 2);
  EXPECT_EQ(st.mismatched_steps(), 1);
  EXPECT_TRUE(st.ranks(0).in_sync());
  EXPECT_FALSE(st.ranks(2).in_sync());
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->first_mismatch_step(), 1);
  ASSERT_EQ(h->checks_size(), 2);
  const v1::SyncCheck& c = h->checks(1);
  EXPECT_FALSE(c.all_match());
  ASSERT_EQ(c.differing_ranks_size(), 1);
  EXPECT_EQ(c.differing_ranks(0), 2);
  EXPECT_EQ(c.rank_hashes(2), Hash(3));
  EXPECT_EQ(c.rank_hashes(0), Hash(2));
  // Every further report / heartbeat says stop.
  r = Step(job, 0, w[0], 2, Hash(4));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stop());
  EXPECT_EQ(r->reason(), absl::StrCat("job 1 is FAILED: ", st.reason()));
  EXPECT_TRUE(Beat(w[1], job).stop_job());
}

// K = 2 and the two hashes differ: there is no majority, so neither rank
// is blamed alone (issue 10: the tie used to blame rank 1 whichever had
// drifted) and both are out of sync; repair (the default) cannot copy from
// a majority, so the job fails.
TEST_F(CoordinatorTest, TwoRanksThatDifferHaveNoMajority) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(9)).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(5)).ok());
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.reason(),
            "replicas diverged at step 0: ranks 0 and 1 differ, no majority (first differing "
            "block weights): on_divergence=repair has no majority to copy from and no checkpoint "
            "to resolve from (the job writes none: set --checkpoint_dir and "
            "--checkpoint_every_steps)");
  EXPECT_FALSE(st.ranks(0).in_sync());
  EXPECT_FALSE(st.ranks(1).in_sync());
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->checks(0).no_majority());
}

// K = 2, no majority, in a job that writes checkpoints every 2 steps: the
// job keeps running (the ranks roll back to the last checkpoint before it in
// the next step's combine); the next check must say they did and match,
// and counts as a repair. A next check without the rollback fails the job.
TEST_F(CoordinatorTest, NoMajorityWithCheckpointsAwaitsTheRollback) {
  for (bool rolled_back : {true, false}) {
    SCOPED_TRACE(rolled_back);
    std::vector<std::string> w;
    const int base = rolled_back ? 0 : 2;
    for (int i = 1; i <= 2; ++i) w.push_back(Register(base + i));
    v1::JobSpec spec = Spec(2);
    spec.set_checkpoint_dir("/tmp/lockstep-ck");
    spec.set_checkpoint_every_steps(2);
    const uint64_t job = Submit(spec);
    for (const std::string& worker : w) {
      EXPECT_TRUE(Beat(worker).has_assignment());
      Beat(worker, job);
    }
    for (int t = 0; t < 3; ++t) {
      for (int r = 0; r < 2; ++r) ASSERT_TRUE(Step(job, r, w[r], t, Hash(1 + t)).ok());
    }
    ASSERT_TRUE(Step(job, 0, w[0], 3, Hash(5)).ok());
    absl::StatusOr<v1::ReportStepReply> r = Step(job, 1, w[1], 3, Hash(6));
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->stop());
    v1::JobStatus st = Job(job);
    EXPECT_EQ(st.state(), v1::RUNNING);
    EXPECT_FALSE(st.ranks(0).in_sync());
    EXPECT_EQ(st.last_divergence(),
              "step 3: ranks 0 and 1 differ, no majority (first differing block weights)");
    for (int rank = 0; rank < 2; ++rank) {
      v1::ReportStepRequest req;
      req.set_worker_id(w[rank]);
      req.set_job_id(job);
      req.set_rank(rank);
      req.set_step(4);
      req.set_weights_hash(Hash(7));
      req.set_examples(8);
      req.set_rolled_back(rolled_back);
      req.set_rolled_back_to(rolled_back ? 2 : 0);
      req.set_rolled_back_at(rolled_back ? 4 : 0);
      ASSERT_TRUE(coord_->ReportStep(req).ok());
    }
    st = Job(job);
    absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->checks(3).note(),
              "divergence: ranks 0 and 1 differ, no majority (first differing block weights); "
              "resolving from the last checkpoint");
    if (rolled_back) {
      EXPECT_EQ(st.state(), v1::RUNNING);
      EXPECT_EQ(st.repairs(), 1);
      EXPECT_FALSE(st.out_of_sync());
      EXPECT_TRUE(st.ranks(0).in_sync() && st.ranks(1).in_sync());
      EXPECT_EQ(h->checks(4).note(),
                "rolled back in the combine of step 4: no majority, every rank reloaded the "
                "checkpoint of step 2 and computed steps 2 to 3 again");
    } else {
      EXPECT_EQ(st.state(), v1::FAILED);
      EXPECT_EQ(st.reason(),
                "replicas diverged at step 3: ranks 0 and 1 differ, no majority (first differing "
                "block weights); the ranks were to roll back to a checkpoint but reported step 4 "
                "without one");
    }
  }
}

// Repair (the default) with a majority: the drifted rank keeps running,
// every reply announces the repair boundary (6 steps on), the checks in
// between await it, and the first matching check at or after it records
// the repair; the job goes on and ends SUCCEEDED.
TEST_F(CoordinatorTest, ADriftedRankIsRepairedFromTheMajority) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w);  // Spec(k): enough steps for the boundary
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Step(job, r, w[r], 0, Hash(1)).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 1, Hash(2)).ok());
  ASSERT_TRUE(Step(job, 2, w[2], 1, Hash(2)).ok());
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 1, w[1], 1, Hash(3));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stop());
  EXPECT_EQ(r->repair_step(), 7);
  EXPECT_EQ(r->repair_source(), 0);
  ASSERT_EQ(r->repair_ranks_size(), 1);
  EXPECT_EQ(r->repair_ranks(0), 1);
  for (int64_t t = 2; t < 7; ++t) {
    for (int rank = 0; rank < 3; ++rank) {
      r = Step(job, rank, w[rank], t, rank == 1 ? Hash(100 + t) : Hash(10 + t));
      ASSERT_TRUE(r.ok());
      EXPECT_FALSE(r->stop()) << r->reason();
      EXPECT_EQ(r->repair_step(), 7);
    }
  }
  // A retried report (a duplicate) still announces the pending repair: the
  // worker reads a reply without one as "no repair pending".
  r = Step(job, 1, w[1], 6, Hash(106));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->repair_step(), 7);
  EXPECT_EQ(r->repair_source(), 0);
  for (int rank = 0; rank < 3; ++rank) ASSERT_TRUE(Step(job, rank, w[rank], 7, Hash(17)).ok());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.repairs(), 1);
  EXPECT_FALSE(st.out_of_sync());
  EXPECT_TRUE(st.ranks(1).in_sync());
  r = Step(job, 0, w[0], 8, Hash(18));
  EXPECT_EQ(r->repair_step(), 0);  // done: no longer announced
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checks(1).note(),
            "divergence: rank 1 differs from the majority in block weights; repair at step 7 "
            "from rank 0");
  EXPECT_EQ(h->checks(4).note(), "awaiting repair at step 7");
  EXPECT_EQ(h->checks(7).note(),
            "repaired: rank 1 copied rank 0's state at step 7 (divergence found at step 1)");
}

TEST_F(CoordinatorTest, DuplicateReportStepIsIgnored) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(1), 1.0).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(1), 1.0).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(6), 9.0).ok());  // first report wins
  EXPECT_EQ(Job(job).checked_steps(), 0);
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(1), 1.0).ok());
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(1), 1.0).ok());
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.checked_steps(), 1);
  EXPECT_EQ(st.mismatched_steps(), 0);
  EXPECT_DOUBLE_EQ(st.loss(), 1.0);
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checks_size(), 1);
}

TEST_F(CoordinatorTest, ReportStepValidatesSender) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  absl::StatusOr<v1::ReportStepReply> r = Step(42, 0, w[0], 0, Hash(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "job 42 not found");
  r = Step(job, 1, w[0], 0, Hash(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "worker w-1 is not rank 1 of job 1 (rank 1 is w-2)");
  r = Step(job, 2, w[0], 0, Hash(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "rank: expected in [0, 2) for job 1, got 2");
  r = Step(job, 0, w[0], 0, "not-a-hash");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("weights_hash"), absl::string_view::npos);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
}


}  // namespace
}  // namespace testing_coordinator
}  // namespace lockstep
