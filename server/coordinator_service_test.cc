#include "server/coordinator_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/worker_token.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::string Hash(int i) { return absl::StrFormat("%032x", i); }

v1::JobSpec Spec(int k) {
  v1::JobSpec spec;
  spec.set_model("mlp:8");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(k);
  spec.set_global_batch(8 * k);
  spec.mutable_lr()->set_base_lr(0.1f);
  spec.set_steps(10);
  return spec;
}

// Every call gets a deadline so a broken server fails the test instead of
// hanging it.
std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.advertise_address = "coord:1";
    coordinator_ = std::make_unique<Coordinator>(options, &clock_);
    service_ = std::make_unique<CoordinatorService>(coordinator_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      service_->BeginShutdown();
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  }

  std::string Register(int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("127.0.0.1:", 6000 + i));
    v1::RegisterWorkerReply reply;
    grpc::Status s = stub_->RegisterWorker(Ctx().get(), req, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(reply.worker_token().size(), 64u) << "64 hex digits";
    tokens_[reply.worker_id()] = reply.worker_token();
    return reply.worker_id();
  }

  // Ctx() with `worker`'s token, as the worker daemon sends it.
  std::unique_ptr<grpc::ClientContext> WCtx(const std::string& worker) {
    std::unique_ptr<grpc::ClientContext> ctx = Ctx();
    AttachWorkerToken(ctx.get(), tokens_[worker]);
    return ctx;
  }

  v1::HeartbeatReply Beat(const std::string& worker, uint64_t job) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    v1::HeartbeatReply reply;
    grpc::Status s = stub_->Heartbeat(WCtx(worker).get(), req, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return reply;
  }

  grpc::Status Submit(const v1::JobSpec& spec, v1::SubmitJobReply* reply, bool no_wait = false) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_no_wait(no_wait);
    return stub_->SubmitJob(Ctx().get(), req, reply);
  }

  v1::JobStatus Get(uint64_t job) {
    v1::JobRef ref;
    ref.set_job_id(job);
    v1::JobStatus st;
    grpc::Status s = stub_->GetJob(Ctx().get(), ref, &st);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return st;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::map<std::string, std::string> tokens_;  // RegisterWorkerReply.worker_token by id
};

