// Stuck combines (Coordinator::FailStuckCombineLocked): a ring job whose
// every rank has waited for a peer, or a ps job whose every rank has waited
// for a shard, for lost_after while every worker heartbeats is FAILED
// naming the waits; one rank waiting, a short wait, an old report (never
// extrapolated), a peer or shard out of range, another generation's
// report, or a wait of the other kind is not.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

class StuckCombineTest : public ::testing::Test {
 protected:
  StuckCombineTest() : clock_(absl::FromUnixSeconds(1000)) {
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    o.lost_after = absl::Seconds(3);
    coord_ = std::make_unique<Coordinator>(o, &clock_);
  }

  // Starts a K-worker job of `mode` on fresh workers w-1..w-K (hosts h1..).
  uint64_t Start(int k, v1::SyncMode mode = v1::RING, int64_t stall_timeout_ms = 0,
                 const std::string &on_worker_lost = "") {
    for (int i = 1; i <= k; ++i) AddWorker();
    v1::JobSpec spec;
    spec.set_model("mlp:8");
    spec.set_sync_mode(mode);
    spec.set_num_workers(k);
    spec.set_global_batch(8 * k);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(100);
    spec.set_stall_timeout_ms(stall_timeout_ms);
    spec.set_on_worker_lost(on_worker_lost);
    spec.set_peer_transport(transport_);
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = spec;
    absl::StatusOr<v1::SubmitJobReply> s = coord_->SubmitJob(submit);
    EXPECT_TRUE(s.ok()) << s.status();
    job_ = s.ok() ? s->job_id() : 0;
    for (const std::string &w : workers_) {
      EXPECT_TRUE(Beat(w, 0, -1, 0).has_assignment());
      Beat(w, job_, -1, 0);
    }
    EXPECT_EQ(State(), v1::RUNNING);
    return job_;
  }

  // Registers one more worker (host hN); its id.
  std::string AddWorker() {
    const int i = static_cast<int>(workers_.size()) + 1;
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_data_address(absl::StrCat("10.0.0.", i, ":6000"));
    req.set_hostname(absl::StrCat("h", i));
    absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    workers_.push_back(r.ok() ? r->worker_id() : "");
    return workers_.back();
  }

  // A heartbeat of a rank holding its replica at `held_step` for a regroup
  // of generation `generation`.
  v1::HeartbeatReply Hold(const std::string &worker, int64_t generation, int64_t held_step) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job_);
    req.set_generation(generation);
    req.set_holds_state(true);
    req.set_held_step(held_step);
    absl::StatusOr<v1::HeartbeatReply> r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }

  // The worker's state in `lockstep workers`.
  v1::WorkerState WorkerStateOf(const std::string &worker) {
    const v1::WorkerList l = coord_->ListWorkers();
    for (const auto &w : l.workers()) {
      if (w.worker_id() == worker) return w.state();
    }
    ADD_FAILURE() << "no worker " << worker;
    return v1::WorkerState();
  }

  // A heartbeat of `worker` running `job`, waiting for `peer` or `shard`
  // (-1: none) for `ms`.
  v1::HeartbeatReply Beat(const std::string &worker, uint64_t job, int peer, int64_t ms,
                          int shard = -1, int64_t generation = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_generation(generation);
    if (peer >= 0 || shard >= 0) {
      req.set_waiting_for_peer(peer + 1);
      req.set_waiting_for_shard(shard + 1);
      req.set_waiting_ms(ms);
    }
    absl::StatusOr<v1::HeartbeatReply> r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }

  v1::JobStatus Status() {
    absl::StatusOr<v1::JobStatus> s = coord_->GetJob(job_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::JobStatus();
  }
  v1::JobState State() { return Status().state(); }
  void ExpectFailedWith(const std::string &reason) {
    const v1::JobStatus st = Status();
    EXPECT_EQ(st.state(), v1::FAILED);
    EXPECT_EQ(st.reason(), reason);
  }

  // Ranks 0 .. n-1 of a K-rank job (n = answers' size, K = `k` or n) say
  // which ranks they reached in their answer to probe `id`, each waiting
  // as in a ring (rank r for r - 1) for `ms`; the last reply.
  v1::HeartbeatReply Answer(uint64_t id, const std::vector<std::vector<int>> &reached,
                            int64_t ms, int k = 0) {
    const int n = static_cast<int>(reached.size());
    if (k == 0) k = n;
    v1::HeartbeatReply last;
    for (int r = 0; r < n; ++r) {
      v1::HeartbeatRequest req;
      req.set_worker_id(workers_[r]);
      req.set_job_id(job_);
      req.set_waiting_for_peer((r + k - 1) % k + 1);
      req.set_waiting_ms(ms);
      req.set_probe_id(id);
      for (int q : reached[r]) req.add_reachable_ranks(q);
      absl::StatusOr<v1::HeartbeatReply> reply = coord_->Heartbeat(req);
      EXPECT_TRUE(reply.ok()) << reply.status();
      if (reply.ok()) last = *reply;
    }
    return last;
  }
  // `worker`'s answer to shards probe `id` (it reached `shards`), waiting
  // for shard 0 for 3.6 s.
  v1::HeartbeatReply AnswerShards(const std::string &worker, uint64_t id,
                                  const std::vector<int> &shards) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job_);
    req.set_waiting_for_shard(1);
    req.set_waiting_ms(3600);
    req.set_probe_id(id);
    for (int s : shards) req.add_reachable_ranks(s);
    absl::StatusOr<v1::HeartbeatReply> reply = coord_->Heartbeat(req);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : v1::HeartbeatReply();
  }
  // Every rank of a K-rank ring job waits for its left neighbour for `ms`
  // (a cycle: no rank stands out); the last rank's reply.
  v1::HeartbeatReply Cycle(int k, int64_t ms) {
    v1::HeartbeatReply last;
    for (int r = 0; r < k; ++r) last = Beat(workers_[r], job_, (r + k - 1) % k, ms);
    return last;
  }

  v1::PeerTransport transport_ = v1::GRPC;
  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
  std::vector<std::string> workers_;
  uint64_t job_ = 0;
};

