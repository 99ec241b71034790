// SyncChecker's divergence decisions (sync_checker.h, Judge): locate the
// rank and the first differing block, no majority at K = 2, halt, repair
// scheduled / awaited / done, and the history notes.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/sync_checker.h"

namespace lockstep {
namespace {

const std::string kA(32, 'a'), kB(32, 'b'), kO(32, '0'), kP(32, '1');

StepReport Report(const std::string& hash, std::vector<uint64_t> blocks,
                  const std::string& opt = kO) {
  StepReport r;
  r.hash = hash;
  r.blocks = std::move(blocks);
  r.optimizer_hash = opt;
  r.examples = 1;
  return r;
}

// Adds one step's reports (index = rank) and returns the completed check.
CompletedStep Step(SyncChecker* s, int64_t step, const std::vector<StepReport>& reports) {
  std::optional<CompletedStep> c;
  for (size_t r = 0; r < reports.size(); ++r) c = s->Add(static_cast<int>(r), step, reports[r]);
  EXPECT_TRUE(c.has_value());
  return *c;
}

TEST(Divergence, NamesTheRankAndTheFirstDifferingBlock) {
  SyncChecker s(3, 100);
  s.SetBlockNames({"W0", "b0", "W1", "b1"});
  const StepReport good = Report(kA, {1, 2, 3, 4});
  CompletedStep c = Step(&s, 3, {good, Report(kB, {1, 2, 9, 4}), good});
  EXPECT_EQ(c.differing, std::vector<int32_t>{1});
  EXPECT_FALSE(c.no_majority);
  EXPECT_EQ(c.first_block, "W1");
  DivergenceVerdict v = s.Judge(c, DivergencePolicy::kHalt, 100);
  EXPECT_EQ(v.action, DivergenceVerdict::kFail);
  EXPECT_EQ(v.reason,
            "replicas diverged at step 3: rank 1 differs from the majority in block W1");
  EXPECT_EQ(s.last_divergence(), "step 3: rank 1 differs from the majority in block W1");
  const v1::SyncHistory h = s.History(7, 0);
  ASSERT_EQ(h.checks_size(), 1);
  EXPECT_EQ(h.checks(0).first_differing_block(), "W1");
  EXPECT_EQ(h.checks(0).note(),
            "divergence: rank 1 differs from the majority in block W1; halted "
            "(on_divergence=halt)");
}

TEST(Divergence, AnOptimizerStateThatDriftsIsFound) {
  SyncChecker s(4, 100);
  const StepReport good = Report(kA, {1, 2});
  CompletedStep c = Step(&s, 0, {good, good, good, Report(kA, {1, 2}, kP)});
  EXPECT_EQ(c.differing, std::vector<int32_t>{3});
  EXPECT_EQ(c.first_block, "optimizer state");
}

TEST(Divergence, TwoRanksThatDifferHaveNoMajority) {
  SyncChecker s(2, 100);
  s.SetBlockNames({"W0", "b0"});
  // Rank 0 is the one that drifted: the checker must not blame rank 1.
  CompletedStep c = Step(&s, 3, {Report(kB, {7, 2}), Report(kA, {1, 2})});
  EXPECT_TRUE(c.no_majority);
  EXPECT_EQ(c.differing, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(c.first_block, "W0");
  for (DivergencePolicy p : {DivergencePolicy::kRepair, DivergencePolicy::kHalt}) {
    SyncChecker t(2, 100);
    t.SetBlockNames({"W0", "b0"});
    CompletedStep d = Step(&t, 3, {Report(kB, {7, 2}), Report(kA, {1, 2})});
    DivergenceVerdict v = t.Judge(d, p, 100);
    EXPECT_EQ(v.action, DivergenceVerdict::kFail);
    EXPECT_NE(v.reason.find("step 3: ranks 0 and 1 differ, no majority"), std::string::npos)
        << v.reason;
  }
  // In-sync flags as the coordinator sets them: every rank in `differing`.
  const v1::SyncHistory h = s.History(1, 0);
  EXPECT_TRUE(h.checks(0).no_majority());
  EXPECT_EQ(h.checks(0).differing_ranks_size(), 2);
}

TEST(Divergence, RepairIsScheduledAwaitedAndRecorded) {
  for (int k : {3, 4}) {
    SCOPED_TRACE(k);
    SyncChecker s(k, 100);
    s.SetBlockNames({"W0", "b0"});
    const StepReport good = Report(kA, {1, 2});
    std::vector<StepReport> bad(k, good);
    bad[1] = Report(kB, {1, 5});  // rank 1 drifted in b0
    for (int64_t t = 0; t < 3; ++t) {
      EXPECT_EQ(s.Judge(Step(&s, t, std::vector<StepReport>(k, good)),
                        DivergencePolicy::kRepair, 20).action,
                DivergenceVerdict::kOk);
    }
    DivergenceVerdict v = s.Judge(Step(&s, 3, bad), DivergencePolicy::kRepair, 20);
    EXPECT_EQ(v.action, DivergenceVerdict::kRepairScheduled);
    ASSERT_TRUE(s.pending_repair().has_value());
    EXPECT_EQ(s.pending_repair()->step, 3 + kRepairDistance);
    EXPECT_EQ(s.pending_repair()->source, 0);
    EXPECT_EQ(s.pending_repair()->ranks, std::vector<int32_t>{1});
    for (int64_t t = 4; t < 3 + kRepairDistance; ++t) {
      EXPECT_EQ(s.Judge(Step(&s, t, bad), DivergencePolicy::kRepair, 20).action,
                DivergenceVerdict::kAwaitingRepair);
    }
    v = s.Judge(Step(&s, 3 + kRepairDistance, std::vector<StepReport>(k, good)),
                DivergencePolicy::kRepair, 20);
    EXPECT_EQ(v.action, DivergenceVerdict::kRepaired);
    EXPECT_FALSE(s.pending_repair().has_value());
    EXPECT_EQ(s.repairs(), 1);
    const v1::SyncHistory h = s.History(1, 0);
    EXPECT_EQ(h.checks(3).note(),
              "divergence: rank 1 differs from the majority in block b0; repair at step 9 "
              "from rank 0");
    EXPECT_EQ(h.checks(4).note(), "awaiting repair at step 9");
    EXPECT_EQ(h.checks(9).note(),
              "repaired: rank 1 copied rank 0's state at step 9 (divergence found at step 3)");
    EXPECT_EQ(h.mismatched_steps(), kRepairDistance);
  }
}

TEST(Divergence, ARepairThatDoesNotHoldOrAnotherRankFails) {
  SyncChecker s(3, 100);
  const StepReport good = Report(kA, {});
  std::vector<StepReport> bad1 = {good, Report(kB, {}), good};
  std::vector<StepReport> bad2 = {good, good, Report(kB, {})};
  EXPECT_EQ(s.Judge(Step(&s, 0, bad1), DivergencePolicy::kRepair, 0).action,
            DivergenceVerdict::kRepairScheduled);
  DivergenceVerdict v = s.Judge(Step(&s, 1, bad2), DivergencePolicy::kRepair, 0);
  EXPECT_EQ(v.action, DivergenceVerdict::kFail);
  EXPECT_EQ(v.reason,
            "replicas diverged at step 1: rank 2 differs from the majority in block weights "
            "while a repair at step 6 was pending");
}

// Too close to the end for a boundary: only the in-combine repair can fix
// it; the announced boundary is the end (never reached), and the next
// check that matches with a rank reporting its copy records the repair.
TEST(Divergence, TooCloseToTheEndLeavesTheInCombineRepair) {
  SyncChecker s(3, 100);
  const StepReport good = Report(kA, {});
  DivergenceVerdict v =
      s.Judge(Step(&s, 5, {good, good, Report(kB, {})}), DivergencePolicy::kRepair, 10);
  EXPECT_EQ(v.action, DivergenceVerdict::kRepairScheduled);
  ASSERT_TRUE(s.pending_repair().has_value());
  EXPECT_EQ(s.pending_repair()->step, 10);
  StepReport copied = Report(kA, {});
  copied.repaired_from = 0;
  v = s.Judge(Step(&s, 6, {good, good, copied}), DivergencePolicy::kRepair, 10);
  EXPECT_EQ(v.action, DivergenceVerdict::kRepaired);
  EXPECT_FALSE(s.pending_repair().has_value());
  EXPECT_EQ(s.History(1, 0).checks(1).note(),
            "repaired in the combine of step 6: rank 2 copied rank 0's state and the step was "
            "computed again");
}

TEST(Divergence, Policies) {
  EXPECT_EQ(*ParseDivergencePolicy(""), DivergencePolicy::kRepair);
  EXPECT_EQ(*ParseDivergencePolicy("repair"), DivergencePolicy::kRepair);
  EXPECT_EQ(*ParseDivergencePolicy("halt"), DivergencePolicy::kHalt);
  EXPECT_EQ(ParseDivergencePolicy("fix").status().message(),
            "expected repair or halt, got \"fix\"");
}

}  // namespace
}  // namespace lockstep
