// The coordinator's state database and bounded sync replies: a restart
// (a second Coordinator on the same --state_dir) keeps workers, jobs, the
// id counters, the incarnation and the sync history, and its running job
// continues to SUCCEEDED; the 26000-step, K = 4 history of the reported
// RESOURCE_EXHAUSTED (4.6 MB) now answers every request under gRPC's 4 MiB
// default, in process and over gRPC with a default-sized stub.
#include <stdlib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/net/data_auth.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/coordinator_state.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
#include "server/membership.h"
#include "server/state/state_db.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::string Hash(int64_t i) { return absl::StrFormat("%032x", i); }

v1::JobSpec Spec(int k, int64_t steps) {
  v1::JobSpec spec;
  spec.set_model("mlp:8");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(k);
  spec.set_global_batch(8 * k);
  spec.mutable_lr()->set_base_lr(0.1f);
  spec.set_steps(steps);
  return spec;
}

// A copy of the state directory `dir` (one restart of several from the
// same database), at dir + "_" + name.
std::string CopyOf(const std::string& dir, const std::string& name) {
  const std::string copy = absl::StrCat(dir, "_", name);
  EXPECT_EQ(system(absl::StrCat("cp -r ", dir, " ", copy).c_str()), 0);
  return copy;
}

std::string TempDir() {
  std::string tmpl = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                  "/coord_state_XXXXXX");
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl + "/state";
}

// One coordinator process's worth of objects.
struct Incarnation {
  std::unique_ptr<StateDb> db;
  std::unique_ptr<Coordinator> coord;
};

class CoordinatorStateTest : public ::testing::Test {
 protected:
  CoordinatorStateTest() : clock_(absl::FromUnixSeconds(1700000000 + 1000)) {}

  Incarnation Start(const std::string& dir, std::vector<std::string> ps_addresses = {}) {
    Incarnation inc;
    if (!dir.empty()) {
      auto db = StateDb::Open({dir});
      EXPECT_TRUE(db.ok()) << db.status();
      inc.db = *std::move(db);
    }
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    o.ps_addresses = std::move(ps_addresses);
    o.forget_ps_group = [this](uint64_t group) { forgotten_.push_back(group); };
    inc.coord = std::make_unique<Coordinator>(o, &clock_);
    if (inc.db != nullptr) {
      absl::Status s = inc.coord->AttachStateDb(inc.db.get());
      EXPECT_TRUE(s.ok()) << s;
    }
    return inc;
  }

  static std::string Register(Coordinator* c, int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(absl::StrCat("host", i));
    auto r = c->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }
  static uint64_t Submit(Coordinator* c, const v1::JobSpec& spec) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto r = c->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }
  static v1::HeartbeatReply Beat(Coordinator* c, const std::string& w, uint64_t job = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    auto r = c->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }
  static void Step(Coordinator* c, uint64_t job, int rank, const std::string& w, int64_t step,
                   int64_t generation = 0) {
    v1::ReportStepRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(Hash(step));
    req.set_loss(1.0);
    req.set_examples(8);
    req.set_generation(generation);
    auto r = c->ReportStep(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->stop()) << r->reason();
  }
  static void Done(Coordinator* c, uint64_t job, int rank, const std::string& w,
                   const std::string& hash, int64_t generation = 0) {
    v1::ReportDoneRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_ok(true);
    req.set_weights_hash(hash);
    req.set_steps(100);
    req.set_generation(generation);
    ASSERT_TRUE(c->ReportDone(req).ok());
  }
  // A rank holding its replica at `held` for `generation` (a regroup).
  static v1::HeartbeatReply Hold(Coordinator* c, const std::string& w, uint64_t job,
                                 int64_t generation, int64_t held) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_generation(generation);
    req.set_holds_state(true);
    req.set_held_step(held);
    auto r = c->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }
  // Registers w-1..w-k, submits `spec` as job 1, starts it on them and
  // reports steps [0, steps) from every rank. With acknowledge false the
  // workers never heartbeat: the job is RUNNING on them, unacknowledged.
  void StartAndStep(Coordinator* c, const v1::JobSpec& spec, int64_t steps,
                    bool acknowledge = true) {
    const int k = spec.num_workers();
    for (int i = 1; i <= k; ++i) Register(c, i);
    ASSERT_EQ(Submit(c, spec), 1u);
    for (int i = 1; acknowledge && i <= k; ++i) {
      const std::string w = absl::StrCat("w-", i);
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment());
      group_key_ = r.assignment().group_key();
      Beat(c, w, 1);
    }
    for (int64_t s = 0; s < steps; ++s) {
      for (int i = 1; i <= k; ++i) Step(c, 1, i - 1, absl::StrCat("w-", i), s);
    }
  }
  // Uploads 6 floats as job 1's final weights from w-1 (rank 0).
  static void UploadWeights(Coordinator* c) {
    std::string data;
    for (int i = 0; i < 6; ++i) {
      const float f = 0.25f * i;
      data.append(reinterpret_cast<const char*>(&f), 4);
    }
    v1::WeightsChunk chunk;
    chunk.set_job_id(1);
    chunk.set_worker_id("w-1");
    chunk.set_offset(0);
    chunk.set_total(6);
    chunk.set_data(data);
    chunk.add_block_names("W0");
    chunk.add_block_shapes(2);
    chunk.add_block_shapes(3);
    ASSERT_TRUE(c->UploadWeightsChunk(chunk).ok());
    ASSERT_TRUE(c->FinishWeightsUpload("w-1", 1).ok());
  }

  FakeClock clock_;
  uint64_t group_key_ = 0;  // StartAndStep's job's
  std::vector<uint64_t> forgotten_;  // CoordinatorOptions::forget_ps_group's calls
};