TEST_F(CoordinatorServiceTest, SubmitStatusCancel) {
  const std::string w1 = Register(1), w2 = Register(2);
  EXPECT_EQ(w1, "w-1");
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(2), &submitted).ok());
  EXPECT_EQ(submitted.job_id(), 1u);
  EXPECT_EQ(submitted.state(), v1::RUNNING);

  v1::HeartbeatReply beat = Beat(w2, 0);
  ASSERT_TRUE(beat.has_assignment());
  EXPECT_EQ(beat.assignment().rank(), 1);
  ASSERT_EQ(beat.assignment().peer_addresses_size(), 2);
  EXPECT_EQ(beat.assignment().peer_addresses(0), "127.0.0.1:6001");

  v1::JobStatus st = Get(1);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.ranks_size(), 2);

  v1::JobRef ref;
  ref.set_job_id(1);
  v1::JobStatus cancelled;
  ASSERT_TRUE(stub_->CancelJob(Ctx().get(), ref, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(cancelled.reason(), "cancelled by user");
  EXPECT_EQ(Get(1).state(), v1::CANCELLED);

  v1::ReportStepRequest step;
  step.set_worker_id(w1);
  step.set_job_id(1);
  step.set_rank(0);
  step.set_weights_hash(Hash(1));
  v1::ReportStepReply step_reply;
  ASSERT_TRUE(stub_->ReportStep(WCtx(step.worker_id()).get(), step, &step_reply).ok());
  EXPECT_TRUE(step_reply.stop());
  EXPECT_TRUE(Beat(w2, 1).stop_job());

  v1::JobList jobs;
  ASSERT_TRUE(stub_->ListJobs(Ctx().get(), v1::ListRequest(), &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  v1::WorkerList workers;
  ASSERT_TRUE(stub_->ListWorkers(Ctx().get(), v1::ListRequest(), &workers).ok());
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(1).state(), v1::BUSY);
}

TEST_F(CoordinatorServiceTest, ErrorCodesCrossTheWire) {
  v1::JobRef ref;
  ref.set_job_id(42);
  v1::JobStatus st;
  grpc::Status s = stub_->GetJob(Ctx().get(), ref, &st);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "job 42 not found");
  s = stub_->CancelJob(Ctx().get(), ref, &st);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  v1::JobSpec bad = Spec(2);
  bad.set_model("resnet");
  v1::SubmitJobReply reply;
  s = Submit(bad, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("spec.model: unknown model \"resnet\"", 0), 0u)
      << s.error_message();

  Register(1);
  Register(2);
  s = Submit(Spec(4), &reply, /*no_wait=*/true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "job needs 4 idle workers, 2 are idle (w-1, w-2)");
  // Round trip back into absl keeps code and message.
  EXPECT_EQ(FromGrpcStatus(s),
            absl::ResourceExhaustedError("job needs 4 idle workers, 2 are idle (w-1, w-2)"));

  v1::SyncHistoryRequest hreq;
  hreq.set_job_id(42);
  v1::SyncHistory history;
  EXPECT_EQ(stub_->GetSyncHistory(Ctx().get(), hreq, &history).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // The server keeps serving.
  ASSERT_TRUE(Submit(Spec(2), &reply).ok());
  EXPECT_EQ(reply.job_id(), 1u);
}

TEST_F(CoordinatorServiceTest, WatchJobStreamsEveryChangeUntilTerminal) {
  const std::string w1 = Register(1);
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(2), &submitted).ok());
  ASSERT_EQ(submitted.state(), v1::PENDING);

  v1::JobRef ref;
  ref.set_job_id(submitted.job_id());
  std::unique_ptr<grpc::ClientContext> ctx = Ctx();
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub_->WatchJob(ctx.get(), ref);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.status().state(), v1::PENDING);

  const std::string w2 = Register(2);  // the job starts
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.status().state(), v1::RUNNING);
  EXPECT_EQ(event.status().ranks_size(), 2);

  // One step on both ranks: the last event we see shows it checked.
  for (int r = 0; r < 2; ++r) {
    v1::ReportStepRequest step;
    step.set_worker_id(r == 0 ? w1 : w2);
    step.set_job_id(submitted.job_id());
    step.set_rank(r);
    step.set_step(0);
    step.set_weights_hash(Hash(5));
    v1::ReportStepReply reply;
    ASSERT_TRUE(stub_->ReportStep(WCtx(step.worker_id()).get(), step, &reply).ok());
  }
  // Progress reaches watchers at most once per watch interval (200 ms of
  // the coordinator's Clock) after the last event.
  clock_.Advance(absl::Milliseconds(200));
  do {
    ASSERT_TRUE(reader->Read(&event));
  } while (event.status().checked_steps() < 1);
  EXPECT_EQ(event.status().step(), 1);
  EXPECT_EQ(event.status().state(), v1::RUNNING);

  v1::JobStatus cancelled;
  ASSERT_TRUE(stub_->CancelJob(Ctx().get(), ref, &cancelled).ok());
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.status().state(), v1::CANCELLED);
  EXPECT_FALSE(reader->Read(&event));  // terminal: the stream ends
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(CoordinatorServiceTest, WatchJobEndsWhenClientCancelsOrJobUnknown) {
  Register(1);
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(2), &submitted).ok());
  v1::JobRef ref;
  ref.set_job_id(submitted.job_id());
  std::unique_ptr<grpc::ClientContext> ctx = Ctx();
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub_->WatchJob(ctx.get(), ref);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ctx->TryCancel();
  while (reader->Read(&event)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);

  ref.set_job_id(77);
  std::unique_ptr<grpc::ClientContext> ctx2 = Ctx();
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> missing = stub_->WatchJob(ctx2.get(), ref);
  EXPECT_FALSE(missing->Read(&event));
  grpc::Status s = missing->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "job 77 not found");
}

