// Divergence with no majority (K = 2, or a tie at K = 4) under repair: with
// checkpoints every few steps every rank rolls back to the last one before
// the divergence and the job ends with the fault-free hash; without one
// before it, it fails saying so. Also the in-combine check's part in the
// repair, the stale-data agreement before step 0 and counts beyond 2^24.
// The harness is divergence_inproc_harness.h.
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/divergence_inproc_harness.h"

namespace lockstep::divergence {
namespace {

// K = 2 under repair with a checkpoint every 2 steps: a bit flipped after
// step 3 (on either rank, weights or optimizer state; ring and ps) is
// found in step 4's combine with no majority; every rank reloads the
// checkpoint of step 2 (its checksum and weights hash verified; rank 0
// removes the one of step 4, written after the flip) and computes steps 2
// and 3 again. The job ends with exactly the fault-free run's hash.
struct RollbackCase {
  int flip_rank;
  bool optimizer;
  int ps_shards;
};

class RollbackTest : public ::testing::TestWithParam<RollbackCase> {};

TEST_P(RollbackTest, NoMajorityIsResolvedFromTheLastCheckpoint) {
  const RollbackCase c = GetParam();
  RunSetup setup;
  setup.ps_shards = c.ps_shards;
  setup.checkpoint_every = 2;
  FakeCoordinator coord(2, DivergencePolicy::kRepair, kSteps);
  coord.set_checkpoint_rollback(true);
  Fault fault;
  fault.rank = c.flip_rank;
  fault.optimizer = c.optimizer;
  Outcome run = RunJob(2, kSteps, fault, &coord, {}, true, setup);
  EXPECT_EQ(coord.failed(), "");
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(run.status[r].ok()) << "rank " << r << ": " << run.status[r];
  }
  EXPECT_EQ(run.final_hash[1], run.final_hash[0]);
  EXPECT_EQ(run.final_hash[0], FaultFreeHash(2, setup));
  EXPECT_LT(run.took, absl::Seconds(30));
  const v1::SyncHistory h = coord.history();
  ASSERT_EQ(h.checks_size(), kSteps);
  const std::string block = c.optimizer ? "optimizer state" : "W0";
  EXPECT_TRUE(h.checks(3).no_majority());
  EXPECT_EQ(h.checks(3).note(),
            absl::StrCat("divergence: ranks 0 and 1 differ, no majority (first differing block ",
                         block, "); resolving from the last checkpoint"));
  EXPECT_TRUE(h.checks(4).all_match());
  EXPECT_EQ(h.checks(4).note(),
            "rolled back in the combine of step 4: no majority, every rank reloaded the "
            "checkpoint of step 2 and computed steps 2 to 3 again");
  EXPECT_EQ(h.mismatched_steps(), 1);
  for (int64_t t = 0; t < kSteps; ++t) {
    if (t == 3) continue;
    EXPECT_TRUE(h.checks(t).all_match()) << "step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(K2, RollbackTest,
                         ::testing::Values(RollbackCase{0, false, 0}, RollbackCase{1, true, 0},
                                           RollbackCase{1, false, 2}),
                         [](const auto& info) {
                           return absl::StrCat("flip_rank", info.param.flip_rank,
                                               info.param.optimizer ? "_optimizer" : "_weights",
                                               info.param.ps_shards > 0 ? "_ps" : "_ring");
                         });

// Ranks other than 0 take the state rank 0 restored from its peer, so a
// rollback works when every host has its own checkpoint directory: rank
// 1's stays empty, and the job still ends with the fault-free hash.
TEST(DivergenceTest, ARollbackNeedsNoSharedCheckpointDirectory) {
  RunSetup setup;
  setup.checkpoint_every = 2;
  setup.private_checkpoint_dirs = true;
  FakeCoordinator coord(2, DivergencePolicy::kRepair, kSteps);
  coord.set_checkpoint_rollback(true);
  Fault fault;
  fault.rank = 1;
  Outcome run = RunJob(2, kSteps, fault, &coord, {}, true, setup);
  EXPECT_EQ(coord.failed(), "");
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(run.status[r].ok()) << "rank " << r << ": " << run.status[r];
  }
  EXPECT_EQ(run.final_hash[1], run.final_hash[0]);
  RunSetup plain;
  plain.checkpoint_every = 2;
  EXPECT_EQ(run.final_hash[0], FaultFreeHash(2, plain));
  const v1::SyncHistory h = coord.history();
  ASSERT_EQ(h.checks_size(), kSteps);
  EXPECT_TRUE(h.checks(3).no_majority());
  EXPECT_EQ(h.checks(4).note(),
            "rolled back in the combine of step 4: no majority, every rank reloaded the "
            "checkpoint of step 2 and computed steps 2 to 3 again");
}

// A rollback replays steps: they count once. Rank 1 flips a bit after step
// 6 (K = 2: no majority), found in the combine of step 7; every rank
// reloads the checkpoint of step 6 and computes step 6 again. Step 6 ends
// epoch 1 (200 examples, batch 29: 7 steps per epoch), and one training
// example has a NaN feature, chosen in step 6's batch, so step 6 is skipped
// (on_nonfinite=skip) in the first pass and in the replay. Closed form:
// skipped_steps = the number of steps whose batch holds that example (once
// per epoch), evaluations = one per epoch end (6, 13, 15: steps 7, 14, 16),
// in order; the final hash is the fault-free run's on the same data.
TEST(DivergenceTest, ARollbackCountsReplayedSkipsAndEvaluationsOnce) {
  TrainTest data = Blobs(200, 30);
  GlobalBatchSampler sampler(200, 29, 5);
  const int64_t bad = sampler.Batch(6)[0];
  data.train.x[bad * data.train.dim] = std::numeric_limits<float>::quiet_NaN();
  int64_t want_skipped = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    const std::vector<int64_t> b = sampler.Batch(t);
    want_skipped += std::find(b.begin(), b.end(), bad) != b.end();
  }
  ASSERT_EQ(want_skipped, 3);  // steps 6, one in epoch 2, one in epoch 3
  RunSetup setup;
  setup.checkpoint_every = 2;
  setup.eval_each_epoch = true;
  setup.on_nonfinite = "skip";
  const std::map<int, const TrainTest*> both = {{0, &data}, {1, &data}};
  FakeCoordinator clean(2, DivergencePolicy::kRepair, kSteps);
  Outcome fault_free = RunJob(2, kSteps, Fault{}, &clean, both, true, setup);
  ASSERT_TRUE(fault_free.status[0].ok()) << fault_free.status[0];
  FakeCoordinator coord(2, DivergencePolicy::kRepair, kSteps);
  coord.set_checkpoint_rollback(true);
  Fault fault;
  fault.rank = 1;
  fault.step = 6;
  Outcome run = RunJob(2, kSteps, fault, &coord, both, true, setup);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(run.status[r].ok()) << "rank " << r << ": " << run.status[r];
    EXPECT_EQ(run.skipped[r], want_skipped) << "rank " << r;
    EXPECT_EQ(fault_free.skipped[r], want_skipped) << "rank " << r;
  }
  EXPECT_EQ(run.final_hash[0], fault_free.final_hash[0]);
  const v1::SyncHistory h = coord.history();
  ASSERT_EQ(h.checks_size(), kSteps);
  EXPECT_EQ(h.checks(7).note(),
            "rolled back in the combine of step 7: no majority, every rank reloaded the "
            "checkpoint of step 6 and computed step 6 again");
  EXPECT_EQ(coord.eval_steps(), (std::vector<int64_t>{7, 14, 16}));
  EXPECT_EQ(clean.eval_steps(), (std::vector<int64_t>{7, 14, 16}));
}