TEST_F(CoordinatorStateTest, RestartKeepsJobsWorkersCountersAndHistoryAndTheJobContinues) {
  const std::string dir = TempDir();
  uint64_t group_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    ASSERT_EQ(Register(c, 1), "w-1");
    ASSERT_EQ(Register(c, 2), "w-2");
    const uint64_t job = Submit(c, Spec(2, 100));
    ASSERT_EQ(job, 1u);
    for (const char* w : {"w-1", "w-2"}) {
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment());
      group_key = r.assignment().group_key();
      Beat(c, w, job);
    }
    for (int64_t s = 0; s < 50; ++s) {
      Step(c, job, 0, "w-1", s);
      Step(c, job, 1, "w-2", s);
      clock_.Advance(absl::Milliseconds(10));
    }
    EXPECT_EQ(Submit(c, Spec(2, 10)), 2u);  // PENDING: no idle worker
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }  // the coordinator is gone; the database stays

  clock_.Advance(absl::Seconds(5));
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobList jobs = c->ListJobs();
  ASSERT_EQ(jobs.jobs_size(), 2);
  const v1::JobStatus& j1 = jobs.jobs(0);
  EXPECT_EQ(j1.state(), v1::RUNNING);
  EXPECT_EQ(j1.step(), 50);
  EXPECT_EQ(j1.checked_steps(), 50);
  ASSERT_EQ(j1.ranks_size(), 2);
  EXPECT_EQ(j1.ranks(1).worker_id(), "w-2");
  EXPECT_EQ(jobs.jobs(1).state(), v1::PENDING);
  v1::WorkerList workers = c->ListWorkers();
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(0).state(), v1::BUSY);
  EXPECT_EQ(workers.workers(0).job_id(), 1u);

  // The workers carry on: their heartbeats acknowledge the job (no
  // reregister, no stop) and their reports are accepted; a report of a
  // step checked before the restart is a duplicate.
  for (const char* w : {"w-1", "w-2"}) {
    v1::HeartbeatReply r = Beat(c, w, 1);
    EXPECT_FALSE(r.reregister());
    EXPECT_FALSE(r.stop_job());
  }
  Step(c, 1, 0, "w-1", 49);
  for (int64_t s = 50; s < 100; ++s) {
    Step(c, 1, 0, "w-1", s);
    Step(c, 1, 1, "w-2", s);
  }
  Done(c, 1, 0, "w-1", Hash(99));
  Done(c, 1, 1, "w-2", Hash(99));
  v1::JobStatus done = *c->GetJob(1);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.final_hash(), Hash(99));
  EXPECT_EQ(done.checked_steps(), 100);
  EXPECT_EQ(done.mismatched_steps(), 0);

  // The newest 100 checks: 50 from the database, 50 from memory.
  absl::StatusOr<v1::SyncHistory> h = c->GetSyncHistory(1, 0);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->checks_size(), 100);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(h->checks(i).step(), i);
  // Pages of 30 from step 0.
  int64_t seen = 0;
  for (int64_t from = 0; from >= 0;) {
    absl::StatusOr<v1::SyncHistory> page = c->GetSyncHistoryPage(1, from, 30);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->checks_size(), 30);
    for (const v1::SyncCheck& check : page->checks()) EXPECT_EQ(check.step(), seen++);
    from = page->next_step();
  }
  EXPECT_EQ(seen, 100);

  // Ids continue; the incarnation (group keys) is the stored one.
  EXPECT_EQ(Register(c, 3), "w-3");
  EXPECT_EQ(Submit(c, Spec(1, 10)), 3u);
  for (const char* w : {"w-1", "w-2"}) Beat(c, w);  // the job ended: IDLE, job 2 starts
  v1::HeartbeatReply r = Beat(c, "w-1");
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), 2u);
  EXPECT_EQ(r.assignment().group_key() >> 20, group_key >> 20);
}

// The data-plane secret of a group key is the same after a restart, so a
// rank assigned by the restarted coordinator can connect to peers (and ps
// servers) that got theirs before it.
TEST_F(CoordinatorStateTest, DataPlaneSecretsSurviveRestart) {
  const std::string dir = TempDir();
  v1::Assignment before;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    ASSERT_EQ(Register(c, 1), "w-1");
    ASSERT_EQ(Register(c, 2), "w-2");
    ASSERT_EQ(Submit(c, Spec(2, 100)), 1u);
    v1::HeartbeatReply r = Beat(c, "w-1");
    ASSERT_TRUE(r.has_assignment());
    before = r.assignment();
    Beat(c, "w-1", 1);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  ASSERT_EQ(before.data_plane_secret().size(), dataauth::kSecretBytes);
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  Beat(c, "w-1", 1);
  v1::HeartbeatReply r = Beat(c, "w-2");  // never acknowledged job 1
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), 1u);
  EXPECT_EQ(r.assignment().group_key(), before.group_key());
  EXPECT_EQ(r.assignment().data_plane_secret(), before.data_plane_secret());
  // Another coordinator without the database draws its own key.
  Incarnation other = Start("");
  ASSERT_EQ(Register(other.coord.get(), 1), "w-1");
  ASSERT_EQ(Register(other.coord.get(), 2), "w-2");
  ASSERT_EQ(Submit(other.coord.get(), Spec(2, 100)), 1u);
  v1::HeartbeatReply o = Beat(other.coord.get(), "w-1");
  ASSERT_TRUE(o.has_assignment());
  EXPECT_NE(o.assignment().data_plane_secret(), before.data_plane_secret());
}

