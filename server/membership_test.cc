// Membership (server/membership.h) through the Coordinator, on a fake
// clock: a K=3 shrink job loses a worker; the survivors get the next
// generation's assignment (renumbered, fresh group key), report their held
// steps, get the start (the largest held step, the lowest rank holding it),
// stale reports are dropped, and the job completes with K=2. Under wait the
// rank stays vacant until a new worker takes it, or the job fails after
// its wait timeout; a shrunk job grows back when a worker is idle (not
// near its end). Plus the plain functions and the refusal cases (fail
// policy, the last rank, no replica left).
#include "server/membership.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/job_store.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::string Hash(int i) { return absl::StrFormat("%032x", i); }

class MembershipTest : public ::testing::Test {
 protected:
  MembershipTest() : clock_(absl::FromUnixSeconds(1000)) {
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    o.lost_after = absl::Seconds(3);
    coord_ = std::make_unique<Coordinator>(o, &clock_);
  }

  // Worker i at 10.0.0.i:5000 on `host` ("" = "host<i>").
  std::string Register(int i, const std::string& host = "") {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(host.empty() ? absl::StrCat("host", i) : host);
    auto r = coord_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }

  v1::HeartbeatReply Beat(const std::string& w, uint64_t job, int64_t gen = 0, bool holds = false,
                          int64_t held = -1) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_generation(gen);
    req.set_holds_state(holds);
    req.set_held_step(held);
    auto r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }

  absl::StatusOr<v1::ReportStepReply> Step(const std::string& w, uint64_t job, int rank,
                                           int64_t step, int64_t gen, int hash = 7) {
    v1::ReportStepRequest r;
    r.set_worker_id(w);
    r.set_job_id(job);
    r.set_rank(rank);
    r.set_step(step);
    r.set_generation(gen);
    r.set_weights_hash(Hash(hash));
    r.set_examples(8);
    return coord_->ReportStep(r);
  }

  uint64_t Submit(const std::string& policy, int64_t steps = 10, int64_t wait_timeout_ms = 0,
                  v1::PeerTransport transport = v1::GRPC) {
    v1::JobSpec spec;
    spec.set_name("t");
    spec.set_model("mlp:8");
    spec.set_sync_mode(v1::RING);
    spec.set_peer_transport(transport);
    spec.set_num_workers(3);
    spec.set_global_batch(24);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(steps);
    spec.set_on_worker_lost(policy);
    spec.set_wait_timeout_ms(wait_timeout_ms);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto r = coord_->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }

  // Every rank of `job` reports steps [from, to] under `gen`, in rank order.
  void Steps(const std::vector<std::string>& ws, uint64_t job, int64_t from, int64_t to,
             int64_t gen) {
    for (int64_t t = from; t <= to; ++t) {
      for (size_t r = 0; r < ws.size(); ++r) {
        ASSERT_TRUE(Step(ws[r], job, static_cast<int>(r), t, gen).ok());
      }
    }
  }

  void Done(const std::vector<std::string>& ws, uint64_t job, int64_t gen, int64_t steps) {
    for (size_t r = 0; r < ws.size(); ++r) {
      v1::ReportDoneRequest d;
      d.set_worker_id(ws[r]);
      d.set_job_id(job);
      d.set_rank(static_cast<int>(r));
      d.set_ok(true);
      d.set_generation(gen);
      d.set_steps(steps);
      d.set_weights_hash(Hash(7));
      ASSERT_TRUE(coord_->ReportDone(d).ok());
    }
  }

  // Starts `job` on `ws` (first assignment, acknowledged).
  void Start(const std::vector<std::string>& ws, uint64_t job) {
    for (const std::string& w : ws) {
      ASSERT_TRUE(Beat(w, 0).has_assignment());
      Beat(w, job);
    }
  }

  // 3.5 s pass (past lost_after) in which only `alive` heartbeat for
  // `job`; then Tick: every other worker of the cluster is LOST.
  void LoseAllBut(uint64_t job, const std::vector<std::string>& alive) {
    clock_.Advance(absl::Seconds(3.5));
    for (const std::string& w : alive) Beat(w, job);
    coord_->Tick();
  }

  // A K=3 shrink job of `steps` on w-1..w-3 loses w-3 after steps 0..4
  // and runs steps 5..9 with K=2 (generation 1, started at step 5).
  // Returns the job; *ws = {w-1, w-2}.
  uint64_t ShrunkToTwo(int64_t steps, std::vector<std::string>* ws) {
    const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
    const uint64_t job = Submit("shrink", steps);
    Start({w1, w2, w3}, job);
    Steps({w1, w2, w3}, job, 0, 4, 0);
    LoseAllBut(job, {w1, w2});  // w3 lost: K = 2, generation 1
    Beat(w1, job, 1, true, 5);
    EXPECT_TRUE(Beat(w2, job, 1, true, 5).assignment().start_ready());
    Steps({w1, w2}, job, 5, 9, 1);
    *ws = {w1, w2};
    return job;
  }

  // ShrunkToTwo, then w-4 registers and joins as rank 2 (generation 2)
  // and the start is decided (step 10, w-4 holding nothing). Returns the
  // job; *ws = {w-1, w-2, w-4}.
  uint64_t ShrinkThenJoin(int64_t steps, std::vector<std::string>* ws) {
    const uint64_t job = ShrunkToTwo(steps, ws);
    const std::string w1 = (*ws)[0], w2 = (*ws)[1];
    const std::string w4 = Register(4);  // joins at once: rank 2, generation 2
    EXPECT_EQ(coord_->GetJob(job)->generation(), 2);
    EXPECT_TRUE(Beat(w4, 0).has_assignment());
    EXPECT_EQ(Beat(w1, job, 1).assignment().generation(), 2);
    Beat(w1, job, 2, true, 10);
    Beat(w2, job, 2, true, 10);
    EXPECT_TRUE(Beat(w4, job, 2, true, -1).assignment().start_ready());
    *ws = {w1, w2, w4};
    return job;
  }

  void ExpectFailed(uint64_t job, const std::string& reason) {
    const v1::JobStatus st = *coord_->GetJob(job);
    EXPECT_EQ(st.state(), v1::FAILED);
    EXPECT_EQ(st.reason(), reason);
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
};