TEST_F(StuckCombineTest, EveryRankWaitingForAPeerFailsTheJobNamingTheWaits) {
  Start(2);
  // Both wait, not for lost_after yet: nothing.
  Beat(workers_[0], job_, 1, 2900);
  Beat(workers_[1], job_, 0, 2900);
  EXPECT_EQ(State(), v1::RUNNING);
  // `lockstep status` shows each rank's wait as its heartbeat said.
  v1::JobStatus st = Status();
  EXPECT_EQ(st.ranks(0).waiting_for_peer(), 2);  // rank 1, + 1
  EXPECT_EQ(st.ranks(0).waiting_for_shard(), 0);
  EXPECT_DOUBLE_EQ(st.ranks(0).waiting_s(), 2.9);
  EXPECT_EQ(st.ranks(1).waiting_for_peer(), 1);
  // One waits long, the other does not wait (it computes): nothing.
  Beat(workers_[0], job_, 1, 3500);
  Beat(workers_[1], job_, -1, 0);
  EXPECT_EQ(State(), v1::RUNNING);
  st = Status();
  EXPECT_EQ(st.ranks(1).waiting_for_peer(), 0);  // no wait: all zero
  EXPECT_EQ(st.ranks(1).waiting_s(), 0);
  // Both, every worker heartbeating: FAILED at once, naming both waits; the
  // heartbeat that decided it is told to stop.
  EXPECT_TRUE(Beat(workers_[1], job_, 0, 3100).stop_job());
  ExpectFailedWith(
      "every rank waits for a peer while every worker heartbeats: "
      "a link between workers "
      "is down (rank 0 (w-1, host h1) for rank 1 (w-2, host h2) "
      "3.5s; rank 1 (w-2, host "
      "h2) for rank 0 (w-1, host h1) 3.1s)");
}

// spec.stall_timeout_ms replaces lost_after for one job: waits of 3.5 s
// (over lost_after, 3 s) leave a job with 10 s RUNNING, 10 s fails it; a
// ps job the same.
TEST_F(StuckCombineTest, AJobsOwnStallTimeoutReplacesLostAfter) {
  Start(2, v1::RING, /*stall_timeout_ms=*/10000);
  Beat(workers_[0], job_, 1, 3500);
  Beat(workers_[1], job_, 0, 3500);
  EXPECT_EQ(State(), v1::RUNNING);
  Beat(workers_[0], job_, 1, 9999);
  Beat(workers_[1], job_, 0, 9999);
  EXPECT_EQ(State(), v1::RUNNING);
  Beat(workers_[0], job_, 1, 10000);
  EXPECT_TRUE(Beat(workers_[1], job_, 0, 10200).stop_job());
  ExpectFailedWith(
      "every rank waits for a peer while every worker heartbeats: a link between workers "
      "is down (rank 0 (w-1, host h1) for rank 1 (w-2, host h2) 10.0s; rank 1 (w-2, host "
      "h2) for rank 0 (w-1, host h1) 10.2s)");
}

