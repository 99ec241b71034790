#include "server/sync_checker.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

const std::string kA(32, 'a'), kB(32, 'b'), kC(32, 'c');

StepReport Report(const std::string& hash, double loss = 0, int64_t examples = 0,
                  int64_t epoch = 0) {
  StepReport r;
  r.hash = hash;
  r.loss = loss;
  r.examples = examples;
  r.epoch = epoch;
  return r;
}

TEST(MajorityHashTest, MostCommonWinsAndTiesGoToTheLowestRank) {
  MajorityResult m = MajorityHash({kA, kB, kB});
  EXPECT_EQ(m.majority, kB);
  EXPECT_EQ(m.differing, std::vector<int32_t>({0}));

  m = MajorityHash({kB, kA});  // a tie: rank 0's hash
  EXPECT_EQ(m.majority, kB);
  EXPECT_EQ(m.differing, std::vector<int32_t>({1}));

  m = MajorityHash({kA, kB, kC, kC});
  EXPECT_EQ(m.majority, kC);
  EXPECT_EQ(m.differing, std::vector<int32_t>({0, 1}));

  m = MajorityHash({kA, kA, kA});
  EXPECT_EQ(m.majority, kA);
  EXPECT_TRUE(m.differing.empty());

  m = MajorityHash({});
  EXPECT_EQ(m.majority, "");
  EXPECT_TRUE(m.differing.empty());
}

TEST(SyncCheckerTest, CompletesWhenTheKthReportArrives) {
  SyncChecker c(3, 10);
  EXPECT_FALSE(c.Add(2, 0, Report(kA, 1.0, 2, 0)).has_value());
  EXPECT_FALSE(c.Add(0, 0, Report(kA, 2.0, 3, 1)).has_value());
  EXPECT_EQ(c.pending_steps(), 1u);
  std::optional<CompletedStep> s = c.Add(1, 0, Report(kA, 4.0, 5, 0));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 0);
  EXPECT_EQ(s->hashes, std::vector<std::string>({kA, kA, kA}));
  EXPECT_EQ(s->majority, kA);
  EXPECT_TRUE(s->differing.empty());
  // (2*3 + 4*5 + 1*2) / (3 + 5 + 2) = 28 / 10.
  EXPECT_DOUBLE_EQ(s->loss, 2.8);
  EXPECT_EQ(s->examples, 10);
  EXPECT_EQ(s->epoch, 1);
  EXPECT_EQ(c.pending_steps(), 0u);
  EXPECT_EQ(c.checked(), 1);
  EXPECT_EQ(c.mismatched(), 0);
  EXPECT_EQ(c.first_mismatch(), -1);
}

