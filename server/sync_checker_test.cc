#include "server/sync_checker.h"

#include <optional>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace lockstep