// A tie at K = 4 (ranks 1 and 2 flip the same bit: 2 against 2) has no
// majority either: resolved from the checkpoint the same way.
TEST(DivergenceTest, ATieAtFourRanksIsResolvedFromTheLastCheckpoint) {
  RunSetup setup;
  setup.checkpoint_every = 3;
  FakeCoordinator coord(4, DivergencePolicy::kRepair, kSteps);
  coord.set_checkpoint_rollback(true);
  Fault fault;
  fault.rank = 1;
  fault.rank2 = 2;
  Outcome run = RunJob(4, kSteps, fault, &coord, {}, true, setup);
  EXPECT_EQ(coord.failed(), "");
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(run.status[r].ok()) << "rank " << r << ": " << run.status[r];
    EXPECT_EQ(run.final_hash[r], run.final_hash[0]);
  }
  EXPECT_EQ(run.final_hash[0], FaultFreeHash(4, setup));
  const v1::SyncHistory h = coord.history();
  ASSERT_EQ(h.checks_size(), kSteps);
  EXPECT_EQ(h.checks(3).note(),
            "divergence: ranks 0, 1, 2 and 3 differ, no majority (first differing block W0); "
            "resolving from the last checkpoint");
  EXPECT_EQ(h.checks(4).note(),
            "rolled back in the combine of step 4: no majority, every rank reloaded the "
            "checkpoint of step 3 and computed step 3 again");
  EXPECT_LT(run.took, absl::Seconds(30));
}