TEST_F(StuckCombineTest, APsJobsOwnStallTimeoutReplacesLostAfter) {
  Start(1, v1::PS, /*stall_timeout_ms=*/500);  // below lost_after: sooner
  Beat(workers_[0], job_, -1, 499, /*shard=*/0);
  EXPECT_EQ(State(), v1::RUNNING);
  EXPECT_TRUE(Beat(workers_[0], job_, -1, 600, /*shard=*/0).stop_job());
  EXPECT_EQ(State(), v1::FAILED);
}

TEST_F(StuckCombineTest, ARingOfThreeFailsOnlyWhenAllWait) {
  Start(3);
  Beat(workers_[0], job_, 2, 4000);
  Beat(workers_[1], job_, 0, 4000);
  EXPECT_EQ(State(), v1::RUNNING);  // rank 2 has not said it waits
  clock_.Advance(absl::Seconds(4));
  // Rank 0 and 1's reports are now 4 s old (their workers silent for more
  // than lost_after): a lost worker is the lost-worker path's, not this one.
  Beat(workers_[2], job_, 1, 5000);
  EXPECT_EQ(State(), v1::RUNNING);
  Beat(workers_[0], job_, 2, 8000);
  Beat(workers_[1], job_, 0, 8000);
  EXPECT_EQ(State(), v1::FAILED);
}

TEST_F(StuckCombineTest, ReportsAreTakenAsSaidNotExtrapolated) {
  Start(2);
  // Rank 0 said 2.5 s one second ago: that is 2.5 s, not 3.5 s (it may
  // have stopped waiting since).
  Beat(workers_[0], job_, 1, 2500);
  clock_.Advance(absl::Seconds(1));
  Beat(workers_[1], job_, 0, 3500);
  EXPECT_EQ(State(), v1::RUNNING);
  // A peer out of range, or a wait of another generation, counts as none.
  Beat(workers_[0], job_, 7, 9000);
  Beat(workers_[1], job_, 0, 9000);
  EXPECT_EQ(State(), v1::RUNNING);
  v1::HeartbeatRequest old_generation;
  old_generation.set_worker_id(workers_[0]);
  old_generation.set_job_id(job_);
  old_generation.set_generation(5);
  old_generation.set_waiting_for_peer(2);
  old_generation.set_waiting_ms(9000);
  ASSERT_TRUE(coord_->Heartbeat(old_generation).ok());
  Beat(workers_[1], job_, 0, 9100);
  EXPECT_EQ(State(), v1::RUNNING);
  Beat(workers_[0], job_, 1, 9000);  // now both, fresh
  EXPECT_EQ(State(), v1::FAILED);
}

TEST_F(StuckCombineTest, PsJobsAreNotJudgedByPeerWaits) {
  Start(2, v1::PS);
  Beat(workers_[0], job_, 1, 9000);
  Beat(workers_[1], job_, 0, 9000);
  EXPECT_EQ(State(), v1::RUNNING);
}

// A ps job (here on the coordinator's own shard, "coord:7070") whose every
// rank's push or pull has waited for a shard for lost_after: FAILED naming
// the shard; a ring job ignores shard waits.
TEST_F(StuckCombineTest, EveryRankWaitingForAShardFailsAPsJob) {
  Start(2, v1::PS);
  auto beat = [&](int r, int shard, int64_t ms) { return Beat(workers_[r], job_, -1, ms, shard); };
  beat(0, 0, 9000);
  beat(1, 0, 2900);  // not long enough
  EXPECT_EQ(State(), v1::RUNNING);
  EXPECT_EQ(Status().ranks(1).waiting_for_shard(), 1);  // shard 0, + 1
  EXPECT_EQ(Status().ranks(1).waiting_for_peer(), 0);
  EXPECT_DOUBLE_EQ(Status().ranks(1).waiting_s(), 2.9);
  beat(1, 1, 9000);  // a shard the job does not have (S = 1)
  EXPECT_EQ(State(), v1::RUNNING);
  v1::HeartbeatRequest old_generation;  // another generation's wait: none
  old_generation.set_worker_id(workers_[1]);
  old_generation.set_job_id(job_);
  old_generation.set_generation(5);
  old_generation.set_waiting_for_shard(1);
  old_generation.set_waiting_ms(9000);
  ASSERT_TRUE(coord_->Heartbeat(old_generation).ok());
  EXPECT_EQ(State(), v1::RUNNING);
  EXPECT_TRUE(beat(1, 0, 3200).stop_job());
  ExpectFailedWith(
      "every rank waits for a parameter-server shard while every "
      "worker heartbeats: a "
      "shard is out of the workers' reach or stuck (rank 0 (w-1, "
      "host h1) for shard 0 "
      "(coord:7070) 9.0s; rank 1 (w-2, host h2) for shard 0 "
      "(coord:7070) 3.2s)");
}