// A worker's token (RegisterWorkerReply.worker_token) is still its token
// after a restart with the state database (the key comes from it), so its
// calls keep passing the service's check; a coordinator without the
// database refuses it, and no two ids share a token.
TEST_F(CoordinatorStateTest, WorkerTokensSurviveRestart) {
  const std::string dir = TempDir();
  std::string token1, token2;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    v1::RegisterWorkerRequest req;
    req.set_address("10.0.0.1:5000");
    auto r = c->RegisterWorker(req);
    ASSERT_TRUE(r.ok()) << r.status();
    token1 = r->worker_token();
    req.set_address("10.0.0.2:5000");
    r = c->RegisterWorker(req);
    ASSERT_TRUE(r.ok()) << r.status();
    token2 = r->worker_token();
    EXPECT_TRUE(c->CheckWorkerToken("w-1", token1).ok());
    EXPECT_EQ(c->CheckWorkerToken("w-1", token2).code(), absl::StatusCode::kPermissionDenied);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  ASSERT_EQ(token1.size(), 64u);
  EXPECT_NE(token1, token2);
  Incarnation second = Start(dir);
  EXPECT_TRUE(second.coord->CheckWorkerToken("w-1", token1).ok());
  EXPECT_TRUE(second.coord->CheckWorkerToken("w-2", token2).ok());
  EXPECT_EQ(second.coord->CheckWorkerToken("w-2", "").code(),
            absl::StatusCode::kPermissionDenied);
  Incarnation other = Start("");
  EXPECT_EQ(other.coord->CheckWorkerToken("w-1", token1).code(),
            absl::StatusCode::kPermissionDenied);
}

// A restored worker keeps the memory limit it advertised at registration:
// SubmitJob refuses a job it cannot hold after a restart as before (it
// counted as unlimited until it re-registered).
TEST_F(CoordinatorStateTest, AdvertisedWorkerLimitSurvivesRestart) {
  const std::string dir = TempDir();
  {
    Incarnation first = Start(dir);
    v1::RegisterWorkerRequest req;
    req.set_address("10.0.0.1:5000");
    req.set_max_job_memory_bytes(1000000);  // 1 MB: mlp:1000 fits, mlp:10000 does not
    ASSERT_TRUE(first.coord->RegisterWorker(req).ok());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  Beat(c, "w-1");  // back: IDLE, without registering again
  v1::SubmitJobRequest big;
  *big.mutable_spec() = Spec(1, 10);
  big.mutable_spec()->set_model("mlp:10000");
  absl::StatusOr<v1::SubmitJobReply> r = c->SubmitJob(big);
  ASSERT_FALSE(r.ok()) << "accepted job " << r->job_id();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("the largest worker limit is 1000000 bytes"),
            std::string::npos)
      << r.status();
  v1::JobSpec small = Spec(1, 10);
  small.set_model("mlp:1000");
  EXPECT_EQ(Submit(c, small), 1u);
}

TEST_F(CoordinatorStateTest, LeftWorkerAndItsFailedJobStayThatWayAcrossRestart) {
  const std::string dir = TempDir();
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    Register(c, 1);
    Register(c, 2);
    Submit(c, Spec(2, 100));
    v1::DeregisterWorkerRequest leave;
    leave.set_worker_id("w-2");
    leave.set_reason("test");
    // Leaving fails the job at once; this checks the stored outcome.
    ASSERT_TRUE(c->DeregisterWorker(leave).ok());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  v1::JobStatus j = *second.coord->GetJob(1);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.reason().find("w-2"), std::string::npos) << j.reason();
  ASSERT_EQ(second.coord->ListWorkers().workers_size(), 1);
}

// Issue 10 "Nothing lost": a job that shrank (K = 3 -> 2) keeps its
// generation, members, group key and events across restarts — one while it
// regroups, one after its start was decided — and finishes SUCCEEDED.
TEST_F(CoordinatorStateTest, ShrunkJobKeepsItsGroupAcrossRestarts) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(3, 60);
  spec.set_on_worker_lost("shrink");
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    for (int i = 1; i <= 3; ++i) Register(c, i);
    ASSERT_EQ(Submit(c, spec), 1u);
    for (const char* w : {"w-1", "w-2", "w-3"}) {
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment());
      gen0_key = r.assignment().group_key();
      Beat(c, w, 1);
    }
    for (int64_t s = 0; s < 20; ++s) {
      Step(c, 1, 0, "w-1", s, 0);
      Step(c, 1, 1, "w-2", s, 0);
      Step(c, 1, 2, "w-3", s, 0);
    }
    // w-3 goes silent: lost after 3 s, the job shrinks (generation 1, K 2).
    for (int i = 0; i < 4; ++i) {
      clock_.Advance(absl::Seconds(1));
      Beat(c, "w-1", 1);
      Beat(c, "w-2", 1);
      c->Tick();
    }
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    ASSERT_EQ(j.generation(), 1);
    ASSERT_TRUE(j.regrouping());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }  // SIGKILL-like: no drain, the database as committed

  uint64_t gen1_key = 0;
  {
    Incarnation second = Start(dir);
    Coordinator* c = second.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 1);
    EXPECT_EQ(j.world(), 2);
    EXPECT_TRUE(j.regrouping());
    ASSERT_EQ(j.ranks_size(), 2);
    EXPECT_EQ(j.ranks(0).worker_id(), "w-1");
    EXPECT_EQ(j.ranks(1).worker_id(), "w-2");
    EXPECT_EQ(j.ranks(1).address(), "10.0.0.2:5000");
    ASSERT_EQ(j.membership_events_size(), 1);
    EXPECT_EQ(j.membership_events(0).kind(), "shrink");
    EXPECT_EQ(j.membership_events(0).worker_id(), "w-3");
    // The survivors say what they hold (w-2 is one step behind): the start
    // is decided after the restart.
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, 20).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, 19);
    ASSERT_TRUE(r.has_assignment());
    EXPECT_EQ(r.assignment().generation(), 1);
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 20);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    EXPECT_EQ(r.assignment().rank(), 1);
    EXPECT_EQ(r.assignment().peer_addresses_size(), 2);
    gen1_key = r.assignment().group_key();
    EXPECT_NE(gen1_key, gen0_key);
    EXPECT_EQ(gen1_key, GenerationKey(gen0_key, 1));
    for (int64_t s = 20; s < 40; ++s) {
      Step(c, 1, 0, "w-1", s, 1);
      Step(c, 1, 1, "w-2", s, 1);
    }
    ASSERT_TRUE(second.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }

  Incarnation third = Start(dir);
  Coordinator* c = third.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
  EXPECT_EQ(j.generation(), 1);
  EXPECT_EQ(j.world(), 2);
  EXPECT_FALSE(j.regrouping());
  ASSERT_EQ(j.membership_events_size(), 1);
  EXPECT_EQ(j.membership_events(0).step(), 20);
  // A survivor carrying on (generation 1, not holding) needs nothing; one
  // that lost its assignment gets the same group back.
  v1::HeartbeatRequest carry;
  carry.set_worker_id("w-1");
  carry.set_job_id(1);
  carry.set_generation(1);
  v1::HeartbeatReply r = *c->Heartbeat(carry);
  EXPECT_FALSE(r.has_assignment());
  EXPECT_FALSE(r.stop_job());
  carry.set_generation(0);
  r = *c->Heartbeat(carry);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().group_key(), gen1_key);
  EXPECT_EQ(r.assignment().start_step(), 20);
  Beat(c, "w-2", 1);
  for (int64_t s = 40; s < 60; ++s) {
    Step(c, 1, 0, "w-1", s, 1);
    Step(c, 1, 1, "w-2", s, 1);
  }
  for (int rank = 0; rank < 2; ++rank) {
    v1::ReportDoneRequest req;
    req.set_worker_id(rank == 0 ? "w-1" : "w-2");
    req.set_job_id(1);
    req.set_rank(rank);
    req.set_ok(true);
    req.set_weights_hash(Hash(59));
    req.set_steps(60);
    req.set_generation(1);
    ASSERT_TRUE(c->ReportDone(req).ok());
  }
  j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
  EXPECT_EQ(j.final_hash(), Hash(59));
}