TEST(DivergenceTest, NoMajorityWithNoCheckpointBeforeItFailsSayingSo) {
  RunSetup setup;
  setup.checkpoint_every = 10;  // the first checkpoint comes after the flip
  FakeCoordinator coord(2, DivergencePolicy::kRepair, kSteps);
  coord.set_checkpoint_rollback(true);
  Fault fault;
  fault.rank = 1;
  Outcome run = RunJob(2, kSteps, fault, &coord, {}, true, setup);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.status[r].code(), absl::StatusCode::kFailedPrecondition) << run.status[r];
    EXPECT_EQ(run.status[r].message(),
              "replicas diverged after step 3 with no majority (found in the combine of step 4) "
              "and there is no checkpoint before step 4 to resolve it from "
              "(on_divergence=repair: write checkpoints more often with "
              "--checkpoint_every_steps)");
  }
  // The ranks fail in the combine of step 4, which may come before both
  // step-3 reports reached the coordinator (they are pipelined; a failed
  // job drops what it had not sent): when the check of step 3 is there, it
  // carries the divergence note.
  const v1::SyncHistory h = coord.history();
  for (const v1::SyncCheck& c : h.checks()) {
    if (c.step() != 3) continue;
    EXPECT_EQ(c.note(),
              "divergence: ranks 0 and 1 differ, no majority (first differing block W0); "
              "resolving from the last checkpoint");
  }
  EXPECT_LT(run.took, absl::Seconds(30));
}

// Without the in-combine check (JobRunnerOptions.check_in_combine off:
// only the coordinator's repair at step 9), the drifted replica's gradient
// slices of steps 4..8 reach every replica's update: the replicas agree
// again after the repair, but NOT with a run without the fault. This is
// why the identities ride in the combine.
TEST(DivergenceTest, WithoutTheInCombineCheckTheRepairedWeightsCarryTheDrift) {
  const std::string clean = FaultFreeHash(3);
  FakeCoordinator coord(3, DivergencePolicy::kRepair, kSteps);
  Fault fault;
  fault.rank = 1;
  Outcome run = RunJob(3, kSteps, fault, &coord, {}, /*check_in_combine=*/false);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(run.status[r].ok()) << run.status[r];
    EXPECT_EQ(run.final_hash[r], run.final_hash[0]);
  }
  EXPECT_NE(run.final_hash[0], clean);
  const v1::SyncHistory h = coord.history();
  for (int64_t t = 4; t < 9; ++t) {
    EXPECT_EQ(h.checks(t).note(), "awaiting repair at step 9") << "step " << t;
  }
  EXPECT_EQ(h.checks(9).note(),
            "repaired: rank 1 copied rank 0's state at step 9 (divergence found at step 3)");
}

TEST(DivergenceTest, AStaleTrainingSetIsNamedBeforeStepZero) {
  TrainTest stale = Blobs(200, 0);
  stale.train.y[17] = stale.train.y[17] == 0 ? 1 : 0;  // one label differs
  for (int k : {2, 3}) {
    SCOPED_TRACE(k);
    FakeCoordinator coord(k, DivergencePolicy::kRepair, kSteps);
    Outcome run = RunJob(k, kSteps, Fault{}, &coord, {{1, &stale}});
    for (int r = 0; r < k; ++r) {
      EXPECT_EQ(run.status[r].code(), absl::StatusCode::kFailedPrecondition) << run.status[r];
      EXPECT_NE(run.status[r].message().find("rank 1 (a1) has a different training set: hash " +
                                             TrainingSetHash(stale.train).ToHex() + " vs " +
                                             TrainingSetHash(Blobs(200, 0).train).ToHex()),
                std::string::npos)
          << run.status[r];
    }
    EXPECT_TRUE(coord.hashes().empty());
  }
}

TEST(DivergenceTest, CountsBeyondTwoToTheTwentyFourAreExact) {
  // 2^24 and 2^24 + 1 examples are one float32 value; the agreement must
  // tell them apart. (Only the counts are faked: the agreement fails
  // before anything reads the rows.)
  TrainTest a = Blobs(20, 0), b = Blobs(20, 0);
  a.train.num_examples = int64_t{1} << 24;
  b.train.num_examples = (int64_t{1} << 24) + 1;
  FakeCoordinator coord(3, DivergencePolicy::kRepair, kSteps);
  Outcome run = RunJob(3, kSteps, Fault{}, &coord, {{0, &a}, {1, &a}, {2, &b}});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.status[r].code(), absl::StatusCode::kFailedPrecondition) << run.status[r];
    EXPECT_NE(run.status[r].message().find("rank 2 (a2) has dim 6, 3 classes, 16777217 examples"),
              std::string::npos)
        << run.status[r];
    EXPECT_NE(run.status[r].message().find("have dim 6, 3 classes, 16777216 examples"),
              std::string::npos)
        << run.status[r];
  }
}

}  // namespace
}  // namespace lockstep::divergence
