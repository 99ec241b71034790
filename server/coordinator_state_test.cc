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
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
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

  Incarnation Start(const std::string& dir) {
    Incarnation inc;
    if (!dir.empty()) {
      auto db = StateDb::Open({dir});
      EXPECT_TRUE(db.ok()) << db.status();
      inc.db = *std::move(db);
    }
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
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
  static void Step(Coordinator* c, uint64_t job, int rank, const std::string& w, int64_t step) {
    v1::ReportStepRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(Hash(step));
    req.set_loss(1.0);
    req.set_examples(8);
    auto r = c->ReportStep(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->stop()) << r->reason();
  }
  static void Done(Coordinator* c, uint64_t job, int rank, const std::string& w,
                   const std::string& hash) {
    v1::ReportDoneRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_ok(true);
    req.set_weights_hash(hash);
    req.set_steps(100);
    ASSERT_TRUE(c->ReportDone(req).ok());
  }

  FakeClock clock_;
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