// on_worker_lost = "wait": a job waiting for a worker to take its vacant
// rank keeps waiting across a restart (the vacant rank, the wait's start
// and reason, its generation), and a worker registering after the restart
// takes the rank; the job then finishes.
TEST_F(CoordinatorStateTest, WaitingJobKeepsItsVacantRankAcrossRestart) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(3, 40);
  spec.set_on_worker_lost("wait");
  double deadline = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    for (int i = 1; i <= 3; ++i) Register(c, i);
    ASSERT_EQ(Submit(c, spec), 1u);
    for (const char* w : {"w-1", "w-2", "w-3"}) {
      ASSERT_TRUE(Beat(c, w).has_assignment());
      Beat(c, w, 1);
    }
    for (int64_t s = 0; s < 10; ++s) {
      Step(c, 1, 0, "w-1", s);
      Step(c, 1, 1, "w-2", s);
      Step(c, 1, 2, "w-3", s);
    }
    for (int i = 0; i < 4; ++i) {  // w-3 goes silent: its rank 2 is vacated
      clock_.Advance(absl::Seconds(1));
      Beat(c, "w-1", 1);
      Beat(c, "w-2", 1);
      c->Tick();
    }
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    ASSERT_EQ(j.waiting_for_ranks_size(), 1);
    ASSERT_EQ(j.waiting_for_ranks(0), 2);
    deadline = j.wait_deadline_unix_s();
    ASSERT_GT(deadline, 0);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
  EXPECT_EQ(j.generation(), 1);
  EXPECT_EQ(j.world(), 3);
  ASSERT_EQ(j.waiting_for_ranks_size(), 1);
  EXPECT_EQ(j.waiting_for_ranks(0), 2);
  EXPECT_EQ(j.wait_deadline_unix_s(), deadline);
  ASSERT_EQ(j.ranks_size(), 3);
  EXPECT_EQ(j.ranks(2).worker_id(), "");
  // The survivors hold their replicas; a fresh worker takes rank 2.
  for (const char* w : {"w-1", "w-2"}) Hold(c, w, 1, 1, 10);
  EXPECT_EQ(Register(c, 4), "w-4");
  j = *c->GetJob(1);
  EXPECT_EQ(j.waiting_for_ranks_size(), 0);
  ASSERT_EQ(j.ranks_size(), 3);
  EXPECT_EQ(j.ranks(2).worker_id(), "w-4");
  EXPECT_EQ(j.generation(), 2);
}

