// The harness of the in-process divergence tests (divergence_inproc_test.cc:
// detect, halt and repair; divergence_rollback_test.cc: no majority and the
// rollback to the last checkpoint): K worker JobRunners as threads over the
// in-process ring or ps shards, a coordinator stand-in that runs the
// coordinator's own sync checker, the test-only bit-flip fault and the
// fault-free reference hash. Test-only.
#ifndef LOCKSTEP_TESTS_DIVERGENCE_INPROC_HARNESS_H_
#define LOCKSTEP_TESTS_DIVERGENCE_INPROC_HARNESS_H_

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
#include "common/train/replica_state.h"
#include "common/train/state_board.h"
#include "gtest/gtest.h"
#include "server/sync_checker.h"
#include "worker/blobs_for_test.h"
#include "worker/combiner.h"
#include "worker/job_runner.h"

namespace lockstep::divergence {

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

inline v1::JobSpec Spec(int k, int64_t steps) {
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
  // A regrouped generation (membership): > 0 with each rank's held state
  // (EncodeReplicaState, Outcome::states of the generation before), and
  // the job's checkpoint directory kept ("" = a new one).
  int64_t generation = 0;
  std::vector<std::string> initial_states;
  std::string checkpoint_dir;
};

// A fresh checkpoint directory per job (the job id is always 7).
inline std::string NewCheckpointDir() {
  static std::atomic<int> n{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ck-", getpid(), "-", n++);
}

struct Outcome {
  std::vector<absl::Status> status;
  std::vector<std::string> final_hash;  // per rank ("" when it failed)
  std::vector<int64_t> skipped;         // per rank: JobOutcome.skipped_steps
  std::string checkpoint_dir;           // the job's spec.checkpoint_dir ("" = none)
  std::vector<std::string> states;      // per rank: its final replica state ("" when none)
  absl::Duration took;
};

inline Outcome RunJob(int k, int64_t steps, Fault fault, FakeCoordinator* coord,
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
    spec.set_checkpoint_dir(setup.checkpoint_dir.empty() ? NewCheckpointDir()
                                                         : setup.checkpoint_dir);
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
    o.generation = setup.generation;
    if (r < static_cast<int>(setup.initial_states.size())) {
      o.initial_state = setup.initial_states[static_cast<size_t>(r)];
    }
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
  run.states.resize(k);
  const absl::Time t0 = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      auto out = runners[r]->Run();
      run.status[r] = out.status();
      if (out.ok()) run.final_hash[r] = out->weights_hash;
      if (out.ok()) run.skipped[r] = out->skipped_steps;
      if (runners[r]->replica() != nullptr) {
        run.states[r] = EncodeReplicaState(*runners[r]->replica(), runners[r]->next_step());
      }
    });
  }
  for (auto& t : threads) t.join();
  run.took = absl::Now() - t0;
  coord->set_on_stop(nullptr);
  return run;
}

inline constexpr int64_t kSteps = 16;

inline std::string FaultFreeHash(int k, const RunSetup& setup = {}) {
  FakeCoordinator coord(k, DivergencePolicy::kRepair, kSteps);
  Outcome run = RunJob(k, kSteps, Fault{}, &coord, {}, true, setup);
  for (int r = 0; r < k; ++r) EXPECT_TRUE(run.status[r].ok()) << run.status[r];
  return run.final_hash[0];
}

}  // namespace lockstep::divergence

#endif  // LOCKSTEP_TESTS_DIVERGENCE_INPROC_HARNESS_H_
