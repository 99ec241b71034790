// The Membership test fixture shared by server/membership_test.cc and
// server/membership_wait_test.cc: a Coordinator on a fake clock at t = 1000 s
// (lost_after 3 s), workers at 10.0.0.i:5000, and helpers that register,
// heartbeat, submit, start, step and finish jobs as workers would.
// Test-only; one fixture per test.
#ifndef LOCKSTEP_SERVER_MEMBERSHIP_TEST_FIXTURE_H_
#define LOCKSTEP_SERVER_MEMBERSHIP_TEST_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/job_store.h"
#include "server/membership.h"

namespace lockstep {
namespace testing_membership {

namespace v1 = ::lockstep::v1;

inline std::string Hash(int i) { return absl::StrFormat("%032x", i); }

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

}  // namespace testing_membership
}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_MEMBERSHIP_TEST_FIXTURE_H_