// Final weights, curves (loss, eval, sync strip) and final metrics of a
// finished job survive a restart: status, export and the status page.
TEST_F(CoordinatorStateTest, FinalWeightsCurvesAndMetricsSurviveRestart) {
  const std::string dir = TempDir();
  JobSeriesSnapshot before;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    Register(c, 1);
    ASSERT_EQ(Submit(c, Spec(1, 3000)), 1u);
    Beat(c, "w-1");
    Beat(c, "w-1", 1);
    for (int64_t s = 0; s < 3000; ++s) {  // past 1024 points: downsampled
      Step(c, 1, 0, "w-1", s);
      clock_.Advance(absl::Milliseconds(5));
      if (s % 500 == 499) {
        v1::ReportEvalRequest e;
        e.set_worker_id("w-1");
        e.set_job_id(1);
        e.set_rank(0);
        e.set_step(s + 1);
        e.set_test_accuracy(0.5 + s * 1e-4);
        e.set_test_loss(1.0 - s * 1e-4);
        ASSERT_TRUE(c->ReportEval(e).ok());
      }
    }
    UploadWeights(c);
    v1::ReportDoneRequest d;
    d.set_worker_id("w-1");
    d.set_job_id(1);
    d.set_ok(true);
    d.set_weights_hash(Hash(2999));
    d.set_steps(3000);
    d.set_test_accuracy(0.75);
    d.set_test_loss(0.125);
    ASSERT_TRUE(c->ReportDone(d).ok());
    before = *c->GetJobSeries(1);
    ASSERT_TRUE(c->GetJob(1)->has_weights());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::SUCCEEDED);
  EXPECT_EQ(j.final_hash(), Hash(2999));
  EXPECT_EQ(j.test_accuracy(), 0.75);
  EXPECT_EQ(j.test_loss(), 0.125);
  EXPECT_TRUE(j.evaluated());
  EXPECT_TRUE(j.has_weights());
  absl::StatusOr<std::shared_ptr<const FinalWeights>> w = c->GetWeights(1);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->total, 6);
  EXPECT_EQ((*w)->data.size(), 24u);
  EXPECT_EQ(reinterpret_cast<const float*>((*w)->data.data())[5], 1.25f);
  EXPECT_EQ((*w)->block_names, std::vector<std::string>{"W0"});
  EXPECT_EQ((*w)->block_shapes, (std::vector<int64_t>{2, 3}));
  JobSeriesSnapshot after = *c->GetJobSeries(1);
  ASSERT_EQ(after.loss.size(), before.loss.size());
  ASSERT_GT(after.loss.size(), 500u);
  EXPECT_LE(after.loss.size(), 1025u);
  for (size_t i = 0; i < after.loss.size(); ++i) {
    EXPECT_EQ(after.loss[i].step, before.loss[i].step);
    EXPECT_EQ(after.loss[i].loss, before.loss[i].loss);
    EXPECT_EQ(after.loss[i].examples, before.loss[i].examples);
  }
  EXPECT_EQ(after.loss.back().step, 2999);
  ASSERT_EQ(after.eval.size(), 6u);
  EXPECT_EQ(after.eval.back().step, 3000);
  EXPECT_EQ(after.sync.size(), before.sync.size());
  EXPECT_EQ(after.loss_stride, before.loss_stride);
  EXPECT_EQ(after.steps_offered, 3000);
  EXPECT_EQ(after.checks_offered, 3000);
}

// Issue 10: a coordinator killed between a job's end and the commit of its
// SUCCEEDED row restores the job RUNNING. Its workers, idle by then, are
// asked for their ReportDone again (the first was not committed); the job
// ends SUCCEEDED with their hash and keeps the final weights stored before
// the kill. A worker that has no record of finishing fails the job naming
// itself; one that never answers is "abandoned" after the asks run out.
TEST_F(CoordinatorStateTest, RestoredRunningJobTakesTheDoneReportsSentAgain) {
  const std::string dir = TempDir();
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, Spec(2, 100), 100);
    UploadWeights(c);
    // The ReportDone calls were answered, but their rows were not
    // committed before the kill: as if they never reached the database.
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (int variant = 0; variant < 3; ++variant) {
    Incarnation second = Start(CopyOf(dir, absl::StrCat(variant)));
    Coordinator* c = second.coord.get();
    ASSERT_EQ(c->GetJob(1)->state(), v1::RUNNING);
    EXPECT_TRUE(c->GetJob(1)->has_weights());  // restored for the RUNNING job
    // The workers say they run nothing: asked for their ReportDone.
    for (const char* w : {"w-1", "w-2"}) {
      v1::HeartbeatReply r = Beat(c, w);
      EXPECT_EQ(r.resend_done_job_id(), 1u) << w;
      EXPECT_FALSE(r.has_assignment());
    }
    if (variant == 0) {
      Done(c, 1, 0, "w-1", Hash(99));
      EXPECT_EQ(c->GetJob(1)->state(), v1::RUNNING);
      EXPECT_EQ(Beat(c, "w-2").resend_done_job_id(), 1u);
      Done(c, 1, 1, "w-2", Hash(99));
      v1::JobStatus j = *c->GetJob(1);
      EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
      EXPECT_EQ(j.final_hash(), Hash(99));
      EXPECT_TRUE(j.has_weights());
      absl::StatusOr<std::shared_ptr<const FinalWeights>> w = c->GetWeights(1);
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_EQ(reinterpret_cast<const float*>((*w)->data.data())[5], 1.25f);
      // The workers are free again.
      Beat(c, "w-1");
      Beat(c, "w-2");
      EXPECT_EQ(c->ListWorkers().workers(0).state(), v1::IDLE);
    } else if (variant == 1) {
      // The hash check across ranks still applies.
      Done(c, 1, 0, "w-1", Hash(99));
      Done(c, 1, 1, "w-2", Hash(98));
      v1::JobStatus j = *c->GetJob(1);
      EXPECT_EQ(j.state(), v1::FAILED);
      EXPECT_NE(j.reason().find("different weights"), std::string::npos) << j.reason();
    } else {
      // w-2 never answers the asks: abandoned once they run out.
      Done(c, 1, 0, "w-1", Hash(99));
      int asks = 1;
      while (Beat(c, "w-2").resend_done_job_id() == 1u) ++asks;
      EXPECT_EQ(asks, 25);
      v1::JobStatus j = *c->GetJob(1);
      EXPECT_EQ(j.state(), v1::FAILED);
      EXPECT_NE(j.reason().find("rank 1 (w-2"), std::string::npos) << j.reason();
      EXPECT_NE(j.reason().find("abandoned"), std::string::npos) << j.reason();
    }
  }
}