// Late reports (a closed generation's, after a coordinator restart):
// duplicates dropped, a step that can no longer complete forgotten, at most
// kMaxLateSteps pending, the SyncCheck handed out with every rank's hash,
// and a regroup with another K ends them.
TEST(SyncCheckerTest, LateReportsCompleteAreBoundedAndEndWithAnotherK) {
  SyncChecker c(2);
  v1::SyncCheck check;
  EXPECT_FALSE(c.AddLate(0, 5, Report(kA), &check).has_value());  // not open
  c.OpenLate(/*generation=*/3, {4, 4});
  EXPECT_EQ(c.late_generation(), 3);
  EXPECT_FALSE(c.AddLate(0, 4, Report(kA), &check).has_value());  // recorded before
  EXPECT_FALSE(c.AddLate(0, 5, Report(kA), &check).has_value());
  EXPECT_FALSE(c.AddLate(0, 5, Report(kB), &check).has_value());  // duplicate
  EXPECT_FALSE(c.AddLate(0, 6, Report(kA), &check).has_value());
  std::optional<CompletedStep> s = c.AddLate(1, 5, Report(kA), &check);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 5);
  EXPECT_TRUE(s->differing.empty());
  EXPECT_EQ(check.step(), 5);
  EXPECT_EQ(check.rank_hashes_size(), 2);
  EXPECT_EQ(c.checked(), 1);
  // Rank 1 skips step 6 (it never ran it): step 6 can no longer complete.
  EXPECT_FALSE(c.AddLate(1, 7, Report(kA), &check).has_value());
  s = c.AddLate(0, 7, Report(kB), &check);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step, 7);
  EXPECT_TRUE(s->no_majority);
  EXPECT_EQ(check.differing_ranks_size(), 2);
  EXPECT_EQ(c.late_last_step(0), 7);
  EXPECT_EQ(c.checked(), 2);
  EXPECT_EQ(c.mismatched(), 1);
  EXPECT_EQ(c.first_mismatch(), 7);
  // Bounded: rank 0 alone runs ahead.
  for (int64_t step = 8; step < 8 + static_cast<int64_t>(SyncChecker::kMaxLateSteps) + 10;
       ++step) {
    c.AddLate(0, step, Report(kA), &check);
  }
  EXPECT_EQ(c.late_last_step(0), 8 + static_cast<int64_t>(SyncChecker::kMaxLateSteps) - 1);
  c.Regroup(2);  // same K: still open
  EXPECT_EQ(c.late_generation(), 3);
  c.Regroup(3);
  EXPECT_EQ(c.late_generation(), -1);
  EXPECT_FALSE(c.AddLate(1, 8, Report(kA), &check).has_value());
  // Each rank's first report of the new generation ends its late reports
  // up to the step before the start; once every rank's have ended, they
  // close.
  c.OpenLate(4, {0, 0, 0});
  EXPECT_FALSE(c.AddLate(0, 1, Report(kA), &check).has_value());
  EXPECT_FALSE(c.AddLate(1, 1, Report(kA), &check).has_value());
  c.EndLate(2, 5);
  EXPECT_EQ(c.late_generation(), 4);
  EXPECT_EQ(c.late_last_step(2), 5);
  EXPECT_FALSE(c.AddLate(2, 1, Report(kA), &check).has_value());  // ended for rank 2
  EXPECT_EQ(c.checked(), 2);
  c.EndLate(0, 5);
  c.EndLate(1, 5);
  EXPECT_EQ(c.late_generation(), -1);
}

TEST(SyncCheckerTest, PlainMeanLossWhenNoRankReportsExamples) {
  SyncChecker c(2, 10);
  c.Add(0, 5, Report(kA, 1.0));
  std::optional<CompletedStep> s = c.Add(1, 5, Report(kA, 2.0));
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->loss, 1.5);
  EXPECT_EQ(s->examples, 0);
}

TEST(SyncCheckerTest, MismatchesAreCountedAndKeepEveryRanksHash) {
  SyncChecker c(3, 10);
  for (int64_t step = 0; step < 4; ++step) {
    const std::string odd = step == 2 || step == 3 ? kB : kA;
    c.Add(0, step, Report(kA));
    c.Add(1, step, Report(odd));
    ASSERT_TRUE(c.Add(2, step, Report(kA)).has_value());
  }
  EXPECT_EQ(c.checked(), 4);
  EXPECT_EQ(c.mismatched(), 2);
  EXPECT_EQ(c.first_mismatch(), 2);

  lockstep::v1::SyncHistory h = c.History(7, 0);
  EXPECT_EQ(h.job_id(), 7u);
  EXPECT_EQ(h.checked_steps(), 4);
  EXPECT_EQ(h.mismatched_steps(), 2);
  EXPECT_EQ(h.first_mismatch_step(), 2);
  ASSERT_EQ(h.checks_size(), 4);
  EXPECT_TRUE(h.checks(1).all_match());
  // A matching check lists the majority once per rank.
  ASSERT_EQ(h.checks(1).rank_hashes_size(), 3);
  EXPECT_EQ(h.checks(1).rank_hashes(2), kA);
  EXPECT_FALSE(h.checks(2).all_match());
  EXPECT_EQ(h.checks(2).step(), 2);
  EXPECT_EQ(h.checks(2).majority_hash(), kA);
  ASSERT_EQ(h.checks(2).differing_ranks_size(), 1);
  EXPECT_EQ(h.checks(2).differing_ranks(0), 1);
  ASSERT_EQ(h.checks(2).rank_hashes_size(), 3);
  EXPECT_EQ(h.checks(2).rank_hashes(1), kB);

  h = c.History(7, 1);  // the most recent one only
  ASSERT_EQ(h.checks_size(), 1);
  EXPECT_EQ(h.checks(0).step(), 3);
  EXPECT_EQ(h.checked_steps(), 4);
}