// A ps job of one worker waits for its shards too; a ring ignores shard
// waits (a ring of two that says it waits for "shard 0").
TEST_F(StuckCombineTest, APsJobOfOneFailsAndARingIgnoresShardWaits) {
  for (const bool ps : {true, false}) {
    SCOPED_TRACE(ps ? "ps, K = 1" : "ring, K = 2");
    if (!ps) {  // a new cluster for the ring job
      clock_.Advance(absl::Seconds(10));
      coord_->Tick();  // the ps job's worker is LOST
      workers_.clear();
    }
    Start(ps ? 1 : 2, ps ? v1::PS : v1::RING);
    for (const std::string &w : workers_) Beat(w, job_, -1, 4000, /*shard=*/0);
    EXPECT_EQ(State(), ps ? v1::FAILED : v1::RUNNING);
  }
}

// Issue 10: two workers that cannot reach each other while both reach the
// coordinator. Under "shrink" the job drops rank 1 (K = 2: no rank stands
// out, rank 0 stays) instead of failing: its worker is told to stop and is
// IDLE (not LOST), the survivor gets generation 1 with K = 1, and the
// dropped worker never takes a rank of this job again while a fresh worker
// may join it.
TEST_F(StuckCombineTest, UnderShrinkAStuckPairDropsRankOne) {
  Start(2, v1::RING, 0, "shrink");
  Beat(workers_[0], job_, 1, 3500);
  const v1::HeartbeatReply told = Beat(workers_[1], job_, 0, 3100);
  EXPECT_TRUE(told.stop_job());
  EXPECT_FALSE(told.has_assignment());
  v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.ranks_size(), 1);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[0]);
  ASSERT_GE(st.membership_events_size(), 1);
  const v1::MembershipEvent &e = st.membership_events(st.membership_events_size() - 1);
  EXPECT_EQ(e.kind(), "shrink");
  EXPECT_EQ(e.reason().rfind("rank 1 (w-2, host h2) dropped: its peers cannot reach it (every "
                             "rank waits for a peer while every worker heartbeats",
                             0),
            0u)
      << e.reason();
  EXPECT_EQ(WorkerStateOf(workers_[1]), v1::IDLE);
  // The survivor's next heartbeat gets the regroup; it holds step 40.
  const v1::HeartbeatReply regroup = Beat(workers_[0], job_, 1, 3600);
  ASSERT_TRUE(regroup.has_assignment());
  EXPECT_EQ(regroup.assignment().generation(), 1);
  EXPECT_EQ(regroup.assignment().peer_addresses_size(), 1);
  Hold(workers_[0], 1, 40);
  // The dropped worker, idle, is not given its old rank back ...
  EXPECT_FALSE(Beat(workers_[1], 0, -1, 0).has_assignment());
  EXPECT_EQ(WorkerStateOf(workers_[1]), v1::IDLE);
  EXPECT_EQ(Status().ranks_size(), 1);
  // ... a new worker joins the shrunk job.
  const std::string fresh = AddWorker();
  EXPECT_TRUE(Beat(fresh, 0, -1, 0).has_assignment());
  EXPECT_EQ(Status().ranks_size(), 2);
  EXPECT_EQ(Status().ranks(1).worker_id(), fresh);
}