// Review findings on the asks above: a worker that reports the job running
// after the restart is not asked again when it later runs nothing without
// a done report (it abandoned the job: FAILED at once); a worker with no
// record of finishing (rank -1: it does not know its rank) fails the job at
// once naming its rank, whichever rank it holds.
TEST_F(CoordinatorStateTest, DoneAsksEndWhenTheJobRunsAndANoRecordReportFailsAtOnce) {
  const std::string dir = TempDir();
  {
    Incarnation first = Start(dir);
    StartAndStep(first.coord.get(), Spec(2, 100), 50);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation running = Start(CopyOf(dir, "running"));
  Coordinator* c = running.coord.get();
  EXPECT_FALSE(Beat(c, "w-1", 1).stop_job());  // w-1 runs job 1
  v1::HeartbeatReply r = Beat(c, "w-1");       // ... then nothing, no done report
  EXPECT_EQ(r.resend_done_job_id(), 0u);
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.reason().find("rank 0 (w-1"), std::string::npos) << j.reason();
  EXPECT_NE(j.reason().find("abandoned"), std::string::npos) << j.reason();

  Incarnation asked = Start(CopyOf(dir, "no_record"));
  c = asked.coord.get();
  ASSERT_EQ(Beat(c, "w-2").resend_done_job_id(), 1u);
  v1::ReportDoneRequest none;  // what a worker without the record sends
  none.set_worker_id("w-2");
  none.set_job_id(1);
  none.set_rank(-1);
  none.set_ok(false);
  none.set_error("worker w-2 has no record of finishing job 1");
  ASSERT_TRUE(c->ReportDone(none).ok());
  j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.reason().find("rank 1 (w-2): worker w-2 has no record"), std::string::npos)
      << j.reason();
}

// Issue 10: a ps job on the coordinator's own shard continues after a
// restart. The shard's sums are gone, so the restarted coordinator regroups
// the job (generation 1, same ranks, a "restart" event, a fresh group key:
// a fresh shard); rank 0 had pulled step 10's sum and applied it, rank 1
// had not: they continue at step 11, rank 1 copying rank 0's state. The
// job then finishes; a done report of generation 0 (a rank that finished
// before the kill) still counts after a restart regroup.
TEST_F(CoordinatorStateTest, PsJobOnTheCoordinatorsShardRegroupsAtRestartAndFinishes) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 100);
  spec.set_sync_mode(v1::PS);
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 10);
    gen0_key = group_key_;
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  {
    // Both ranks had finished before the kill: their generation-0 done
    // reports, asked again, end the regrouped job.
    Incarnation second = Start(CopyOf(dir, "finished"));
    Coordinator* c = second.coord.get();
    ASSERT_EQ(c->GetJob(1)->generation(), 1);
    for (const char* w : {"w-1", "w-2"}) EXPECT_EQ(Beat(c, w).resend_done_job_id(), 1u);
    Done(c, 1, 0, "w-1", Hash(99), /*generation=*/0);
    Done(c, 1, 1, "w-2", Hash(99), /*generation=*/0);
    v1::JobStatus j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
    EXPECT_EQ(j.final_hash(), Hash(99));
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
  EXPECT_EQ(j.generation(), 1);
  EXPECT_EQ(j.world(), 2);
  EXPECT_TRUE(j.regrouping());
  ASSERT_EQ(j.membership_events_size(), 1);
  EXPECT_EQ(j.membership_events(0).kind(), "restart");
  EXPECT_NE(j.membership_events(0).reason().find("parameter-server shard"), std::string::npos)
      << j.membership_events(0).reason();
  // The ranks' generation-0 runners are told to regroup (on the same
  // shard address: the coordinator's own).
  v1::HeartbeatReply r = Beat(c, "w-1", 1);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().generation(), 1);
  EXPECT_FALSE(r.assignment().start_ready());
  EXPECT_TRUE(r.assignment().coordinator_ps_shard());
  ASSERT_EQ(r.assignment().ps_addresses_size(), 1);
  EXPECT_EQ(r.assignment().ps_addresses(0), "coord:7070");
  EXPECT_FALSE(Hold(c, "w-1", 1, 1, 11).has_assignment());
  forgotten_.clear();
  r = Hold(c, "w-2", 1, 1, 10);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_TRUE(r.assignment().start_ready());
  EXPECT_EQ(r.assignment().start_step(), 11);
  EXPECT_EQ(r.assignment().state_source_rank(), 0);
  EXPECT_EQ(r.assignment().group_key(), GenerationKey(gen0_key, 1));
  // Generation 1 started: the shard drops generation 0's group (what its
  // runners pushed after the restart) and its shape round, not the new one.
  const uint64_t kShape = uint64_t{1} << 63;
  EXPECT_EQ(forgotten_, (std::vector<uint64_t>{gen0_key, gen0_key | kShape}));
  j = *c->GetJob(1);
  EXPECT_FALSE(j.regrouping());
  EXPECT_EQ(j.membership_events(0).step(), 11);
  for (int64_t s = 11; s < 100; ++s) {
    Step(c, 1, 0, "w-1", s, 1);
    Step(c, 1, 1, "w-2", s, 1);
  }
  Done(c, 1, 0, "w-1", Hash(99), 1);
  forgotten_.clear();
  Done(c, 1, 1, "w-2", Hash(99), 1);
  j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
  EXPECT_EQ(j.final_hash(), Hash(99));
  EXPECT_EQ(j.mismatched_steps(), 0);
  // The job ended: every generation's groups go.
  const uint64_t gen1_key = GenerationKey(gen0_key, 1);
  EXPECT_EQ(forgotten_, (std::vector<uint64_t>{gen0_key, gen0_key | kShape, gen1_key,
                                               gen1_key | kShape}));
}

