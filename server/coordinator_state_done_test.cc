// The coordinator's state database, a job's end across a restart: final
// weights, curves and metrics survive; done reports sent again are taken;
// a submit and a cancel are committed before they are answered;
// the 26000-step, K = 4 history of the reported RESOURCE_EXHAUSTED (4.6 MB)
// answers every request under gRPC's 4 MiB default, in process and over
// gRPC with a default-sized stub (coordinator_state_test_fixture.h).
#include <optional>
#include <string>
#include <vector>

#include "server/coordinator_state_test_fixture.h"

namespace lockstep {
namespace testing_coordinator_state {
namespace {

// A submit and a cancel answer only once the database committed them, so a
// coordinator killed right after its reply still has the job: with a writer
// that would otherwise wait an hour, the committed rows (the database's
// reader) hold the job at once, then its cancel.
TEST_F(CoordinatorStateTest, SubmitAndCancelAnswerOnlyOnceCommitted) {
  const std::string dir = TempDir();
  Incarnation inc = Start(dir, {}, absl::Hours(1));
  Coordinator* c = inc.coord.get();
  const uint64_t job = Submit(c, Spec(2, 100));
  ASSERT_EQ(job, 1u);
  absl::StatusOr<std::optional<v1::JobStatus>> stored = inc.db->ReadJobStatus(job);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_TRUE(stored->has_value()) << "the submitted job is not committed";
  EXPECT_EQ((*stored)->state(), v1::PENDING);
  ASSERT_TRUE(c->CancelJob(job).ok());
  stored = inc.db->ReadJobStatus(job);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->state(), v1::CANCELLED);
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
      EXPECT_EQ(r.resend_reports_from_step(), 100) << w << ": every step's check was stored";
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
}  // namespace testing_coordinator_state
}  // namespace lockstep