TEST_F(MembershipTest, ShrinkRegroupsTheSurvivorsAndTheJobCompletesWithKMinusOne) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("shrink");
  std::vector<v1::Assignment> first;
  for (const std::string& w : {w1, w2, w3}) {
    v1::HeartbeatReply r = Beat(w, 0);
    ASSERT_TRUE(r.has_assignment());
    EXPECT_EQ(r.assignment().generation(), 0);
    first.push_back(r.assignment());
    Beat(w, job);  // acknowledged
  }
  // Steps 0..4 by all; w1 (rank 0) also reported 5 before w2 died.
  for (int t = 0; t <= 4; ++t) {
    ASSERT_TRUE(Step(w1, job, 0, t, 0).ok());
    ASSERT_TRUE(Step(w2, job, 1, t, 0).ok());
    ASSERT_TRUE(Step(w3, job, 2, t, 0).ok());
  }
  ASSERT_TRUE(Step(w1, job, 0, 5, 0).ok());
  EXPECT_EQ(coord_->GetJob(job)->step(), 5);

  // w2 (rank 1) goes silent: 3 s later it is LOST and the job shrinks.
  clock_.Advance(absl::Seconds(2));
  Beat(w1, job);
  Beat(w3, job);
  clock_.Advance(absl::Seconds(1.5));
  Beat(w1, job);
  Beat(w3, job);
  coord_->Tick();
  v1::JobStatus st = *coord_->GetJob(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.world(), 2);
  EXPECT_TRUE(st.regrouping());
  ASSERT_EQ(st.ranks_size(), 2);
  EXPECT_EQ(st.ranks(0).worker_id(), w1);
  EXPECT_EQ(st.ranks(1).worker_id(), w3);  // renumbered in old rank order
  ASSERT_EQ(st.membership_events_size(), 1);
  EXPECT_EQ(st.membership_events(0).kind(), "shrink");
  EXPECT_EQ(st.membership_events(0).worker_id(), w2);
  EXPECT_EQ(st.membership_events(0).rank(), 1);
  EXPECT_EQ(st.membership_events(0).world_before(), 3);
  EXPECT_EQ(st.membership_events(0).world_after(), 2);
  EXPECT_EQ(st.membership_events(0).step(), -1);

  // The survivors' next heartbeats carry generation 1, not yet started.
  v1::HeartbeatReply r1 = Beat(w1, job, 0);
  v1::HeartbeatReply r3 = Beat(w3, job, 0);
  EXPECT_FALSE(r1.stop_job());
  ASSERT_TRUE(r1.has_assignment());
  ASSERT_TRUE(r3.has_assignment());
  EXPECT_EQ(r1.assignment().generation(), 1);
  EXPECT_FALSE(r1.assignment().start_ready());
  EXPECT_EQ(r1.assignment().rank(), 0);
  EXPECT_EQ(r3.assignment().rank(), 1);
  ASSERT_EQ(r3.assignment().peer_addresses_size(), 2);
  EXPECT_EQ(r3.assignment().peer_addresses(1), "10.0.0.3:5000");
  EXPECT_NE(r1.assignment().group_key(), first[0].group_key());
  EXPECT_EQ(r1.assignment().group_key(), r3.assignment().group_key());
  EXPECT_EQ(r1.assignment().group_key() >> 63, 0u);

  // A stale generation-0 report (w3 was rank 2) is dropped, not an error.
  EXPECT_TRUE(Step(w3, job, 2, 5, 0).ok());
  // w1 holds step 6 (it applied step 5), w3 holds 5: nothing decided yet.
  EXPECT_FALSE(Beat(w1, job, 1, true, 6).has_assignment());
  EXPECT_TRUE(coord_->GetJob(job)->regrouping());
  // w3 holds 5: decided, start = 6 (the largest), source = rank 0.
  v1::HeartbeatReply s3 = Beat(w3, job, 1, true, 5);
  ASSERT_TRUE(s3.has_assignment());
  EXPECT_TRUE(s3.assignment().start_ready());
  EXPECT_EQ(s3.assignment().start_step(), 6);
  EXPECT_EQ(s3.assignment().state_source_rank(), 0);
  v1::HeartbeatReply s1 = Beat(w1, job, 1, true, 6);
  ASSERT_TRUE(s1.has_assignment());
  EXPECT_EQ(s1.assignment().start_step(), 6);
  // Once they run, heartbeats carry no assignment.
  EXPECT_FALSE(Beat(w1, job, 1).has_assignment());
  st = *coord_->GetJob(job);
  EXPECT_FALSE(st.regrouping());
  EXPECT_EQ(st.step(), 6);
  EXPECT_EQ(st.membership_events(0).step(), 6);

  // Generation 1 runs steps 6..9 with K=2 and finishes.
  for (int t = 6; t <= 9; ++t) {
    ASSERT_TRUE(Step(w1, job, 0, t, 1).ok());
    ASSERT_TRUE(Step(w3, job, 1, t, 1).ok());
  }
  EXPECT_EQ(coord_->GetJob(job)->step(), 10);
  EXPECT_EQ(coord_->GetJob(job)->mismatched_steps(), 0);
  // A stale generation-0 ReportDone(ok=false) does not fail the job.
  v1::ReportDoneRequest stale;
  stale.set_worker_id(w1);
  stale.set_job_id(job);
  stale.set_rank(0);
  stale.set_ok(false);
  stale.set_error("peer gone");
  EXPECT_TRUE(coord_->ReportDone(stale).ok());
  EXPECT_EQ(coord_->GetJob(job)->state(), v1::RUNNING);
  Done({w1, w3}, job, 1, 10);
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::SUCCEEDED) << st.reason();
  // The lost worker, back, is not part of the job any more.
  EXPECT_TRUE(Beat(w2, job).stop_job());
}

