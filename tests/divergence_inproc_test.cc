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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/collective/inproc_transport.h"
#include "common/collective/ps_aggregator.h"
#include "common/data/sampler.h"
#include "common/train/checkpoint.h"
#include "common/train/state_board.h"
#include "gtest/gtest.h"
#include "server/sync_checker.h"
#include "worker/blobs_for_test.h"
#include "worker/combiner.h"
#include "worker/job_runner.h"

namespace lockstep {
namespace {

class FakeCoordinator : public JobReporter {
 public:
  FakeCoordinator(int k, DivergencePolicy policy, int64_t total)
      : checker_(k, 1000), policy_(policy), total_(total) {}

  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& r) override {
    v1::ReportStepReply reply;
    return ReportStepWithReply(r, &reply);
  }
  absl::StatusOr<bool> ReportStepWithReply(const v1::ReportStepRequest& r,
                                           v1::ReportStepReply* reply) override {
    reply->Clear();
    bool stop_now = false;
    {
      absl::MutexLock l(&mu_);
      hashes_[r.step()][r.rank()] = r.weights_hash();
      // As the coordinator: a rank's report of a step at or below its last
      // one (steps computed again after a rollback) is a duplicate.
      auto last = last_step_.try_emplace(r.rank(), -1).first;
      const bool fresh = r.step() > last->second;
      if (fresh) last->second = r.step();
      if (failed_.empty() && fresh) {
        StepReport report;
        report.hash = r.weights_hash();
        report.optimizer_hash = r.optimizer_hash();
        report.blocks.assign(r.block_hashes().begin(), r.block_hashes().end());
        report.examples = r.examples();
        if (r.repaired()) report.repaired_from = r.repaired_from();
        if (r.rolled_back()) {
          report.rolled_back_to = r.rolled_back_to();
          report.rolled_back_at = r.rolled_back_at();
        }
        if (r.block_names_size() > 0) {
          checker_.SetBlockNames({r.block_names().begin(), r.block_names().end()});
        }
        if (auto c = checker_.Add(r.rank(), r.step(), std::move(report)); c.has_value()) {
          DivergenceVerdict v = checker_.Judge(*c, policy_, total_);
          if (v.action == DivergenceVerdict::kFail) {
            failed_ = v.reason;
            stop_now = true;
          }
        }
      }
      if (!failed_.empty()) {
        reply->set_stop(true);
      } else if (const auto& p = checker_.pending_repair(); p.has_value()) {
        reply->set_repair_step(p->step);
        reply->set_repair_source(p->source);
        for (int32_t rank : p->ranks) reply->add_repair_ranks(rank);
      }
    }
    if (stop_now && on_stop_) on_stop_();
    return reply->stop();
  }
  absl::Status ReportEval(const v1::ReportEvalRequest& e) override {
    absl::MutexLock l(&mu_);
    eval_steps_.push_back(e.step());
    return absl::OkStatus();
  }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }
  std::vector<int64_t> eval_steps() {
    absl::MutexLock l(&mu_);
    return eval_steps_;
  }

  void set_on_stop(std::function<void()> f) { on_stop_ = std::move(f); }
  DivergencePolicy policy() const { return policy_; }
  // As the coordinator sets it for a job that writes checkpoints at
  // intervals (coordinator_reports.cc).
  void set_checkpoint_rollback(bool on) {
    absl::MutexLock l(&mu_);
    checker_.set_checkpoint_rollback(on);
  }
  std::string failed() {
    absl::MutexLock l(&mu_);
    return failed_;
  }
  v1::SyncHistory history() {
    absl::MutexLock l(&mu_);
    return checker_.History(7, 0);
  }
  std::map<int64_t, std::map<int, std::string>> hashes() {
    absl::MutexLock l(&mu_);
    return hashes_;
  }

 private:
  absl::Mutex mu_;
  SyncChecker checker_ ABSL_GUARDED_BY(mu_);
  const DivergencePolicy policy_;
  const int64_t total_;
  std::string failed_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::map<int, std::string>> hashes_ ABSL_GUARDED_BY(mu_);
  std::map<int, int64_t> last_step_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> eval_steps_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_stop_;
};

v1::JobSpec Spec(int k, int64_t steps) {
  v1::JobSpec spec;
  spec.set_model("mlp:16,8");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(k);
  spec.set_global_batch(29);
  spec.set_steps(steps);
  spec.set_seed(5);
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(0.05f);
  return spec;
}

struct Fault {
  int rank = -1;          // -1: none
  int rank2 = -1;         // a second rank with the same fault (-1: none)
  int64_t step = 3;
  bool optimizer = false;
  int64_t index = 5;
};

// How the job runs beyond the fault.
struct RunSetup {
  int ps_shards = 0;               // > 0: ps mode over in-process shards
  int64_t checkpoint_every = 0;    // > 0: rank 0 writes a checkpoint every N steps
  bool eval_each_epoch = false;
  std::string on_nonfinite;
  // Ranks other than 0 see their own, empty checkpoint directory (as on
  // hosts that share none).
  bool private_checkpoint_dirs = false;
};

