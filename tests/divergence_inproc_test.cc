// Divergence, end to end in one process: K worker JobRunners (threads, the
// in-process ring) and a coordinator stand-in that runs the coordinator's
// own sync checker (server/sync_checker.h: the check, Judge and the repair
// in every reply, as server/coordinator_reports.cc does). One rank flips a
// bit of its weights or optimizer state after step 3 (the test-only fault);
// the check names the rank and the first differing block; "halt" stops the
// job there; "repair" has the drifted rank copy a majority rank's state
// (common/train/replica_state.h, through each rank's StateBoard) at step
// 3 + kRepairDistance and the job ends with every replica identical. Also:
// the stale-data agreement before step 0 (exact beyond 2^24). The
// in-combine repair also over in-process ps shards (ps mode, K = 3). K = 2
// (no majority) under repair: with checkpoints every few steps every rank
// rolls back to the last one before the divergence and the job ends with
// the fault-free hash; without one before it, it fails saying so.
// The harness is divergence_inproc_harness.h; the no-majority cases are in
// divergence_rollback_test.cc.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/divergence_inproc_harness.h"

namespace lockstep::divergence {
namespace {

struct Case {
  int k;
  bool optimizer;
  int ps_shards = 0;
};

class RepairTest : public ::testing::TestWithParam<Case> {};

TEST_P(RepairTest, TheDriftedRankIsNamedAndRepairedFromAMajorityPeer) {
  const Case c = GetParam();
  FakeCoordinator coord(c.k, DivergencePolicy::kRepair, kSteps);
  Fault fault;
  fault.rank = 1;
  fault.optimizer = c.optimizer;
  RunSetup setup;
  setup.ps_shards = c.ps_shards;
  Outcome run = RunJob(c.k, kSteps, fault, &coord, {}, true, setup);
  EXPECT_EQ(coord.failed(), "");
  for (int r = 0; r < c.k; ++r) {
    ASSERT_TRUE(run.status[r].ok()) << "rank " << r << ": " << run.status[r];
    EXPECT_EQ(run.final_hash[r], run.final_hash[0]) << "rank " << r;
  }
  // The drifted replica's gradient never reached an update: the job ends
  // exactly where a run without the fault ends.
  EXPECT_EQ(run.final_hash[0], FaultFreeHash(c.k, setup));
  EXPECT_LT(run.took, absl::Seconds(30));
  const v1::SyncHistory h = coord.history();
  ASSERT_EQ(h.checks_size(), kSteps);
  // Weights: the flip shows in the step's own report. Optimizer state: the
  // optimizer hash shows it at once too.
  const v1::SyncCheck& found = h.checks(3);
  EXPECT_FALSE(found.all_match());
  ASSERT_EQ(found.differing_ranks_size(), 1);
  EXPECT_EQ(found.differing_ranks(0), 1);
  const std::string block = c.optimizer ? "optimizer state" : "W0";
  EXPECT_EQ(found.first_differing_block(), block);
  EXPECT_EQ(found.note(), absl::StrCat("divergence: rank 1 differs from the majority in block ",
                                       block, "; repair at step 9 from rank 0"));
  // Found again in step 4's own combine (the K identities ride with the
  // gradient): rank 1 copied rank 0's state and every rank computed step 4
  // again, so from step 4 on every check matches.
  EXPECT_TRUE(h.checks(4).all_match());
  EXPECT_EQ(h.checks(4).note(),
            "repaired in the combine of step 4: rank 1 copied rank 0's state and the step was "
            "computed again");
  EXPECT_EQ(h.mismatched_steps(), 1);
  // The coordinator's own repair (announced for step 9, a boundary every
  // rank hears of before it gets there) still runs: a copy of an identical
  // state.
  EXPECT_TRUE(h.checks(9).all_match());
  EXPECT_EQ(h.checks(9).note(),
            "repaired: rank 1 copied rank 0's state at step 9 (divergence found at step 3)");
  for (int64_t t = 4; t < kSteps; ++t) EXPECT_TRUE(h.checks(t).all_match()) << "step " << t;
  for (int64_t t = 0; t < 3; ++t) EXPECT_TRUE(h.checks(t).all_match()) << "step " << t;
}

INSTANTIATE_TEST_SUITE_P(K, RepairTest,
                         ::testing::Values(Case{3, false}, Case{3, true}, Case{4, false},
                                           Case{4, true}, Case{3, false, 2}, Case{3, true, 2}),
                         [](const auto& info) {
                           return absl::StrCat(
                               "K", info.param.k,
                               info.param.ps_shards > 0
                                   ? absl::StrCat("_ps", info.param.ps_shards)
                                   : std::string(),
                               info.param.optimizer ? "_optimizer" : "_weights");
                         });

TEST(DivergenceTest, HaltEndsTheJobNamingStepRankAndBlock) {
  for (int k : {2, 3, 4}) {
    SCOPED_TRACE(k);
    FakeCoordinator coord(k, DivergencePolicy::kHalt, kSteps);
    Fault fault;
    fault.rank = k - 1;
    Outcome run = RunJob(k, kSteps, fault, &coord);
    const std::string want =
        k == 2 ? "replicas diverged at step 3: ranks 0 and 1 differ, no majority (first "
                 "differing block W0)"
               : absl::StrCat("replicas diverged at step 3: rank ", k - 1,
                              " differs from the majority in block W0");
    EXPECT_EQ(coord.failed(), want);
    for (int r = 0; r < k; ++r) {
      EXPECT_EQ(run.status[r].code(), absl::StatusCode::kCancelled) << run.status[r];
    }
    // Stopped within the lag: no rank reported past step 3 + 2 + 1.
    EXPECT_LE(coord.hashes().rbegin()->first, 3 + kReportLag + 1);
    EXPECT_LT(run.took, absl::Seconds(30));
  }
}

// The newest checkpoint file job 7 left (-1: none, or no directory).
int64_t NewestCheckpoint(const Outcome& run) {
  auto files = ListCheckpoints(JobCheckpointDir(run.checkpoint_dir, 7));
  EXPECT_TRUE(files.ok()) << files.status();
  int64_t newest = -1;
  if (files.ok()) {
    for (const auto& [step, path] : *files) newest = std::max(newest, step);
  }
  return newest;
}

// A checkpoint is written only after every rank was seen holding its state
// (the identities in the next step's combine). Rank 0 flips a bit after
// step 3 under halt with a checkpoint every step: the checkpoint of step 4
// (rank 0's state after step 3, the drifted one) would be written as soon
// as step 3 was applied; now the combine of step 4 shows the ranks differ
// and it is never written. Closed form: the newest checkpoint on disk is
// step 3's (the state after step 2), whose weights every rank shared.
TEST(DivergenceTest, ACheckpointIsWrittenOnlyOnceTheRanksAgreeOnItsState) {
  FakeCoordinator coord(2, DivergencePolicy::kHalt, kSteps);
  RunSetup setup;
  setup.checkpoint_every = 1;
  Fault fault;
  fault.rank = 0;
  Outcome run = RunJob(2, kSteps, fault, &coord, {}, true, setup);
  EXPECT_NE(coord.failed(), "");
  EXPECT_EQ(NewestCheckpoint(run), 3);
  // ... and that one holds the state both ranks reported for step 2.
  auto loaded = LoadCheckpoint(JobCheckpointDir(run.checkpoint_dir, 7), 3, CheckpointLimits());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const auto hashes = coord.hashes();
  EXPECT_EQ(loaded->state.weights_hash.ToHex(), hashes.at(2).at(0));
  EXPECT_EQ(hashes.at(2).at(0), hashes.at(2).at(1));
}

// The final checkpoint too: it is written only once every rank sent its
// final state's identity in one more small combine (AgreeOnFinalState).
// Rank 1 flips a bit after the last step: rank 0's final checkpoint (of
// step 16, rank 0's own state, which rank 1 no longer shares) is never
// written; the newest on disk is step 15's, which the last step's combine
// verified. (Before, the final checkpoint was written at once: newest 16.)
TEST(DivergenceTest, TheFinalCheckpointIsWrittenOnlyOnceTheRanksAgree) {
  FakeCoordinator coord(2, DivergencePolicy::kHalt, kSteps);
  RunSetup setup;
  setup.checkpoint_every = 1;
  Fault fault;
  fault.rank = 1;
  fault.step = kSteps - 1;
  Outcome run = RunJob(2, kSteps, fault, &coord, {}, true, setup);
  EXPECT_EQ(NewestCheckpoint(run), kSteps - 1);
  EXPECT_NE(coord.failed(), "");  // the coordinator's check of the last step
}

// Issue 10: a worker lost during the final state check (the small combine
// after the last step) fails that combine on every rank, so the final
// checkpoint is not written, and the job regroups with no step left. The
// regrouped generation writes it: here K = 3 trains every step, its final
// checkpoint is removed (as if the check had failed), and the survivors
// (K = 2, then K = 1) start generation 1 from their held states at the last
// step: the final checkpoint is back on disk with the fault-free state.
// Without the regroup's write the newest checkpoint stays -1 (none).
TEST(DivergenceTest, ARegroupWithNoStepLeftWritesTheFinalCheckpoint) {
  for (int survivors : {2, 1}) {
    SCOPED_TRACE(absl::StrCat(survivors, " survivor(s)"));
    FakeCoordinator coord(3, DivergencePolicy::kRepair, kSteps);
    RunSetup setup;
    setup.checkpoint_every = 1000;  // only the final checkpoint
    Outcome first = RunJob(3, kSteps, Fault{}, &coord, {}, true, setup);
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(first.status[r].ok()) << first.status[r];
    ASSERT_EQ(NewestCheckpoint(first), kSteps);
    const std::string dir = JobCheckpointDir(first.checkpoint_dir, 7);
    ASSERT_EQ(std::remove(absl::StrCat(dir, "/", CheckpointFileName(kSteps)).c_str()), 0);
    ASSERT_EQ(NewestCheckpoint(first), -1);
    FakeCoordinator coord2(survivors, DivergencePolicy::kRepair, kSteps);
    setup.generation = 1;
    setup.checkpoint_dir = first.checkpoint_dir;
    setup.initial_states.assign(first.states.begin(), first.states.begin() + survivors);
    Outcome regrouped = RunJob(survivors, kSteps, Fault{}, &coord2, {}, true, setup);
    for (int r = 0; r < survivors; ++r) {
      ASSERT_TRUE(regrouped.status[r].ok()) << regrouped.status[r];
      EXPECT_EQ(regrouped.final_hash[r], first.final_hash[0]);
    }
    EXPECT_EQ(NewestCheckpoint(first), kSteps);
    auto loaded = LoadCheckpoint(dir, kSteps, CheckpointLimits());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->state.weights_hash.ToHex(), first.final_hash[0]);
    EXPECT_EQ(loaded->state.next_step, kSteps);
  }
}

TEST(DivergenceTest, TwoRanksWithoutCheckpointsFailWithNoMajority) {
  FakeCoordinator coord(2, DivergencePolicy::kRepair, kSteps);
  Fault fault;
  fault.rank = 0;  // the drifted rank is rank 0: nobody may blame rank 1 alone
  Outcome run = RunJob(2, kSteps, fault, &coord);
  EXPECT_EQ(coord.failed(),
            "replicas diverged at step 3: ranks 0 and 1 differ, no majority (first differing "
            "block W0): on_divergence=repair has no majority to copy from and no checkpoint to "
            "resolve from (the job writes none: set --checkpoint_dir and "
            "--checkpoint_every_steps)");
  const v1::SyncHistory h = coord.history();
  EXPECT_TRUE(h.checks(3).no_majority());
  EXPECT_EQ(h.checks(3).differing_ranks_size(), 2);
  EXPECT_LT(run.took, absl::Seconds(30));
}

}  // namespace
}  // namespace lockstep::divergence