// K = 3: the rank the two others wait for is dropped (the other two keep
// their order); when the waits form a cycle (a ring: each waited for once)
// no rank stands out and the job fails as before.
TEST_F(StuckCombineTest, UnderShrinkTheRankTheOthersWaitForIsDropped) {
  Start(3, v1::RING, 0, "shrink");
  Beat(workers_[0], job_, 1, 3500);
  Beat(workers_[1], job_, 0, 3500);
  const v1::HeartbeatReply reply = Beat(workers_[2], job_, 1, 3500);
  // The deciding heartbeat is a survivor's: its new assignment at once.
  ASSERT_TRUE(reply.has_assignment());
  EXPECT_EQ(reply.assignment().rank(), 1);  // w-3, rank 2 -> 1
  EXPECT_EQ(reply.assignment().peer_addresses_size(), 2);
  v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.ranks_size(), 2);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[0]);
  EXPECT_EQ(st.ranks(1).worker_id(), workers_[2]);
  EXPECT_EQ(WorkerStateOf(workers_[1]), v1::IDLE);
  EXPECT_TRUE(Beat(workers_[1], job_, 0, 3600).stop_job());

  clock_.Advance(absl::Seconds(10));
  coord_->Tick();  // every worker of the first job is LOST now
  workers_.clear();
  Start(3, v1::RING, 0, "shrink");
  // A cycle names no rank: the ranks are asked which peers they reach
  // (ReachProbeTest below); ranks that never answer fail the job once the
  // probe's time is up (1 s + 3 heartbeats + 1 s).
  for (int64_t ms = 3500; ms <= 6500; ms += 1000) {
    Beat(workers_[0], job_, 2, ms);
    Beat(workers_[1], job_, 0, ms);
    const v1::HeartbeatReply r = Beat(workers_[2], job_, 1, ms);
    if (ms < 6500) {
      EXPECT_FALSE(r.stop_job()) << ms;
      EXPECT_TRUE(r.has_probe()) << ms;
      clock_.Advance(absl::Seconds(1));
    } else {
      EXPECT_TRUE(r.stop_job());
    }
  }
  EXPECT_EQ(State(), v1::FAILED);
  EXPECT_EQ(Status().reason().rfind("every rank waits for a peer", 0), 0u) << Status().reason();
  EXPECT_NE(Status().reason().find("a reachability probe got no answer from rank(s) 0, 1, 2"),
            std::string::npos)
      << Status().reason();
}

// Under "wait" the dropped rank is left vacant for another worker; the
// dropped worker does not take it back; a second drop in a K = 2 job whose
// kept worker is stuck again drops that one.
TEST_F(StuckCombineTest, UnderWaitTheDroppedRankIsLeftForAnotherWorker) {
  Start(2, v1::RING, 0, "wait");
  Beat(workers_[0], job_, 1, 3500);
  EXPECT_TRUE(Beat(workers_[1], job_, 0, 3500).stop_job());
  v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.waiting_for_ranks_size(), 1);
  EXPECT_EQ(st.waiting_for_ranks(0), 1);
  EXPECT_FALSE(Beat(workers_[1], 0, -1, 0).has_assignment());
  EXPECT_EQ(WorkerStateOf(workers_[1]), v1::IDLE);
  const std::string fresh = AddWorker();
  const v1::HeartbeatReply joined = Beat(fresh, 0, -1, 0);
  ASSERT_TRUE(joined.has_assignment());
  EXPECT_EQ(joined.assignment().rank(), 1);
  EXPECT_EQ(Status().waiting_for_ranks_size(), 0);
  // Generation 2 starts (w-1 holds step 40, the newcomer copies it) and is
  // stuck again: with K = 2 nothing tells which is cut off, but w-1 was
  // kept last time and is stuck with its new peer too, so this time w-1
  // (rank 0) is dropped. The newcomer never got the state (from w-1, whom
  // it cannot reach), so no replica is left: FAILED saying so.
  const int64_t g = joined.assignment().generation();
  Hold(workers_[0], g, 40);
  Hold(fresh, g, -1);
  ASSERT_FALSE(Status().regrouping());
  Beat(fresh, job_, 0, 3500, -1, g);
  EXPECT_TRUE(Beat(workers_[0], job_, 1, 3500, -1, g).stop_job());
  st = Status();
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason().rfind("no rank holding a replica of the job's state is left at step 40 "
                              "(nothing to copy from): rank 0 lost: rank 0 (w-1, host h1) "
                              "dropped: its peers cannot reach it",
                              0),
            0u)
      << st.reason();
}