// A fresh checkpoint directory per job (the job id is always 7).
std::string NewCheckpointDir() {
  static std::atomic<int> n{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ck-", getpid(), "-", n++);
}

struct Outcome {
  std::vector<absl::Status> status;
  std::vector<std::string> final_hash;  // per rank ("" when it failed)
  std::vector<int64_t> skipped;         // per rank: JobOutcome.skipped_steps
  std::string checkpoint_dir;           // the job's spec.checkpoint_dir ("" = none)
  absl::Duration took;
};

Outcome RunJob(int k, int64_t steps, Fault fault, FakeCoordinator* coord,
               const std::map<int, const TrainTest*>& data_of_rank = {},
               bool check_in_combine = true, const RunSetup& setup = {}) {
  static const TrainTest data = Blobs(200, 0);
  v1::JobSpec spec = Spec(k, steps);
  // The workers follow the job's policy as the coordinator does: under halt
  // they do not repair in the combine (a rank fetching a peer's state when
  // the coordinator halts would wait for it until its deadline).
  if (coord->policy() == DivergencePolicy::kHalt) spec.set_on_divergence("halt");
  if (setup.ps_shards > 0) {
    spec.set_sync_mode(v1::PS);
    spec.set_ps_shards(setup.ps_shards);
  }
  spec.set_eval_each_epoch(setup.eval_each_epoch);
  spec.set_on_nonfinite(setup.on_nonfinite);
  if (setup.checkpoint_every > 0) {
    spec.set_checkpoint_dir(NewCheckpointDir());
    spec.set_checkpoint_every_steps(setup.checkpoint_every);
  }
  InProcessHub hub(k);
  // ps: all ranks share one set of in-process shards per buffer length
  // (the dataset agreement's round is shorter), made on first use.
  absl::Mutex ps_mu;
  std::map<int64_t, std::vector<std::unique_ptr<PsClient>>> ps_by_len;
  PsCombiner::Connect connect = [&](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
    absl::MutexLock l(&ps_mu);
    auto& clients = ps_by_len[n];
    if (clients.empty()) clients = MakeInProcessPsClients(k, setup.ps_shards, n);
    std::vector<PsClient*> ptrs;
    for (auto& client : clients) ptrs.push_back(client.get());
    return ptrs;
  };
  std::vector<std::unique_ptr<StateBoard>> boards;
  for (int r = 0; r < k; ++r) boards.push_back(std::make_unique<StateBoard>());
  std::vector<std::unique_ptr<GradientCombiner>> combiners;
  std::vector<std::unique_ptr<JobRunner>> runners;
  for (int r = 0; r < k; ++r) {
    JobRunnerOptions o;
    o.job_id = 7;
    o.spec = spec;
    if (setup.private_checkpoint_dirs && r != 0) o.spec.set_checkpoint_dir(NewCheckpointDir());
    o.rank = r;
    o.world = k;
    o.worker_id = absl::StrCat("w-", r + 1);
    o.peer_names = {"a0", "a1", "a2", "a3"};
    o.combine_timeout = absl::Seconds(20);
    o.state_board = boards[r].get();
    o.check_in_combine = check_in_combine;
    // A peer's state, as FetchReplicaState gets it: polled until published.
    o.fetch_state = [&boards](int peer, int64_t step, int64_t expected,
                              absl::Time deadline) -> absl::StatusOr<std::string> {
      while (absl::Now() < deadline) {
        if (auto s = boards[peer]->Find(7, step); s != nullptr) {
          if (static_cast<int64_t>(s->size()) != expected) {
            return absl::FailedPreconditionError("size");
          }
          return *s;
        }
        absl::SleepFor(absl::Milliseconds(1));
      }
      return absl::DeadlineExceededError("not published");
    };
    if (r == fault.rank || r == fault.rank2) {
      o.flip_at_step = fault.step;
      o.flip_optimizer = fault.optimizer;
      o.flip_index = fault.index;
    }
    if (setup.ps_shards > 0) {
      combiners.push_back(std::make_unique<PsCombiner>(connect, r));
    } else {
      combiners.push_back(std::make_unique<RingCombiner>(hub.endpoint(r)));
    }
    const TrainTest* d = data_of_rank.count(r) ? data_of_rank.at(r) : &data;
    runners.push_back(std::make_unique<JobRunner>(o, d, combiners.back().get(), coord));
  }
  coord->set_on_stop([&] {
    for (auto& runner : runners) runner->RequestStop();
    for (int a = 0; a < k; ++a) {
      for (int b = 0; b < k; ++b) {
        if (a != b) hub.BreakLink(a, b);
      }
    }
  });
  Outcome run;
  run.checkpoint_dir = spec.checkpoint_dir();
  run.status.resize(k);
  run.final_hash.resize(k);
  run.skipped.resize(k, -1);
  const absl::Time t0 = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      auto out = runners[r]->Run();
      run.status[r] = out.status();
      if (out.ok()) run.final_hash[r] = out->weights_hash;
      if (out.ok()) run.skipped[r] = out->skipped_steps;
    });
  }
  for (auto& t : threads) t.join();
  run.took = absl::Now() - t0;
  coord->set_on_stop(nullptr);
  return run;
}

constexpr int64_t kSteps = 16;

std::string FaultFreeHash(int k, const RunSetup& setup = {}) {
  FakeCoordinator coord(k, DivergencePolicy::kRepair, kSteps);
  Outcome run = RunJob(k, kSteps, Fault{}, &coord, {}, true, setup);
  for (int r = 0; r < k; ++r) EXPECT_TRUE(run.status[r].ok()) << run.status[r];
  return run.final_hash[0];
}

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
  auto files = ListCheckpoints(JobCheckpointDir(run.checkpoint_dir, 7));
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_FALSE(files->empty());
  int64_t newest = -1;
  for (const auto& [step, path] : *files) newest = std::max(newest, step);
  EXPECT_EQ(newest, 3);
  // ... and that one holds the state both ranks reported for step 2.
  auto loaded = LoadCheckpoint(JobCheckpointDir(run.checkpoint_dir, 7), 3, CheckpointLimits());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const auto hashes = coord.hashes();
  EXPECT_EQ(loaded->state.weights_hash.ToHex(), hashes.at(2).at(0));
  EXPECT_EQ(hashes.at(2).at(0), hashes.at(2).at(1));
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
}  // namespace lockstep