TEST(SyncCheckerTest, HistoryIsBoundedAndCountersStayExact) {
  SyncChecker c(1, 3);
  for (int64_t step = 0; step < 10; ++step) {
    ASSERT_TRUE(c.Add(0, step, Report(step == 1 ? kB : kA)).has_value());
  }
  // K=1: a single rank is always the majority.
  EXPECT_EQ(c.checked(), 10);
  EXPECT_EQ(c.mismatched(), 0);
  EXPECT_EQ(c.history_size(), 3u);
  lockstep::v1::SyncHistory h = c.History(1, 0);
  ASSERT_EQ(h.checks_size(), 3);
  EXPECT_EQ(h.checks(0).step(), 7);
  EXPECT_EQ(h.checks(2).step(), 9);
  EXPECT_EQ(h.checked_steps(), 10);
  EXPECT_EQ(c.History(1, 100).checks_size(), 3);

  SyncChecker zero(2, 0);  // max_history < 1 keeps one
  zero.Add(0, 0, Report(kA));
  zero.Add(1, 0, Report(kA));
  zero.Add(0, 1, Report(kA));
  zero.Add(1, 1, Report(kA));
  EXPECT_EQ(zero.history_size(), 1u);
  EXPECT_EQ(zero.checked(), 2);
}

TEST(SyncCheckerTest, DropSettledForgetsStepsThatCanNoLongerComplete) {
  SyncChecker c(2, 10);
  c.Add(0, 0, Report(kA));
  c.Add(0, 1, Report(kA));
  c.Add(0, 2, Report(kA));
  EXPECT_EQ(c.pending_steps(), 3u);
  c.DropSettled(1);  // both ranks are past step 1
  EXPECT_EQ(c.pending_steps(), 1u);
  EXPECT_TRUE(c.Add(1, 2, Report(kA)).has_value());
  EXPECT_EQ(c.checked(), 1);
  c.Add(1, 3, Report(kA));
  c.ClearPending();
  EXPECT_EQ(c.pending_steps(), 0u);
  EXPECT_FALSE(c.Add(0, 3, Report(kA)).has_value());  // step 3 starts over
}

