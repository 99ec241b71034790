// Membership under on_worker_lost=wait (server/membership.h) through the
// Coordinator, on a fake clock: the lost rank stays vacant (RUNNING, with
// the reason and waiting_for_ranks) until a new worker takes it, an shm
// ring takes a replacement only from its host, a new generation forgets
// the old one's waits, and the job fails after its wait timeout or when no
// replica is left. The shrink and join cases are in membership_test.cc.
#include "server/membership.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/membership_test_fixture.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;
using testing_membership::MembershipTest;

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

}  // namespace
}  // namespace lockstep