TEST_F(MembershipTest, FailPolicyStillFails) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("fail");
  Start({w1, w2, w3}, job);
  LoseAllBut(job, {w1, w2});
  v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.generation(), 0);
  EXPECT_EQ(st.membership_events_size(), 0);
}

TEST_F(MembershipTest, ShrinkDownToOneThenTheLastLossFails) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("shrink");
  Start({w1, w2, w3}, job);
  LoseAllBut(job, {w1, w2});  // w3 lost: K=2
  LoseAllBut(job, {w1});      // w2 lost: K=1
  v1::JobStatus st = *coord_->GetJob(job);
  ASSERT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_EQ(st.world(), 1);
  ASSERT_EQ(st.membership_events_size(), 2);
  EXPECT_EQ(st.membership_events(1).worker_id(), w2);
  // Generation 2 decides as soon as its one rank holds.
  v1::HeartbeatReply r = Beat(w1, job, 2, true, 0);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_TRUE(r.assignment().start_ready());
  EXPECT_EQ(r.assignment().start_step(), 0);
  EXPECT_EQ(r.assignment().peer_addresses_size(), 1);
  LoseAllBut(job, {});  // the last one: nothing to shrink to
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find(w1), std::string::npos) << st.reason();
}

// on_worker_lost = "wait": the lost rank stays vacant, the job pauses
// (RUNNING, reason and waiting_for_ranks say why), no start is decided
// until a new worker takes the rank; then generation 2 (K = 3 again) starts
// at the largest held step with the newcomer copying rank 0's state.
TEST_F(MembershipTest, WaitKeepsTheRankVacantUntilANewWorkerTakesIt) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("wait");
  Start({w1, w2, w3}, job);
  Steps({w1, w2, w3}, job, 0, 4, 0);
  ASSERT_TRUE(Step(w1, job, 0, 5, 0).ok());

  clock_.Advance(absl::Seconds(2));
  Beat(w1, job);
  Beat(w3, job);
  clock_.Advance(absl::Seconds(1.5));
  Beat(w1, job);
  Beat(w3, job);
  coord_->Tick();  // w2 (rank 1) lost
  v1::JobStatus st = *coord_->GetJob(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.world(), 3);
  EXPECT_TRUE(st.regrouping());
  EXPECT_EQ(st.reason(),
            "waiting for a worker to replace rank 1 (lost: worker w-2 (rank 1, host host2, "
            "10.0.0.2:5000) lost: no heartbeat for 3.5s)");
  ASSERT_EQ(st.waiting_for_ranks_size(), 1);
  EXPECT_EQ(st.waiting_for_ranks(0), 1);
  EXPECT_DOUBLE_EQ(st.wait_deadline_unix_s(), 1003.5 + 600);  // the default: 10 minutes
  ASSERT_EQ(st.ranks_size(), 3);
  EXPECT_EQ(st.ranks(1).worker_id(), "");
  ASSERT_EQ(st.membership_events_size(), 1);
  EXPECT_EQ(st.membership_events(0).kind(), "wait");
  EXPECT_EQ(st.membership_events(0).rank(), 1);
  EXPECT_EQ(st.membership_events(0).worker_id(), w2);
  EXPECT_EQ(st.membership_events(0).step(), -1);

  // The survivors stop (generation 1) and hold; nothing is decided while
  // rank 1 is vacant, however long it takes (within the timeout).
  v1::HeartbeatReply r1 = Beat(w1, job, 0);
  ASSERT_TRUE(r1.has_assignment());
  EXPECT_EQ(r1.assignment().generation(), 1);
  EXPECT_EQ(r1.assignment().rank(), 0);
  EXPECT_FALSE(Beat(w1, job, 1, true, 6).has_assignment());
  EXPECT_FALSE(Beat(w3, job, 1, true, 5).has_assignment());
  clock_.Advance(absl::Seconds(60));
  Beat(w1, job, 1, true, 6);
  Beat(w3, job, 1, true, 5);
  coord_->Tick();
  EXPECT_EQ(coord_->GetJob(job)->state(), v1::RUNNING);
  EXPECT_TRUE(coord_->GetJob(job)->regrouping());

  // A fresh worker registers: it takes rank 1 at once (generation 2).
  const std::string w4 = Register(4);
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_EQ(st.reason(), "");
  EXPECT_EQ(st.waiting_for_ranks_size(), 0);
  EXPECT_EQ(st.wait_deadline_unix_s(), 0);
  EXPECT_EQ(st.ranks(1).worker_id(), w4);
  ASSERT_EQ(st.membership_events_size(), 2);
  EXPECT_EQ(st.membership_events(1).kind(), "replace");
  EXPECT_EQ(st.membership_events(1).worker_id(), w4);
  EXPECT_EQ(st.membership_events(1).rank(), 1);
  EXPECT_EQ(st.membership_events(1).world_before(), 2);
  EXPECT_EQ(st.membership_events(1).world_after(), 3);
  v1::HeartbeatReply a4 = Beat(w4, 0);
  ASSERT_TRUE(a4.has_assignment());
  EXPECT_EQ(a4.assignment().generation(), 2);
  EXPECT_EQ(a4.assignment().rank(), 1);
  EXPECT_FALSE(a4.assignment().start_ready());
  ASSERT_EQ(a4.assignment().peer_addresses_size(), 3);
  EXPECT_EQ(a4.assignment().peer_addresses(1), "10.0.0.4:5000");
  // The survivors move to generation 2 and hold again; the newcomer holds
  // nothing (-1). The start: step 6 from rank 0.
  EXPECT_EQ(Beat(w1, job, 1, true, 6).assignment().generation(), 2);
  EXPECT_FALSE(Beat(w1, job, 2, true, 6).has_assignment());
  EXPECT_FALSE(Beat(w3, job, 2, true, 5).has_assignment());
  v1::HeartbeatReply s4 = Beat(w4, job, 2, true, -1);
  ASSERT_TRUE(s4.has_assignment());
  EXPECT_TRUE(s4.assignment().start_ready());
  EXPECT_EQ(s4.assignment().start_step(), 6);
  EXPECT_EQ(s4.assignment().state_source_rank(), 0);
  st = *coord_->GetJob(job);
  EXPECT_FALSE(st.regrouping());
  EXPECT_EQ(st.membership_events(0).step(), 6);
  EXPECT_EQ(st.membership_events(1).step(), 6);

  Steps({w1, w4, w3}, job, 6, 9, 2);
  EXPECT_EQ(coord_->GetJob(job)->step(), 10);
  EXPECT_EQ(coord_->GetJob(job)->mismatched_steps(), 0);
  Done({w1, w4, w3}, job, 2, 10);
  EXPECT_EQ(coord_->GetJob(job)->state(), v1::SUCCEEDED) << coord_->GetJob(job)->reason();
}

