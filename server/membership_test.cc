// Membership (server/membership.h) through the Coordinator, on a fake
// clock: a K=3 shrink job loses a worker; the survivors get the next
// generation's assignment (renumbered, fresh group key), report their held
// steps, get the start (the largest held step, the lowest rank holding it),
// stale reports are dropped, and the job completes with K=2. Plus the
// plain functions and the refusal cases (fail policy, the last rank).
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

  std::string Register(int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(absl::StrCat("host", i));
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

  uint64_t Submit(const std::string& policy) {
    v1::JobSpec spec;
    spec.set_name("t");
    spec.set_model("mlp:8");
    spec.set_sync_mode(v1::RING);
    spec.set_peer_transport(v1::GRPC);
    spec.set_num_workers(3);
    spec.set_global_batch(24);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(10);
    spec.set_on_worker_lost(policy);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto r = coord_->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
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
  for (int rank = 0; rank < 2; ++rank) {
    v1::ReportDoneRequest d;
    d.set_worker_id(rank == 0 ? w1 : w3);
    d.set_job_id(job);
    d.set_rank(rank);
    d.set_ok(true);
    d.set_generation(1);
    d.set_steps(10);
    d.set_weights_hash(Hash(7));
    ASSERT_TRUE(coord_->ReportDone(d).ok());
  }
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::SUCCEEDED) << st.reason();
  // The lost worker, back, is not part of the job any more.
  EXPECT_TRUE(Beat(w2, job).stop_job());
}

TEST_F(MembershipTest, FailPolicyStillFails) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("fail");
  for (const std::string& w : {w1, w2, w3}) {
    Beat(w, 0);
    Beat(w, job);
  }
  clock_.Advance(absl::Seconds(3.5));
  Beat(w1, job);
  Beat(w2, job);
  coord_->Tick();
  v1::JobStatus st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.generation(), 0);
  EXPECT_EQ(st.membership_events_size(), 0);
}

TEST_F(MembershipTest, ShrinkDownToOneThenTheLastLossFails) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  const uint64_t job = Submit("shrink");
  for (const std::string& w : {w1, w2, w3}) {
    Beat(w, 0);
    Beat(w, job);
  }
  clock_.Advance(absl::Seconds(3.5));
  Beat(w1, job);
  Beat(w2, job);
  coord_->Tick();  // w3 lost: K=2
  clock_.Advance(absl::Seconds(3.5));
  Beat(w1, job);
  coord_->Tick();  // w2 lost: K=1
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
  clock_.Advance(absl::Seconds(3.5));
  coord_->Tick();  // the last one: nothing to shrink to
  st = *coord_->GetJob(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find(w1), std::string::npos) << st.reason();
}

TEST(GenerationKeyTest, FreshKeyPerGenerationBit63Clear) {
  const uint64_t base = (uint64_t{12345} << 20) | 7;
  EXPECT_EQ(GenerationKey(base, 0), base);
  EXPECT_NE(GenerationKey(base, 1), base);
  EXPECT_NE(GenerationKey(base, 1), GenerationKey(base, 2));
  for (int g = 1; g < 100; ++g) EXPECT_EQ(GenerationKey(base, g) >> 63, 0u);
}

}  // namespace
}  // namespace lockstep