TEST_F(CoordinatorServiceTest, WeightsUploadAndDownloadInChunks) {
  const std::string w1 = Register(1);
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(1), &submitted).ok());
  const uint64_t job = submitted.job_id();
  Beat(w1, job);

  // 300000 floats = 1.2 MB: more than one 1 MiB download chunk.
  constexpr int64_t kTotal = 300000;
  std::vector<float> values(kTotal);
  for (int64_t i = 0; i < kTotal; ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const std::string bytes(reinterpret_cast<const char*>(values.data()), kTotal * 4);

  {
    v1::UploadWeightsReply reply;
    std::unique_ptr<grpc::ClientContext> ctx = WCtx(w1);
    std::unique_ptr<grpc::ClientWriter<v1::WeightsChunk>> writer =
        stub_->UploadWeights(ctx.get(), &reply);
    constexpr int64_t kUpChunk = 100000;
    for (int64_t off = 0; off < kTotal; off += kUpChunk) {
      v1::WeightsChunk chunk;
      chunk.set_worker_id(w1);
      chunk.set_job_id(job);
      chunk.set_offset(off);
      chunk.set_total(kTotal);
      chunk.set_data(bytes.substr(off * 4, kUpChunk * 4));
      if (off == 0) {
        chunk.add_block_names("W0");
        chunk.add_block_shapes(kTotal);
        chunk.add_block_shapes(-1);
      }
      ASSERT_TRUE(writer->Write(chunk));
    }
    ASSERT_TRUE(writer->WritesDone());
    grpc::Status s = writer->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_TRUE(Get(job).has_weights());

  v1::WeightsRequest wreq;
  wreq.set_job_id(job);
  std::unique_ptr<grpc::ClientContext> ctx = Ctx();
  std::unique_ptr<grpc::ClientReader<v1::WeightsChunk>> reader = stub_->GetWeights(ctx.get(), wreq);
  v1::WeightsChunk chunk;
  std::string got;
  int chunks = 0;
  while (reader->Read(&chunk)) {
    EXPECT_LE(chunk.data().size(), static_cast<size_t>(kMaxWeightsChunkBytes));
    EXPECT_EQ(chunk.offset() * 4, static_cast<int64_t>(got.size()));
    EXPECT_EQ(chunk.total(), kTotal);
    if (chunks == 0) {
      ASSERT_EQ(chunk.block_names_size(), 1);
      EXPECT_EQ(chunk.block_names(0), "W0");
    }
    got += chunk.data();
    ++chunks;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(chunks, 2);
  EXPECT_EQ(got, bytes);

  // No weights for an unknown job; an empty upload stream is rejected.
  wreq.set_job_id(9);
  std::unique_ptr<grpc::ClientContext> ctx2 = Ctx();
  std::unique_ptr<grpc::ClientReader<v1::WeightsChunk>> none = stub_->GetWeights(ctx2.get(), wreq);
  EXPECT_FALSE(none->Read(&chunk));
  EXPECT_EQ(none->Finish().error_code(), grpc::StatusCode::NOT_FOUND);

  v1::UploadWeightsReply reply;
  std::unique_ptr<grpc::ClientContext> ctx3 = Ctx();
  std::unique_ptr<grpc::ClientWriter<v1::WeightsChunk>> empty =
      stub_->UploadWeights(ctx3.get(), &reply);
  ASSERT_TRUE(empty->WritesDone());
  EXPECT_EQ(empty->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Issue 11: a caller that merely knows a worker id (any `lockstep
// workers` lists them) cannot report, fail or deregister for that worker:
// every worker call must carry the token RegisterWorker gave that id. A
// rank -1 "no record of finishing" done report, without the token or with
// another worker's, is PERMISSION_DENIED and the job keeps running; a
// heartbeat without it is told to register and changes nothing.
TEST_F(CoordinatorServiceTest, WorkerCallsNeedTheTokenTheirRegistrationGot) {
  const std::string w1 = Register(1), w2 = Register(2);
  EXPECT_NE(tokens_[w1], tokens_[w2]);
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(2), &submitted).ok());
  const uint64_t job = submitted.job_id();
  ASSERT_TRUE(Beat(w1, 0).has_assignment());
  ASSERT_TRUE(Beat(w2, 0).has_assignment());

  v1::ReportDoneRequest done;
  done.set_worker_id(w1);
  done.set_job_id(job);
  done.set_rank(-1);
  done.set_ok(false);
  done.set_error("worker w-1 has no record of finishing job 1");
  for (const std::string& token :
       {std::string(), tokens_[w2], std::string(64, '0'), tokens_[w1].substr(1)}) {
    std::unique_ptr<grpc::ClientContext> ctx = Ctx();
    AttachWorkerToken(ctx.get(), token);
    v1::ReportDoneReply reply;
    grpc::Status s = stub_->ReportDone(ctx.get(), done, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << token;
    EXPECT_NE(s.error_message().find(token.empty() ? "worker w-1: the call carries no worker token"
                                                   : "worker w-1: the call's worker token is not "
                                                     "the one this coordinator gave w-1"),
              std::string::npos)
        << s.error_message();
  }
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  // Step reports, evaluations, uploads and deregistration alike.
  v1::ReportStepRequest step;
  step.set_worker_id(w1);
  step.set_job_id(job);
  step.set_weights_hash(Hash(9));
  v1::ReportStepReply step_reply;
  EXPECT_EQ(stub_->ReportStep(WCtx(w2).get(), step, &step_reply).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::StepReports batch;
  *batch.add_reports() = step;
  EXPECT_EQ(stub_->ReportSteps(Ctx().get(), batch, &step_reply).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ReportEvalRequest eval;
  eval.set_worker_id(w1);
  eval.set_job_id(job);
  v1::ReportEvalReply eval_reply;
  EXPECT_EQ(stub_->ReportEval(Ctx().get(), eval, &eval_reply).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  {
    v1::UploadWeightsReply reply;
    std::unique_ptr<grpc::ClientContext> ctx = WCtx(w2);
    auto writer = stub_->UploadWeights(ctx.get(), &reply);
    v1::WeightsChunk chunk;
    chunk.set_worker_id(w1);
    chunk.set_job_id(job);
    chunk.set_total(1);
    chunk.set_data(std::string(4, '\0'));
    writer->Write(chunk);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  v1::DeregisterWorkerRequest leave;
  leave.set_worker_id(w1);
  v1::DeregisterWorkerReply leave_reply;
  EXPECT_EQ(stub_->DeregisterWorker(Ctx().get(), leave, &leave_reply).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A heartbeat with another worker's token: "register again", and the
  // worker's own state is untouched (no stop, no reassignment).
  v1::HeartbeatRequest beat;
  beat.set_worker_id(w1);
  beat.set_job_id(job);
  v1::HeartbeatReply beat_reply;
  ASSERT_TRUE(stub_->Heartbeat(WCtx(w2).get(), beat, &beat_reply).ok());
  EXPECT_TRUE(beat_reply.reregister());
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.ranks_size(), 2);
  EXPECT_EQ(st.ranks(0).worker_id(), w1);
  EXPECT_EQ(st.ranks(0).step(), 0);  // the rejected report counted nothing
  // RegisterWorker at w1's address (same host and pid) replaces a live w1
  // only with w1's token: refused without it or with another's.
  v1::RegisterWorkerRequest again;
  again.set_address("127.0.0.1:6001");
  v1::RegisterWorkerReply again_reply;
  grpc::Status rs = stub_->RegisterWorker(Ctx().get(), again, &again_reply);
  EXPECT_EQ(rs.error_code(), grpc::StatusCode::ALREADY_EXISTS) << rs.error_message();
  EXPECT_NE(rs.error_message().find("does not carry its worker token"), std::string::npos)
      << rs.error_message();
  EXPECT_EQ(stub_->RegisterWorker(WCtx(w2).get(), again, &again_reply).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  // With its own token every call works: the same done report fails the
  // job naming the worker, as before.
  v1::ReportDoneReply reply;
  ASSERT_TRUE(stub_->ReportDone(WCtx(w1).get(), done, &reply).ok());
  st = Get(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find("no record of finishing"), std::string::npos) << st.reason();
}

TEST_F(CoordinatorServiceTest, WorkerReportsOverTheWire) {
  const std::string w1 = Register(1);
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(1), &submitted).ok());
  const uint64_t job = submitted.job_id();
  ASSERT_TRUE(Beat(w1, 0).has_assignment());
  Beat(w1, job);

  v1::ReportStepRequest step;
  step.set_worker_id(w1);
  step.set_job_id(job);
  step.set_rank(0);
  step.set_step(0);
  step.set_weights_hash(Hash(3));
  v1::ReportStepReply step_reply;
  ASSERT_TRUE(stub_->ReportStep(WCtx(step.worker_id()).get(), step, &step_reply).ok());
  EXPECT_FALSE(step_reply.stop());
  step.set_rank(3);
  grpc::Status s = stub_->ReportStep(WCtx(step.worker_id()).get(), step, &step_reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::ReportEvalRequest eval;
  eval.set_worker_id(w1);
  eval.set_job_id(job);
  eval.set_test_accuracy(0.9);
  v1::ReportEvalReply eval_reply;
  ASSERT_TRUE(stub_->ReportEval(WCtx(eval.worker_id()).get(), eval, &eval_reply).ok());

  v1::ReportDoneRequest done;
  done.set_worker_id(w1);
  done.set_job_id(job);
  done.set_ok(true);
  done.set_weights_hash(Hash(3));
  done.set_test_accuracy(0.91);
  v1::ReportDoneReply done_reply;
  ASSERT_TRUE(stub_->ReportDone(WCtx(done.worker_id()).get(), done, &done_reply).ok());
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::SUCCEEDED);
  EXPECT_EQ(st.final_hash(), Hash(3));
  EXPECT_DOUBLE_EQ(st.test_accuracy(), 0.91);

  v1::SyncHistoryRequest hreq;
  hreq.set_job_id(job);
  v1::SyncHistory history;
  ASSERT_TRUE(stub_->GetSyncHistory(Ctx().get(), hreq, &history).ok());
  EXPECT_EQ(history.checked_steps(), 1);
  ASSERT_EQ(history.checks_size(), 1);
  EXPECT_TRUE(history.checks(0).all_match());
}

TEST_F(CoordinatorServiceTest, ReportStreamAnswersEachMessageAsReportStepsWould) {
  const std::string w1 = Register(1), w2 = Register(2);
  v1::SubmitJobReply submitted;
  ASSERT_TRUE(Submit(Spec(1), &submitted).ok());
  const uint64_t job = submitted.job_id();
  ASSERT_TRUE(Beat(w1, 0).has_assignment());
  Beat(w1, job);
  auto step = [&](int64_t i, int rank = 0, const std::string& worker = "") {
    v1::ReportStepRequest r;
    r.set_worker_id(worker.empty() ? w1 : worker);
    r.set_job_id(job);
    r.set_rank(rank);
    r.set_step(i);
    r.set_weights_hash(Hash(3));
    return r;
  };
  {
    std::unique_ptr<grpc::ClientContext> ctx = WCtx(w1);
    auto stream = stub_->ReportStream(ctx.get());
    for (int64_t first = 0; first < 6; first += 2) {
      v1::StepReports batch;
      *batch.add_reports() = step(first);
      *batch.add_reports() = step(first + 1);
      ASSERT_TRUE(stream->Write(batch));
      v1::ReportStepReply reply;
      ASSERT_TRUE(stream->Read(&reply)) << "one reply per message";
      EXPECT_FALSE(reply.stop());
    }
    v1::SyncHistoryRequest hreq;
    hreq.set_job_id(job);
    v1::SyncHistory history;
    ASSERT_TRUE(stub_->GetSyncHistory(Ctx().get(), hreq, &history).ok());
    EXPECT_EQ(history.checked_steps(), 6);
    // A bad report ends the stream with ReportSteps' error.
    v1::StepReports bad;
    *bad.add_reports() = step(6, /*rank=*/3);
    ASSERT_TRUE(stream->Write(bad));
    v1::ReportStepReply reply;
    EXPECT_FALSE(stream->Read(&reply));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // Every message's reports are checked against the call's token.
    std::unique_ptr<grpc::ClientContext> ctx = WCtx(w1);
    auto stream = stub_->ReportStream(ctx.get());
    v1::StepReports other;
    *other.add_reports() = step(6, 0, w2);
    ASSERT_TRUE(stream->Write(other));
    v1::ReportStepReply reply;
    EXPECT_FALSE(stream->Read(&reply));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    // Shutdown cancels an open stream (the server's Shutdown need not wait
    // for it) and refuses a new one.
    std::unique_ptr<grpc::ClientContext> ctx = WCtx(w1);
    auto stream = stub_->ReportStream(ctx.get());
    v1::StepReports batch;
    *batch.add_reports() = step(6);
    ASSERT_TRUE(stream->Write(batch));
    v1::ReportStepReply reply;
    ASSERT_TRUE(stream->Read(&reply));
    service_->BeginShutdown();
    EXPECT_FALSE(stream->Read(&reply));
    const grpc::StatusCode code = stream->Finish().error_code();
    EXPECT_TRUE(code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::UNAVAILABLE)
        << code;
    std::unique_ptr<grpc::ClientContext> ctx2 = WCtx(w1);
    auto late = stub_->ReportStream(ctx2.get());
    late->WritesDone();
    EXPECT_EQ(late->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
}

}  // namespace
}  // namespace lockstep