// A shared-memory ring's vacant rank goes only to a worker on the job's
// host: one elsewhere stays idle (and free for other jobs) however long it
// waits, and the next worker on that host takes the rank.
TEST_F(MembershipTest, ShmRingTakesAReplacementOnlyFromItsHost) {
  const std::string w1 = Register(1, "h"), w2 = Register(2, "h"), w3 = Register(3, "h");
  const uint64_t job = Submit("wait", 10, 0, v1::SHM);
  Start({w1, w2, w3}, job);
  LoseAllBut(job, {w1, w2});  // w3 (rank 2) lost
  ASSERT_EQ(coord_->GetJob(job)->waiting_for_ranks_size(), 1);
  const std::string elsewhere = Register(4, "other");
  coord_->Tick();
  v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.ranks(2).worker_id(), "");
  EXPECT_EQ(st.membership_events_size(), 1);  // the wait only
  EXPECT_FALSE(Beat(elsewhere, 0).has_assignment());
  const std::string same = Register(5, "h");
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.ranks(2).worker_id(), same);
  ASSERT_EQ(st.membership_events_size(), 2);
  EXPECT_EQ(st.membership_events(1).kind(), "replace");
  EXPECT_EQ(st.membership_events(1).worker_id(), same);
}

// A wait a rank reported is numbered in its generation: a new generation
// (here a vacated rank) forgets it, so `lockstep status` never shows a
// survivor waiting for a rank that is gone.
TEST_F(MembershipTest, ANewGenerationForgetsTheWaitsOfTheOld) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("wait");
  Start({w1, w2, w3}, job);
  clock_.Advance(absl::Seconds(3.5));
  v1::HeartbeatRequest waits;  // rank 0 waits for rank 2, whose worker is silent
  waits.set_worker_id(w1);
  waits.set_job_id(job);
  waits.set_waiting_for_peer(3);
  waits.set_waiting_ms(3400);
  ASSERT_TRUE(coord_->Heartbeat(waits).ok());
  Beat(w2, job);
  EXPECT_EQ(coord_->GetJob(job)->ranks(0).waiting_for_peer(), 3);
  coord_->Tick();  // w3 lost: rank 2 vacant, generation 1
  const v1::JobStatus st = *coord_->GetJob(job);
  ASSERT_EQ(st.generation(), 1);
  EXPECT_EQ(st.ranks(0).waiting_for_peer(), 0);
  EXPECT_EQ(st.ranks(0).waiting_s(), 0);
}