// Issue 10: a job's history stays bounded whatever its length. 10^6 fake
// steps at K = 4 (32-hex hashes, 4 block hashes, an optimizer hash, as
// real reports carry), one rank drifting for one step every 100000 steps
// (repaired 6 steps later), Judge on every check as the Coordinator does:
// memory holds at most recent + max_mismatches checks and max_runs runs,
// under 1.5 MiB (measured: ~0.9 MiB; 213 bytes per held check), the
// counters are exact, and the summary adds up to every step.
TEST(SyncCheckerTest, AMillionStepsStayWithinTheHistoryBound) {
  const SyncHistoryLimits limits;  // the Coordinator's defaults for a running job
  SyncChecker c(4, limits);
  constexpr int64_t kSteps = 1000000;
  const auto hash = [](int64_t s) { return absl::StrFormat("%032x", s); };
  size_t peak_bytes = 0;
  int64_t repaired = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const bool drift = step % 100000 == 50;
    for (int r = 0; r < 4; ++r) {
      StepReport rep;
      rep.hash = drift && r == 2 ? hash(step + kSteps) : hash(step);
      rep.optimizer_hash = hash(step + 7);
      rep.blocks = {1, 2, 3, static_cast<uint64_t>(drift && r == 2 ? step + 1 : step)};
      rep.examples = 8;
      std::optional<CompletedStep> done = c.Add(r, step, std::move(rep));
      if (done.has_value()) {
        const DivergenceVerdict v = c.Judge(*done, DivergencePolicy::kRepair, kSteps);
        ASSERT_NE(v.action, DivergenceVerdict::kFail) << v.reason;
        if (v.action == DivergenceVerdict::kRepaired) ++repaired;
      }
    }
    if (step % 65536 == 0 || step == kSteps - 1) {
      peak_bytes = std::max(peak_bytes, c.history().SpaceUsed());
      ASSERT_LE(c.history().held_checks(),
                static_cast<size_t>(limits.recent + limits.max_mismatches));
      ASSERT_LE(c.history().held_runs(), static_cast<size_t>(limits.max_runs));
    }
  }
  EXPECT_EQ(c.checked(), kSteps);
  EXPECT_EQ(c.mismatched(), 10);
  EXPECT_EQ(c.first_mismatch(), 50);
  EXPECT_EQ(repaired, 10);
  EXPECT_EQ(c.pending_steps(), 0u);
  EXPECT_LT(peak_bytes, size_t{3} << 19) << "history holds " << peak_bytes << " bytes";
  // Window 4096 + 20 kept events (10 divergences, 10 repairs); the matching
  // steps before the window in 11 runs (split by the 20 events), summing up.
  lockstep::v1::SyncHistory h = c.Snapshot(3, 0);
  EXPECT_EQ(h.checked_steps(), kSteps);
  ASSERT_EQ(h.runs_size(), 21);
  int64_t in_runs = 0;
  for (const auto& r : h.runs()) in_runs += r.checks();
  EXPECT_EQ(in_runs + 20 + limits.recent, kSteps);
  EXPECT_EQ(h.checks_size(), SyncHistoryBuffer::kMaxReplyChecks);  // the reply cap
  EXPECT_EQ(h.checks(h.checks_size() - 1).step(), kSteps - 1);
  ASSERT_EQ(h.checks(h.checks_size() - 1).rank_hashes_size(), 4);
  EXPECT_EQ(h.checks(h.checks_size() - 1).rank_hashes(3), hash(kSteps - 1));
  EXPECT_LT(h.ByteSizeLong(), size_t{4} << 20);
  lockstep::v1::SyncHistory old;
  EXPECT_EQ(c.history().Summary(0, c.history().OldestFullStep(), &old), 20);
  EXPECT_EQ(old.runs_size(), 21);
  EXPECT_EQ(old.checks(0).step(), 50);
  EXPECT_FALSE(old.checks(0).all_match());
  EXPECT_NE(old.checks(0).note().find("rank 2 differs from the majority in block weights block 3"),
            std::string::npos)
      << old.checks(0).note();
  EXPECT_EQ(old.checks(1).step(), 56);
  EXPECT_NE(old.checks(1).note().find("repaired: rank 2 copied rank 0's state at step 56"),
            std::string::npos)
      << old.checks(1).note();
  EXPECT_EQ(old.checks(19).step(), 900056);

  // The job ends: its history shrinks to the finished-job bound.
  c.FinishHistory({128, 32, 32});
  EXPECT_LE(c.history().held_checks(), 128u + 20u);
  EXPECT_LE(c.history().held_runs(), 32u);
  EXPECT_LT(c.history().SpaceUsed(), size_t{64} << 10);
  EXPECT_EQ(c.checked(), kSteps);
}

// Summarised steps: Summary(from, to) gives the runs overlapping a range and
// the events inside it; Page starts at the window.
TEST(SyncCheckerTest, SummaryOfStepsThatLeftTheWindow) {
  SyncChecker c(3, SyncHistoryLimits{10, 4, 8});
  for (int64_t step = 0; step < 40; ++step) {
    for (int r = 0; r < 3; ++r) c.Add(r, step, Report(step == 12 && r == 0 ? kB : kA));
  }
  const SyncHistoryBuffer& h = c.history();
  EXPECT_EQ(h.OldestFullStep(), 30);
  lockstep::v1::SyncHistory sum;
  EXPECT_EQ(h.Summary(0, 30, &sum), 1);
  ASSERT_EQ(sum.runs_size(), 2);
  EXPECT_EQ(sum.runs(0).first_step(), 0);
  EXPECT_EQ(sum.runs(0).last_step(), 11);
  EXPECT_EQ(sum.runs(1).first_step(), 13);
  EXPECT_EQ(sum.runs(1).last_step(), 29);
  ASSERT_EQ(sum.checks_size(), 1);
  EXPECT_EQ(sum.checks(0).step(), 12);
  EXPECT_EQ(sum.checks(0).rank_hashes(0), kB);
  lockstep::v1::SyncHistory later;
  EXPECT_EQ(h.Summary(20, 30, &later), 0);
  ASSERT_EQ(later.runs_size(), 1);
  EXPECT_EQ(later.runs(0).first_step(), 13);
  lockstep::v1::SyncHistory page;
  h.Page(30, 4, &page);
  ASSERT_EQ(page.checks_size(), 4);
  EXPECT_EQ(page.checks(0).step(), 30);
  EXPECT_EQ(page.checks(0).rank_hashes_size(), 3);
  EXPECT_EQ(page.next_step(), 34);
}

}  // namespace
}  // namespace lockstep