// Issue 10: a ps job on the coordinator's shard killed before any rank
// completed a step. Its workers had not even received the assignment (or
// one had, and its runner failed before step 0), so after the restart
// regroup they get generation 1 first and hold no step (-1), like joiners.
// Nobody trained: the group starts at step 0, each rank building the
// initial replica itself, instead of waiting for a start that never comes.
TEST_F(CoordinatorStateTest, PsJobOnTheCoordinatorsShardKilledBeforeAnyStepStartsAtStepZero) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 100);
  spec.set_sync_mode(v1::PS);
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 0, /*acknowledge=*/false);
    ASSERT_EQ(c->GetJob(1)->state(), v1::RUNNING);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (int variant = 0; variant < 2; ++variant) {
    Incarnation second = Start(CopyOf(dir, absl::StrCat(variant)));
    Coordinator* c = second.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    ASSERT_EQ(j.generation(), 1);
    ASSERT_TRUE(j.regrouping());
    // Idle workers of a job they never acknowledged: the regroup's
    // assignment (not start_ready), and no ask for a done report.
    for (const char* w : {"w-1", "w-2"}) {
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment()) << w;
      EXPECT_EQ(r.assignment().generation(), 1);
      EXPECT_FALSE(r.assignment().start_ready());
      EXPECT_EQ(r.resend_done_job_id(), 0u);
    }
    // Variant 1: w-1's generation-0 runner had started and failed before
    // step 0 (it holds step 0); w-2 holds nothing. Variant 0: neither.
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, variant == 1 ? 0 : -1).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, -1);
    ASSERT_TRUE(r.has_assignment()) << "the start was not decided";
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 0);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    j = *c->GetJob(1);
    EXPECT_FALSE(j.regrouping());
    ASSERT_EQ(j.membership_events_size(), 1);
    EXPECT_EQ(j.membership_events(0).step(), 0);
    for (int64_t s = 0; s < 100; ++s) {
      Step(c, 1, 0, "w-1", s, /*generation=*/1);
      Step(c, 1, 1, "w-2", s, /*generation=*/1);
    }
    Done(c, 1, 0, "w-1", Hash(99), 1);
    Done(c, 1, 1, "w-2", Hash(99), 1);
    j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
    EXPECT_EQ(j.checked_steps(), 100);
  }
}

// Issue 10: a ps job on the coordinator's shard whose rank 0 had finished
// (its done committed) while rank 1 was still pulling the last sum, which
// the restart lost: the job regroups, rank 0 holding the final state (step
// 10, offered under generation 0's key, which the assignment names); rank
// 1 copies it and finishes with the same hash. Variant 1: rank 1 had
// finished too (its done was not committed): asked again, it ends the job.
// Variant 2: no done was committed; rank 0's, sent again while rank 1
// holds step 9, decides the same start.
TEST_F(CoordinatorStateTest, PsJobWithAFinishedRankRegroupsTheOthersOntoItsFinalState) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 10);
  spec.set_sync_mode(v1::PS);
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 10);
    gen0_key = group_key_;
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
    ASSERT_EQ(system(absl::StrCat("cp -r ", dir, " ", dir, "_no_done").c_str()), 0);
    clock_.Advance(absl::Seconds(2));  // past kPersistProgressEvery: the row is written
    Done(c, 1, 0, "w-1", Hash(9));
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  auto expect_start_at_the_end = [&](const v1::HeartbeatReply& r) {
    ASSERT_TRUE(r.has_assignment());
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 10);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    EXPECT_EQ(r.assignment().state_source_group_key(), gen0_key);
    EXPECT_EQ(r.assignment().group_key(), GenerationKey(gen0_key, 1));
  };
  for (int variant = 0; variant < 3; ++variant) {
    Incarnation second = Start(CopyOf(variant == 2 ? dir + "_no_done" : dir,
                                      absl::StrCat(variant)));
    Coordinator* c = second.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 1);
    EXPECT_TRUE(j.regrouping());
    if (variant == 0) {
      EXPECT_EQ(Beat(c, "w-1").resend_done_job_id(), 0u);  // its done is stored
      v1::HeartbeatReply r = Beat(c, "w-2", 1);  // its generation-0 runner
      ASSERT_TRUE(r.has_assignment());
      EXPECT_FALSE(r.assignment().start_ready());
      expect_start_at_the_end(Hold(c, "w-2", 1, 1, 9));
      Done(c, 1, 1, "w-2", Hash(9), /*generation=*/1);
    } else if (variant == 1) {
      EXPECT_EQ(Beat(c, "w-2").resend_done_job_id(), 1u);
      Done(c, 1, 1, "w-2", Hash(9), /*generation=*/0);
    } else {
      EXPECT_FALSE(Hold(c, "w-2", 1, 1, 9).has_assignment());
      EXPECT_EQ(Beat(c, "w-1").resend_done_job_id(), 1u);
      Done(c, 1, 0, "w-1", Hash(9), /*generation=*/0);
      EXPECT_FALSE(c->GetJob(1)->regrouping());
      expect_start_at_the_end(Hold(c, "w-2", 1, 1, 9));
      Done(c, 1, 1, "w-2", Hash(9), /*generation=*/1);
    }
    j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << variant << ": " << j.reason();
    EXPECT_EQ(j.final_hash(), Hash(9));
  }
}