TEST_F(MembershipTest, WaitFailsAfterItsTimeoutNamingTheRank) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("wait", 10, /*wait_timeout_ms=*/5000);
  Start({w1, w2, w3}, job);
  LoseAllBut(job, {w1, w2});  // w3 (rank 2) lost at t = 1003.5
  EXPECT_DOUBLE_EQ(coord_->GetJob(job)->wait_deadline_unix_s(), 1008.5);
  clock_.Advance(absl::Seconds(4.9));
  Beat(w1, job, 1, true, 0);
  Beat(w2, job, 1, true, 0);
  coord_->Tick();
  EXPECT_EQ(coord_->GetJob(job)->state(), v1::RUNNING);
  clock_.Advance(absl::Seconds(0.2));
  coord_->Tick();
  v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(),
            "no worker replaced rank 2 within 5s (spec.wait_timeout_ms 5000); worker w-3 (rank 2, "
            "host host3, 10.0.0.3:5000) lost: no heartbeat for 3.5s");
  // The survivors are told to stop and go idle; a worker registered now
  // is not bound to the failed job.
  EXPECT_TRUE(Beat(w1, job, 1, true, 0).stop_job());
  Register(4);
  EXPECT_EQ(coord_->GetJob(job)->ranks(2).worker_id(), "");
}

