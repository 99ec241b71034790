// Issue 11: "the coordinator's control RPCs accept ps-sized messages
// because its ps shard shares its gRPC server". The server is built as
// lockstep-coordinator builds it (CoordinatorService and PsService on one
// port, the server's receive limit the ps one): a 100 MiB SubmitJob and a
// 17 MiB UploadWeights chunk are refused RESOURCE_EXHAUSTED naming the
// control limit and nothing changes, while a 20 MiB ps Push and its Pull
// on the same port still work.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/collective/ps_aggregator.h"
#include "common/grpcutil/message_limits.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
#include "server/ps/ps_service.h"
#include "tests/tsan/test_scale.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

class CoordinatorServiceLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.advertise_address = "coord:1";
    options.max_job_memory_bytes = 4000000000;
    coordinator_ = std::make_unique<Coordinator>(options, &clock_);
    service_ = std::make_unique<CoordinatorService>(coordinator_.get());
    ps_service_ = std::make_unique<PsService>(&registry_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    SetServerMessageLimits(&builder, PsMaxMessageBytes(registry_.max_shard_floats()));
    builder.RegisterService(service_.get());
    builder.RegisterService(ps_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    // The client may send anything up to 256 MiB: only the server decides.
    auto channel = CreateLimitedChannel(absl::StrCat("127.0.0.1:", port), 256 << 20);
    stub_ = v1::Coordinator::NewStub(channel);
    ps_stub_ = v1::ParameterServer::NewStub(channel);
  }

  void TearDown() override {
    service_->BeginShutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }

  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_model("mlp:8");
    spec.set_sync_mode(v1::RING);
    spec.mutable_data()->set_dataset("csv:train.csv;test.csv");
    spec.set_num_workers(1);
    spec.set_global_batch(8);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(10);
    return spec;
  }

  FakeClock clock_;
  PsShardRegistry registry_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<PsService> ps_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<v1::ParameterServer::Stub> ps_stub_;
};

TEST_F(CoordinatorServiceLimitsTest, AHundredMiBSubmitIsRefusedNamingTheLimit) {
  ASSERT_GT(PsMaxMessageBytes(registry_.max_shard_floats()), 200 << 20);  // the server's
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  // 20 MiB under TSan (copying 100 MiB through gRPC there outlasts the
  // deadline); both are over the 16 MiB control limit, under the ps one.
  req.mutable_spec()->set_name(std::string((SmallTestScale() ? 20 : 100) << 20, 'x'));
  v1::SubmitJobReply reply;
  grpc::Status s = stub_->SubmitJob(Ctx().get(), req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find(absl::StrCat(
                "lockstep.v1.Coordinator/SubmitJob: request is ", req.ByteSizeLong(),
                " bytes, over the coordinator's control-message limit of 16777216 bytes")),
            std::string::npos)
      << s.error_message();
  v1::JobList jobs;
  ASSERT_TRUE(stub_->ListJobs(Ctx().get(), v1::ListRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);  // nothing was created
  // A normal submit is served as before.
  req.mutable_spec()->set_name("small");
  s = stub_->SubmitJob(Ctx().get(), req, &reply);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.job_id(), 1u);
}

TEST_F(CoordinatorServiceLimitsTest, AnOversizedWeightsChunkIsRefused) {
  v1::UploadWeightsReply reply;
  auto ctx = Ctx();
  auto writer = stub_->UploadWeights(ctx.get(), &reply);
  v1::WeightsChunk chunk;
  chunk.set_worker_id("w-1");
  chunk.set_job_id(1);
  chunk.set_data(std::string(17 << 20, '\0'));
  writer->Write(chunk);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("UploadWeights: request is"), std::string::npos)
      << s.error_message();
}

TEST_F(CoordinatorServiceLimitsTest, PsMessagesOverTheControlLimitStillWork) {
  const int64_t len = 5 << 20;  // 20 MiB of floats, over the 16 MiB control limit
  std::vector<float> g(len, 0.5f);
  g[len - 1] = 3.0f;
  v1::PushRequest push;
  push.set_job(9);
  push.set_step(0);
  push.set_worker_rank(0);
  push.set_shard(0);
  push.set_num_workers(1);
  push.set_shard_len(len);
  push.set_count(1);
  push.set_grad_sum(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  v1::PushReply push_reply;
  grpc::Status s = ps_stub_->Push(Ctx().get(), push, &push_reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::PullRequest pull;
  pull.set_job(9);
  pull.set_step(0);
  pull.set_worker_rank(0);
  pull.set_shard(0);
  pull.set_num_workers(1);
  pull.set_shard_len(len);
  pull.set_wait_micros(10000000);
  v1::PullReply pull_reply;
  s = ps_stub_->Pull(Ctx().get(), pull, &pull_reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(pull_reply.grad_sum().size(), static_cast<size_t>(len) * 4);
  EXPECT_EQ(pull_reply.count(), 1);
  float last = 0;
  std::memcpy(&last, pull_reply.grad_sum().data() + (len - 1) * 4, 4);
  EXPECT_EQ(last, 3.0f);
}

// Issue 11: "lockstep submit --workers=1 --model=mlp:1000000000 was
// accepted" and killed its worker. Refused at submit now, by the
// coordinator's limit and by the limits workers advertise.
TEST_F(CoordinatorServiceLimitsTest, SubmitChecksTheMemoryNeed) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  req.mutable_spec()->set_model("mlp:1000000000");
  v1::SubmitJobReply reply;
  grpc::Status s = stub_->SubmitJob(Ctx().get(), req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("SubmitJob: job needs at least "), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("but the limit is 4000000000 bytes (4.0 GB, the "
                                   "coordinator's --max_job_memory_bytes)"),
            std::string::npos)
      << s.error_message();
  // A worker that can hold 1 MB: mlp:1000 (112160 bytes, submit_memory_test)
  // fits, mlp:10000 (10x the widths, over 1 MB) does not.
  v1::RegisterWorkerRequest reg;
  reg.set_address("127.0.0.1:6001");
  reg.set_max_job_memory_bytes(1000000);
  v1::RegisterWorkerReply reg_reply;
  ASSERT_TRUE(stub_->RegisterWorker(Ctx().get(), reg, &reg_reply).ok());
  req.mutable_spec()->set_model("mlp:1000");
  s = stub_->SubmitJob(Ctx().get(), req, &reply);
  EXPECT_TRUE(s.ok()) << s.error_message();
  req.mutable_spec()->set_model("mlp:10000");
  s = stub_->SubmitJob(Ctx().get(), req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("but only 0 of the 1 live workers can hold it and 1 are "
                                   "needed; the largest worker limit is 1000000 bytes"),
            std::string::npos)
      << s.error_message();
}

}  // namespace
}  // namespace lockstep