// Issue 10, "the job does what its policy says": a ring job whose waits
// form a cycle (K >= 3, one link down) is no longer FAILED under shrink or
// wait. The coordinator asks every rank which peers accept a connection
// (HeartbeatReply.probe: the peers' gRPC addresses, or their data
// addresses for a tcp job) and drops every rank outside the largest group
// that reach each other both ways.
TEST_F(StuckCombineTest, UnderShrinkACycleIsResolvedByAReachabilityProbe) {
  Start(3, v1::RING, 0, "shrink");
  const v1::HeartbeatReply asked = Cycle(3, 3500);
  EXPECT_FALSE(asked.stop_job());
  ASSERT_TRUE(asked.has_probe());
  const v1::PeerProbe& p = asked.probe();
  EXPECT_EQ(p.job_id(), job_);
  EXPECT_EQ(p.generation(), 0);
  EXPECT_EQ(p.timeout_ms(), 1000);
  // Rank 2's reply: its own entry empty, the others' gRPC addresses.
  EXPECT_EQ(std::vector<std::string>(p.addresses().begin(), p.addresses().end()),
            (std::vector<std::string>{"10.0.0.1:5000", "10.0.0.2:5000", ""}));
  EXPECT_EQ(State(), v1::RUNNING);
  // The link 0-1 is down. Rank 2 reaches both; {0, 2} and {1, 2} tie and
  // rank 0 stays, so rank 1 (w-2) is dropped.
  Answer(p.id(), {{2}, {2}}, 3700, 3);  // ranks 0 and 1 answered: not yet
  EXPECT_EQ(State(), v1::RUNNING);
  ASSERT_EQ(Status().ranks_size(), 3);
  v1::HeartbeatRequest last;
  last.set_worker_id(workers_[2]);
  last.set_job_id(job_);
  last.set_waiting_for_peer(2);
  last.set_waiting_ms(3700);
  last.set_probe_id(p.id());
  last.add_reachable_ranks(0);
  last.add_reachable_ranks(1);
  absl::StatusOr<v1::HeartbeatReply> decided = coord_->Heartbeat(last);
  ASSERT_TRUE(decided.ok()) << decided.status();
  ASSERT_TRUE(decided->has_assignment());  // w-3 is rank 1 of 2 now
  EXPECT_EQ(decided->assignment().rank(), 1);
  const v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.ranks_size(), 2);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[0]);
  EXPECT_EQ(st.ranks(1).worker_id(), workers_[2]);
  EXPECT_EQ(WorkerStateOf(workers_[1]), v1::IDLE);
  ASSERT_GE(st.membership_events_size(), 1);
  const std::string why = st.membership_events(st.membership_events_size() - 1).reason();
  EXPECT_EQ(why.rfind("rank 1 (w-2, host h2) dropped: its peers cannot reach it (every rank waits "
                      "for a peer",
                      0),
            0u)
      << why;
  EXPECT_NE(why.find("a reachability probe found: rank 0 reached 2; rank 1 reached 2; rank 2 "
                     "reached 0, 1)"),
            std::string::npos)
      << why;
  EXPECT_TRUE(Beat(workers_[1], job_, 0, 3800).stop_job());
}

// A tcp job's probe names the data addresses. A partition into {0, 1} and
// {2, 3} under "wait" keeps rank 0's group and leaves ranks 2 and 3 vacant.
// A rank that stops waiting meanwhile ends the probe (a new one starts if
// the job is stuck again).
TEST_F(StuckCombineTest, UnderWaitAPartitionKeepsOneGroupAndLeavesTheOthersRanksVacant) {
  transport_ = v1::TCP;
  Start(4, v1::RING, 0, "wait");
  v1::HeartbeatReply asked = Cycle(4, 3500);
  ASSERT_TRUE(asked.has_probe());
  EXPECT_EQ(asked.probe().addresses(0), "10.0.0.1:6000");
  EXPECT_EQ(asked.probe().addresses(3), "");
  const uint64_t first = asked.probe().id();
  // Rank 1 computes for a moment: not stuck, no probe any more.
  EXPECT_FALSE(Beat(workers_[1], job_, -1, 0).has_probe());
  asked = Cycle(4, 3600);
  ASSERT_TRUE(asked.has_probe());
  EXPECT_GT(asked.probe().id(), first);
  // The old probe's answers count for nothing.
  Answer(first, {{1}, {0}, {3}, {2}}, 3700);
  EXPECT_EQ(Status().waiting_for_ranks_size(), 0);
  Answer(asked.probe().id(), {{1}, {0}, {3}, {2}}, 3700);
  const v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(std::vector<int>(st.waiting_for_ranks().begin(), st.waiting_for_ranks().end()),
            (std::vector<int>{2, 3}));
  EXPECT_EQ(WorkerStateOf(workers_[2]), v1::IDLE);
  EXPECT_EQ(WorkerStateOf(workers_[3]), v1::IDLE);
}