TEST_F(MembershipTest, WaitWithNoReplicaLeftFails) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("wait");
  Start({w1, w2, w3}, job);
  LoseAllBut(job, {w1});  // w2 and w3 lost: two vacant ranks, w1 holds
  v1::JobStatus st = *coord_->GetJob(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.waiting_for_ranks_size(), 2);
  EXPECT_EQ(st.reason().rfind("waiting for workers to replace ranks 1, 2 (first lost: worker w-", 0),
            0)
      << st.reason();
  LoseAllBut(job, {});  // w1 lost too: no replica left to copy from
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason().rfind("no rank holding a replica of the job's state is left at step 0 "
                              "(nothing to copy from): rank 0 lost: worker w-1 (rank 0, ",
                              0),
            0)
      << st.reason();
  EXPECT_NE(st.reason().find("; rank(s) 1, 2 vacant (first lost: worker w-"), std::string::npos)
      << st.reason();
}

// Review finding: a replacement that has not received its state is no
// replica holder. Under wait, w-3 (rank 2) is replaced by w-4; before w-4
// trains a step, w-1 and w-2 are lost: w-1's rank goes vacant (w-2 still
// holds), w-2's loss leaves nobody to copy from, and the job FAILS at once
// (it used to wait with the joiner counted as a holder, failing only at
// the workers' regroup deadline) with a reason saying so.
TEST_F(MembershipTest, WaitFailsAtOnceWhenOnlyAJoinerWithoutStateIsLeft) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("wait");
  Start({w1, w2, w3}, job);
  Steps({w1, w2, w3}, job, 0, 4, 0);
  LoseAllBut(job, {w1, w2});  // w3 (rank 2) lost: vacant
  const std::string w4 = Register(4); // replaces rank 2 (generation 2)
  ASSERT_EQ(coord_->GetJob(job)->ranks(2).worker_id(), w4);
  Beat(w1, job, 2, true, 5);
  Beat(w2, job, 2, true, 5);
  ASSERT_TRUE(Beat(w4, job, 2, true, -1).assignment().start_ready());
  // w4 is copying rank 0's state when rank 0 and rank 1 die.
  LoseAllBut(job, {w4});
  ExpectFailed(job,
               "no rank holding a replica of the job's state is left at step 5 (nothing to copy "
               "from): rank 1 lost: worker w-2 (rank 1, host host2, 10.0.0.2:5000) lost: no "
               "heartbeat for 3.5s; rank(s) 0 vacant (first lost: worker w-1 (rank 0, host "
               "host1, 10.0.0.1:5000) lost: no heartbeat for 3.5s); rank(s) 2 (w-4) joined and "
               "had not received the job's state yet");
  EXPECT_TRUE(Beat(w4, job, 2).stop_job());
}

