// Membership (server/membership.h) through the Coordinator, on a fake
// clock: a K=3 shrink job loses a worker; the survivors get the next
// generation's assignment (renumbered, fresh group key), report their held
// steps, get the start (the largest held step, the lowest rank holding it),
// stale reports are dropped, and the job completes with K=2; a shrunk job
// grows back when a worker is idle (not near its end). Plus the plain
// functions and the refusal cases (fail policy, the last rank, no replica
// left). The wait policy's cases are in membership_wait_test.cc.
#include "server/membership.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/membership_test_fixture.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;
using testing_membership::MembershipTest;

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

// reach[i][j] from the links that are up (both directions unless `one_way`).
std::vector<std::vector<bool>> Reach(int k, const std::vector<std::pair<int, int>>& up,
                                     const std::vector<std::pair<int, int>>& one_way = {}) {
  std::vector<std::vector<bool>> r(static_cast<size_t>(k), std::vector<bool>(k, false));
  for (int i = 0; i < k; ++i) r[i][i] = true;
  for (auto [a, b] : up) r[a][b] = r[b][a] = true;
  for (auto [a, b] : one_way) r[a][b] = true;
  return r;
}

TEST(LargestMutuallyReachableTest, KeepsTheLargestGroupAndRankZeroOnATie) {
  using V = std::vector<int>;
  // K = 3, the link 0-1 down: {0, 2} and {1, 2} tie; rank 0 stays.
  EXPECT_EQ(LargestMutuallyReachable(Reach(3, {{0, 2}, {1, 2}})), (V{0, 2}));
  // A partition {0, 1} | {2, 3}: a tie again, the group with rank 0.
  EXPECT_EQ(LargestMutuallyReachable(Reach(4, {{0, 1}, {2, 3}})), (V{0, 1}));
  // {0} | {1, 2, 3}: the larger group, without rank 0.
  EXPECT_EQ(LargestMutuallyReachable(Reach(4, {{1, 2}, {1, 3}, {2, 3}})), (V{1, 2, 3}));
  // One host cut off: the rest.
  EXPECT_EQ(LargestMutuallyReachable(Reach(4, {{0, 1}, {0, 3}, {1, 3}})), (V{0, 1, 3}));
  // A one-way link is not a link.
  EXPECT_EQ(LargestMutuallyReachable(Reach(3, {{1, 2}}, {{0, 1}, {0, 2}})), (V{1, 2}));
  // Every link up: everyone; none: rank 0 alone.
  EXPECT_EQ(LargestMutuallyReachable(Reach(3, {{0, 1}, {0, 2}, {1, 2}})), (V{0, 1, 2}));
  EXPECT_EQ(LargestMutuallyReachable(Reach(3, {})), (V{0}));
  // A ring of 5 with 0-1 and 2-3 down besides the ring's other non-edges:
  // the largest clique of {0-2, 0-3, 0-4, 1-3, 1-4, 2-4, 3-4, 1-2}: {0, 2, 4}
  // and {1, 3, 4}, {0, 3, 4}, {1, 2, 4} all size 3; rank 0's first: {0, 2, 4}.
  EXPECT_EQ(LargestMutuallyReachable(
                Reach(5, {{0, 2}, {0, 3}, {0, 4}, {1, 3}, {1, 4}, {2, 4}, {3, 4}, {1, 2}})),
            (V{0, 2, 4}));
  // Short rows count as unreachable; bounds.
  EXPECT_EQ(LargestMutuallyReachable({{true}, {true, true}}), (V{0}));
  EXPECT_EQ(LargestMutuallyReachable({}), V{});
  EXPECT_EQ(LargestMutuallyReachable(Reach(kMaxProbedRanks + 1, {})), V{});
  // 64 ranks, every link up but those of rank 63: ranks 0..62.
  std::vector<std::pair<int, int>> up;
  for (int i = 0; i < 63; ++i) {
    for (int j = i + 1; j < 63; ++j) up.push_back({i, j});
  }
  EXPECT_EQ(LargestMutuallyReachable(Reach(64, up)).size(), 63u);
  // 64 ranks in 32 pairs whose own link is down: 2^32 groups of 32 tie.
  // The search stops after kMaxCliqueSteps and keeps none.
  up.clear();
  for (int i = 0; i < 64; ++i) {
    for (int j = i + 1; j < 64; ++j) {
      if (j != i + 32) up.push_back({i, j});
    }
  }
  EXPECT_EQ(LargestMutuallyReachable(Reach(64, up)), V{});
}

TEST(LargestMutuallyReachableTest, AnswersCountOnlyForTheCurrentProbeAndRanksOfTheJob) {
  JobRecord job;
  job.ranks.resize(3);
  job.k = 3;
  job.membership.generation = 2;
  MembershipState::ReachProbe& p = job.membership.probe;
  p.id = 5;
  p.generation = 2;
  p.width = 3;
  p.answered.assign(3, false);
  p.reachable.assign(3, {});
  google::protobuf::RepeatedField<int32_t> r;
  r.Add(2);
  r.Add(7);   // not a rank of the job
  r.Add(-1);
  EXPECT_FALSE(RecordProbeAnswer(&job, 1, 4, r));  // an old probe
  EXPECT_FALSE(RecordProbeAnswer(&job, 3, 5, r));  // no such rank
  EXPECT_FALSE(p.answered[1]);
  EXPECT_TRUE(RecordProbeAnswer(&job, 1, 5, r));
  EXPECT_TRUE(p.answered[1]);
  EXPECT_EQ(p.reachable[1], (std::vector<bool>{false, true, true}));
  job.membership.generation = 3;  // regrouped since
  EXPECT_FALSE(RecordProbeAnswer(&job, 0, 5, r));
  // A ps job's probe of its 2 shards: shard indices, no self mark.
  p.generation = 3;
  p.shards = true;
  p.width = 2;
  google::protobuf::RepeatedField<int32_t> shards;
  shards.Add(1);
  shards.Add(2);  // not a shard
  EXPECT_TRUE(RecordProbeAnswer(&job, 0, 5, shards));
  EXPECT_EQ(p.reachable[0], (std::vector<bool>{false, true}));
  EXPECT_EQ(RanksReachingEveryShard({{true, true}, {false, true}, {true, true}, {true}}, 2),
            (std::vector<int>{0, 2}));
}

}  // namespace
}  // namespace lockstep