// When every rank reaches every other, no link is down (a peer's process
// is stuck): the job fails as before, saying what the probe found; so it
// does when no two ranks reach each other (the data port is closed to
// every peer, say).
TEST_F(StuckCombineTest, AProbeThatFindsNoGroupToKeepFailsTheJobSayingWhy) {
  Start(3, v1::RING, 0, "shrink");
  v1::HeartbeatReply asked = Cycle(3, 3500);
  ASSERT_TRUE(asked.has_probe());
  EXPECT_TRUE(Answer(asked.probe().id(), {{1, 2}, {0, 2}, {0, 1}}, 3600).stop_job());
  EXPECT_EQ(State(), v1::FAILED);
  EXPECT_NE(Status().reason().find("rank 2 reached 0, 1 (every rank reaches every other: no "
                                   "link is down, a peer is stuck)"),
            std::string::npos)
      << Status().reason();

  clock_.Advance(absl::Seconds(10));
  coord_->Tick();
  workers_.clear();
  Start(3, v1::RING, 0, "shrink");
  asked = Cycle(3, 3500);
  ASSERT_TRUE(asked.has_probe());
  EXPECT_TRUE(Answer(asked.probe().id(), {{}, {}, {}}, 3600).stop_job());
  EXPECT_EQ(State(), v1::FAILED);
  EXPECT_NE(Status().reason().find("rank 2 reached none (no two ranks reach each other)"),
            std::string::npos)
      << Status().reason();
}

// A ps job under shrink whose every rank waits for a shard: a probe of the
// shards (as each worker dials them) finds the rank that cannot reach
// shard 0 while the others can; it is dropped and the job goes on. When
// every rank reaches every shard, the shard is stuck: FAILED as before.
TEST_F(StuckCombineTest, UnderShrinkAPsRankThatCannotReachAShardIsDropped) {
  Start(3, v1::PS, 0, "shrink");
  for (int r = 0; r < 2; ++r) Beat(workers_[r], job_, -1, 3500, /*shard=*/0);
  const v1::HeartbeatReply asked = Beat(workers_[2], job_, -1, 3500, 0);
  EXPECT_FALSE(asked.stop_job());
  ASSERT_TRUE(asked.has_probe());
  EXPECT_TRUE(asked.probe().shards());
  EXPECT_EQ(asked.probe().addresses_size(), 0);  // the worker fills them in
  auto answer = [&](int r, std::vector<int> reached) {
    return AnswerShards(workers_[r], asked.probe().id(), reached);
  };
  answer(0, {0});
  answer(2, {});
  EXPECT_EQ(State(), v1::RUNNING);
  ASSERT_EQ(Status().ranks_size(), 3);
  EXPECT_TRUE(answer(1, {0, 5}).has_assignment());  // 5: not a shard, ignored
  const v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.ranks_size(), 2);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[0]);
  EXPECT_EQ(st.ranks(1).worker_id(), workers_[1]);
  EXPECT_EQ(WorkerStateOf(workers_[2]), v1::IDLE);
  const std::string why = st.membership_events(st.membership_events_size() - 1).reason();
  EXPECT_EQ(why.rfind("rank 2 (w-3, host h3) dropped: it cannot reach a parameter-server shard "
                      "(every rank waits for a parameter-server shard",
                      0),
            0u)
      << why;
  EXPECT_NE(why.find("a reachability probe found: rank 0 reached shard 0; rank 1 reached "
                     "shard 0; rank 2 reached none)"),
            std::string::npos)
      << why;

  clock_.Advance(absl::Seconds(10));
  coord_->Tick();
  workers_.clear();
  Start(2, v1::PS, 0, "wait");
  Beat(workers_[0], job_, -1, 3500, 0);
  const v1::HeartbeatReply again = Beat(workers_[1], job_, -1, 3500, 0);
  ASSERT_TRUE(again.has_probe());
  for (int r = 0; r < 2; ++r) AnswerShards(workers_[r], again.probe().id(), {0});
  EXPECT_EQ(State(), v1::FAILED);
  EXPECT_NE(Status().reason().find("rank 1 reached shard 0 (every rank reaches every shard: no "
                                   "link is down, a shard is stuck)"),
            std::string::npos)
      << Status().reason();
}