// The same under shrink: the survivors w-1, w-2 die before the joiner w-4
// trained a step: w-1's loss shrinks to {w-2, w-4}, w-2's leaves only w-4,
// which holds nothing: FAILED at once naming the lost rank and the step.
TEST_F(MembershipTest, ShrinkFailsAtOnceWhenOnlyAJoinerWithoutStateIsLeft) {
  std::vector<std::string> ws;
  const uint64_t job = ShrinkThenJoin(100, &ws);
  LoseAllBut(job, {ws[2]});
  ExpectFailed(job,
               "no rank holding a replica of the job's state is left at step 10 (nothing to copy "
               "from): rank 0 lost: worker w-2 (rank 0, host host2, 10.0.0.2:5000) lost: no "
               "heartbeat for 3.5s; rank(s) 1 (w-4) joined and had not received the job's state "
               "yet");
}

// Once the joiner has trained a step it holds a replica: the same losses
// leave it running alone (K = 1) from its own state.
TEST_F(MembershipTest, AJoinerThatTrainedAStepHoldsAReplica) {
  std::vector<std::string> ws;
  const uint64_t job = ShrinkThenJoin(100, &ws);
  Steps(ws, job, 10, 10, 2);
  LoseAllBut(job, {ws[2]});
  const v1::JobStatus st = *coord_->GetJob(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.world(), 1);
  ASSERT_EQ(st.ranks_size(), 1);
  EXPECT_EQ(st.ranks(0).worker_id(), ws[2]);
  // Its held step decides the start.
  v1::HeartbeatReply r = Beat(ws[2], job, st.generation(), true, 11);
  ASSERT_TRUE(r.assignment().start_ready());
  EXPECT_EQ(r.assignment().start_step(), 11);
}

// A shrunk job grows back: an idle worker joins as rank k at a step
// boundary (generation + 1), receives rank 0's state, and the join step is
// recorded in the event.
TEST_F(MembershipTest, LateJoinerGrowsAShrunkJobBackToK) {
  std::vector<std::string> ws;
  const uint64_t job = ShrunkToTwo(/*steps=*/100, &ws);
  const std::string w1 = ws[0], w2 = ws[1];
  const std::string w4 = Register(4);  // joins at once: rank 2, generation 2
  v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_EQ(st.world(), 3);
  EXPECT_TRUE(st.regrouping());
  ASSERT_EQ(st.ranks_size(), 3);
  EXPECT_EQ(st.ranks(2).worker_id(), w4);
  ASSERT_EQ(st.membership_events_size(), 2);
  const v1::MembershipEvent& e = st.membership_events(1);
  EXPECT_EQ(e.kind(), "join");
  EXPECT_EQ(e.worker_id(), w4);
  EXPECT_EQ(e.rank(), 2);
  EXPECT_EQ(e.world_before(), 2);
  EXPECT_EQ(e.world_after(), 3);
  EXPECT_EQ(e.step(), -1);
  EXPECT_EQ(e.generation(), 2);
  v1::HeartbeatReply a4 = Beat(w4, 0);
  ASSERT_TRUE(a4.has_assignment());
  EXPECT_EQ(a4.assignment().rank(), 2);
  EXPECT_EQ(a4.assignment().generation(), 2);
  EXPECT_EQ(a4.assignment().peer_addresses_size(), 3);
  // rank 0 stopped after step 10, rank 1 after step 9: start at 11 from rank 0.
  EXPECT_EQ(Beat(w1, job, 1).assignment().generation(), 2);
  Beat(w1, job, 2, true, 11);
  Beat(w2, job, 2, true, 10);
  v1::HeartbeatReply s4 = Beat(w4, job, 2, true, -1);
  ASSERT_TRUE(s4.assignment().start_ready());
  EXPECT_EQ(s4.assignment().start_step(), 11);
  EXPECT_EQ(s4.assignment().state_source_rank(), 0);
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.membership_events(0).step(), 5);   // the shrink
  EXPECT_EQ(st.membership_events(1).step(), 11);  // the join step
  Steps({w1, w2, w4}, job, 11, 99, 2);
  Done({w1, w2, w4}, job, 2, 100);
  EXPECT_EQ(coord_->GetJob(job)->state(), v1::SUCCEEDED) << coord_->GetJob(job)->reason();
}