// Issue 10: a rank's done report records its generation (the key its
// worker offers the final state under). A ps job on the coordinator's shard
// regrouped once (generation 1), rank 0 finished in generation 1 and the
// coordinator restarted again (generation 2): rank 1 copies rank 0's final
// state under generation 1's key. A database written before the field
// existed (done_generation stripped from the stored job state) gives the
// same key: a done rank counts as done in the job's stored generation.
TEST_F(CoordinatorStateTest, DoneGenerationSurvivesRestartAndAnOldDatabaseFallsBackToTheJobs) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 10);
  spec.set_sync_mode(v1::PS);
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    StartAndStep(first.coord.get(), spec, 5);
    gen0_key = group_key_;
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  {
    Incarnation second = Start(dir);
    Coordinator* c = second.coord.get();
    ASSERT_EQ(c->GetJob(1)->generation(), 1);
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, 5).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, 5);
    ASSERT_TRUE(r.has_assignment());
    ASSERT_TRUE(r.assignment().start_ready());
    ASSERT_EQ(r.assignment().start_step(), 5);
    for (int64_t s = 5; s < 10; ++s) {
      Step(c, 1, 0, "w-1", s, 1);
      Step(c, 1, 1, "w-2", s, 1);
    }
    clock_.Advance(absl::Seconds(2));  // past kPersistProgressEvery: the row is written
    Done(c, 1, 0, "w-1", Hash(9), /*generation=*/1);
    ASSERT_TRUE(second.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  // The old database: the same rows with done_generation absent.
  const std::string old_dir = CopyOf(dir, "old");
  {
    auto db = StateDb::Open({old_dir});
    ASSERT_TRUE(db.ok()) << db.status();
    auto loaded = (*db)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_EQ(loaded->jobs.size(), 1u);
    StoredJob job = std::move(loaded->jobs[0]);
    v1::StoredJobState extra;
    ASSERT_TRUE(extra.ParseFromString(job.extra));
    ASSERT_EQ(extra.ranks_size(), 2);
    ASSERT_TRUE(extra.ranks(0).done());
    ASSERT_TRUE(extra.ranks(0).has_done_generation());
    EXPECT_EQ(extra.ranks(0).done_generation(), 1);
    for (v1::StoredRankState& x : *extra.mutable_ranks()) x.clear_done_generation();
    job.extra = extra.SerializeAsString();
    (*db)->PutJob(std::move(job));
    ASSERT_TRUE((*db)->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (const std::string& d : {dir, old_dir}) {
    SCOPED_TRACE(d);
    Incarnation third = Start(d);
    Coordinator* c = third.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 2);
    EXPECT_TRUE(j.regrouping());
    EXPECT_EQ(Beat(c, "w-1").resend_done_job_id(), 0u);  // its done is stored
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 2, 9);
    ASSERT_TRUE(r.has_assignment());
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 10);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    EXPECT_EQ(r.assignment().state_source_group_key(), GenerationKey(gen0_key, 1));
    EXPECT_EQ(r.assignment().group_key(), GenerationKey(gen0_key, 2));
    Done(c, 1, 1, "w-2", Hash(9), /*generation=*/2);
    j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
    EXPECT_EQ(j.final_hash(), Hash(9));
  }
}

// Issue 10 review: a ps job that ran on --ps_addresses keeps them across a
// restart without that flag (they are stored with the job) and continues
// on them: no regroup (those shards kept their state).
TEST_F(CoordinatorStateTest, PsJobKeepsItsPsAddressesWhenTheCoordinatorComesBackWithoutThem) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 100);
  spec.set_sync_mode(v1::PS);
  spec.set_ps_shards(2);
  {
    Incarnation first = Start(dir, {"ps1:9000", "ps2:9000"});
    StartAndStep(first.coord.get(), spec, 10);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (int restart = 0; restart < 2; ++restart) {  // twice: stored again as it was
    Incarnation next = Start(dir);  // no --ps_addresses: its own shard only
    Coordinator* c = next.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 0);
    EXPECT_EQ(j.membership_events_size(), 0);
    v1::HeartbeatRequest lost;  // a worker that lost its assignment
    lost.set_worker_id("w-2");
    lost.set_job_id(1);
    lost.set_generation(-1);
    v1::HeartbeatReply r = *c->Heartbeat(lost);
    ASSERT_TRUE(r.has_assignment());
    ASSERT_EQ(r.assignment().ps_addresses_size(), 2);
    EXPECT_EQ(r.assignment().ps_addresses(0), "ps1:9000");
    EXPECT_EQ(r.assignment().ps_addresses(1), "ps2:9000");
    EXPECT_FALSE(r.assignment().coordinator_ps_shard());
    Step(c, 1, 0, "w-1", 10 + restart);
    Step(c, 1, 1, "w-2", 10 + restart);
    ASSERT_TRUE(next.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
}

// The reported failure: `lockstep submit --workers=4 --model=softmax
// --batch=8 --steps=26000 --follow` got RESOURCE_EXHAUSTED (4637503 vs.
// 4194304) fetching the sync history. Fake clock, in process: 26000 steps
// of 4 ranks.
TEST_F(CoordinatorStateTest, HistoryOf26000StepsAtK4FitsOneReply) {
  Incarnation inc = Start("");
  Coordinator* c = inc.coord.get();
  std::vector<std::string> w;
  for (int i = 1; i <= 4; ++i) w.push_back(Register(c, i));
  const uint64_t job = Submit(c, Spec(4, 26000));
  for (int64_t s = 0; s < 26000; ++s) {
    for (int r = 0; r < 4; ++r) Step(c, job, r, w[r], s);
  }
  absl::StatusOr<v1::SyncHistory> all = c->GetSyncHistory(job, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->checked_steps(), 26000);
  EXPECT_LE(all->checks_size(), Coordinator::kMaxSyncReplyChecks);
  EXPECT_LT(all->ByteSizeLong(), size_t{4} << 20);
  EXPECT_EQ(all->checks(all->checks_size() - 1).step(), 25999);
  std::printf("26000 steps, K=4: max_entries=0 reply has %d checks, %zu bytes\n",
              all->checks_size(), all->ByteSizeLong());

  // Over gRPC, with a stub of default limits (what the client uses): the
  // unbounded request (0 = all) and a follow's one-entry fetch.
  CoordinatorService service(c);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  for (int64_t max : {int64_t{0}, int64_t{1}, int64_t{100000}}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::SyncHistoryRequest req;
    req.set_job_id(job);
    req.set_max_entries(max);
    v1::SyncHistory reply;
    grpc::Status s = stub->GetSyncHistory(&ctx, req, &reply);
    EXPECT_TRUE(s.ok()) << "max_entries " << max << ": " << s.error_message();
    EXPECT_EQ(reply.checked_steps(), 26000);
  }
  // Paging over gRPC from step 0 reaches the newest check kept in memory.
  int64_t pages = 0, last = -1;
  for (int64_t from = 0; from >= 0 && pages < 100; ++pages) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::SyncHistoryRequest req;
    req.set_job_id(job);
    req.set_from_step(from);
    v1::SyncHistory reply;
    grpc::Status s = stub->GetSyncHistory(&ctx, req, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    if (reply.checks_size() > 0) last = reply.checks(reply.checks_size() - 1).step();
    from = reply.next_step();
  }
  EXPECT_EQ(last, 25999);
  service.BeginShutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
}

}  // namespace
}  // namespace lockstep