// K = 2 with an idle worker: each rank waits for the other and either could
// be the one cut off, so the idle worker is probed as a witness. Rank 0
// reaches neither rank 1 nor the witness, rank 1 reaches the witness: rank
// 0 is the one cut off and is dropped (before, rank 1 always was). A worker
// dropped from the job is never a witness.
TEST_F(StuckCombineTest, UnderShrinkAnIdleWorkerTellsWhichOfTwoIsCutOff) {
  transport_ = v1::TCP;
  Start(2, v1::RING, 0, "shrink");
  for (int i = 0; i < 2; ++i) Beat(AddWorker(), 0, -1, 0);  // w-3, w-4 idle
  const v1::HeartbeatReply asked = Cycle(2, 3500);
  EXPECT_FALSE(asked.stop_job());
  ASSERT_TRUE(asked.has_probe());
  // Rank 1's reply: rank 0's data address, itself, then the witnesses'.
  EXPECT_EQ(std::vector<std::string>(asked.probe().addresses().begin(),
                                     asked.probe().addresses().end()),
            (std::vector<std::string>{"10.0.0.1:6000", "", "10.0.0.3:6000", "10.0.0.4:6000"}));
  EXPECT_EQ(State(), v1::RUNNING);
  ASSERT_EQ(Status().ranks_size(), 2);
  // As a worker answers: its own index too. Rank 0 reached nothing else;
  // rank 1 both witnesses (indices 2, 3). Rank 1's heartbeat decides: it
  // stays, renumbered to rank 0.
  const v1::HeartbeatReply decided = Answer(asked.probe().id(), {{0}, {1, 2, 3}}, 3700);
  ASSERT_TRUE(decided.has_assignment());
  EXPECT_EQ(decided.assignment().rank(), 0);
  const v1::JobStatus st = Status();
  ASSERT_GE(st.ranks_size(), 1);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[1]);
  EXPECT_NE(WorkerStateOf(workers_[0]), v1::BUSY);
  const std::string why = st.membership_events(0).reason();
  EXPECT_EQ(why.rfind("rank 0 (w-1, host h1) dropped: its peers cannot reach it", 0), 0u) << why;
  EXPECT_NE(why.find("a reachability probe found: rank 0 reached none and 0 of 2 idle workers; "
                     "rank 1 reached none and 2 of 2 idle workers)"),
            std::string::npos)
      << why;
}

// A witness at a rank's network address (another worker of its host) or
// one dropped from the job is not probed; a rank that does not answer
// leaves the rule without witnesses: rank 1 is dropped.
TEST_F(StuckCombineTest, WitnessesBesideARankAreSkippedAndASilentRankDropsRankOne) {
  Start(2, v1::RING, 0, "shrink");
  v1::RegisterWorkerRequest beside;
  beside.set_address("10.0.0.1:5001");  // w-1's host
  beside.set_hostname("h1");
  ASSERT_TRUE(coord_->RegisterWorker(beside).ok());
  Beat(AddWorker(), 0, -1, 0);  // at 10.0.0.3: a real witness
  const v1::HeartbeatReply asked = Cycle(2, 3500);
  ASSERT_TRUE(asked.has_probe());
  EXPECT_EQ(asked.probe().addresses_size(), 3);  // not the one beside w-1
  EXPECT_EQ(asked.probe().addresses(2), "10.0.0.3:5000");
  Answer(asked.probe().id(), {{}}, 3600, 2);  // rank 0 answers, rank 1 never
  for (int i = 0; i < 3 && State() == v1::RUNNING && Status().ranks_size() == 2; ++i) {
    clock_.Advance(absl::Seconds(1));
    Answer(asked.probe().id(), {{}}, 3600 + 1000 * (i + 1), 2);
    Beat(workers_[1], job_, 0, 3600 + 1000 * (i + 1));
  }
  const v1::JobStatus st = Status();
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_GE(st.ranks_size(), 1);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[0]);
  EXPECT_NE(st.membership_events(0).reason().find("got no answer from rank(s) 1"),
            std::string::npos)
      << st.membership_events(0).reason();
}

// A tie (both reach the witness, or neither) drops rank 1, as without one.
TEST_F(StuckCombineTest, AWitnessThatBothReachDropsRankOneAsBefore) {
  Start(2, v1::RING, 0, "shrink");
  Beat(AddWorker(), 0, -1, 0);
  const v1::HeartbeatReply asked = Cycle(2, 3500);
  ASSERT_TRUE(asked.has_probe());
  EXPECT_EQ(asked.probe().addresses(2), "10.0.0.3:5000");  // a grpc job: the gRPC port
  Answer(asked.probe().id(), {{2}, {2}}, 3700);
  const v1::JobStatus st = Status();
  ASSERT_GE(st.ranks_size(), 1);
  EXPECT_EQ(st.ranks(0).worker_id(), workers_[0]);
  EXPECT_EQ(st.membership_events(0).reason().rfind("rank 1 (w-2, host h2) dropped", 0), 0u)
      << st.membership_events(0).reason();
}

}  // namespace
}  // namespace lockstep