TEST_F(MembershipTest, NoLateJoinNearTheEndOrAtFullK) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("shrink", /*steps=*/30);
  Start({w1, w2, w3}, job);
  // At full K a fourth worker stays idle.
  const std::string w4 = Register(4);
  EXPECT_EQ(coord_->GetJob(job)->generation(), 0);
  Steps({w1, w2, w3}, job, 0, 4, 0);
  clock_.Advance(absl::Seconds(3.5));
  Beat(w1, job);
  Beat(w2, job);
  Beat(w4, 0);
  coord_->Tick();  // w3 lost: K = 2; w4 (idle) joins right away: step 5 + 20 < 30
  EXPECT_EQ(coord_->GetJob(job)->generation(), 2);
  EXPECT_EQ(coord_->GetJob(job)->world(), 3);
}

TEST_F(MembershipTest, NoLateJoinWithinTheMarginOfTheEnd) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("shrink", /*steps=*/30);
  Start({w1, w2, w3}, job);
  Steps({w1, w2, w3}, job, 0, 9, 0);  // steps done: 10; 10 + 20 >= 30
  LoseAllBut(job, {w1, w2});  // w3 lost: K = 2
  const std::string w4 = Register(4);
  v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.world(), 2);
  bool idle = false;
  const v1::WorkerList workers = coord_->ListWorkers();
  for (const v1::WorkerInfo& w : workers.workers()) {
    if (w.worker_id() == w4) idle = w.state() == v1::IDLE;
  }
  EXPECT_TRUE(idle);
}

// The plain functions: the margin follows the job's rate.
TEST(GrowMarginTest, AtLeastTwentyStepsOrTwoSecondsOfSteps) {
  JobRecord job;
  job.spec.set_global_batch(10);
  EXPECT_EQ(GrowMargin(job), 20);
  job.examples_per_second = 1000;  // 100 steps/s
  EXPECT_EQ(GrowMargin(job), 201);
}

TEST(GenerationKeyTest, FreshKeyPerGenerationBit63Clear) {
  const uint64_t base = (uint64_t{12345} << 20) | 7;
  EXPECT_EQ(GenerationKey(base, 0), base);
  EXPECT_NE(GenerationKey(base, 1), base);
  EXPECT_NE(GenerationKey(base, 1), GenerationKey(base, 2));
  for (int g = 1; g < 100; ++g) EXPECT_EQ(GenerationKey(base, g) >> 63, 0u);
}

// A stuck ring's rank to drop: the one more ranks wait for than any other;
// K = 2 rank 1; none when the waits form a cycle or name no valid peer.
TEST(RankToDropWhenStuckTest, TheRankTheOthersWaitFor) {
  EXPECT_EQ(RankToDropWhenStuck({1, 0}), 1);
  EXPECT_EQ(RankToDropWhenStuck({2, 2, 0}), 2);
  EXPECT_EQ(RankToDropWhenStuck({1, 0, 1}), 1);
  EXPECT_EQ(RankToDropWhenStuck({3, 3, 3, 0}), 3);
  EXPECT_EQ(RankToDropWhenStuck({1, 2, 0}), -1);     // a ring's cycle
  EXPECT_EQ(RankToDropWhenStuck({1, 0, 3, 2}), -1);  // two pairs
  EXPECT_EQ(RankToDropWhenStuck({0, 0}), -1);        // a rank waiting for itself
  EXPECT_EQ(RankToDropWhenStuck({2, 0}), -1);        // out of range
  EXPECT_EQ(RankToDropWhenStuck({-1, 0}), -1);
  EXPECT_EQ(RankToDropWhenStuck({}), -1);
}

// After a restart the dropped workers come back from the stored events
// (only those whose reason says they were dropped, not lost ones).
TEST(RankToDropWhenStuckTest, DroppedWorkersAreRestoredFromTheEvents) {
  JobRecord job;
  v1::MembershipEvent lost;
  lost.set_kind("shrink");
  lost.set_worker_id("w-4");
  lost.set_reason("worker w-4 (rank 2, host h4, 10.0.0.4:5000) lost: no heartbeat for 3.1s");
  v1::MembershipEvent dropped;
  dropped.set_kind("wait");
  dropped.set_worker_id("w-2");
  dropped.set_reason(absl::StrCat("rank 1 (w-2, host h2) ", kDroppedUnreachable, " (...)"));
  job.membership.events = {lost, dropped};
  RestoreDroppedWorkers(&job);
  EXPECT_TRUE(WasDropped(job, "w-2"));
  EXPECT_FALSE(WasDropped(job, "w-4"));
  EXPECT_EQ(job.membership.dropped_workers.size(), 1u);
}

}  // namespace
}  // namespace lockstep
