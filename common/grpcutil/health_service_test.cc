#include "common/grpcutil/health_service.h"

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpcutil/health_check.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// A HealthService on a real server at 127.0.0.1:<OS-chosen port>.
class HealthServer {
 public:
  explicit HealthServer(HealthServiceOptions options = {})
      : health_({"lockstep.v1.Test"}, options) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&health_);
    server_ = b.BuildAndStart();
  }
  ~HealthServer() {
    health_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  HealthService& health() { return health_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::unique_ptr<Health::Stub> Stub() const {
    return Health::NewStub(grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }

 private:
  HealthService health_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

void Deadline(grpc::ClientContext* ctx, int seconds = 10) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

grpc::Status Check(Health::Stub* stub, const std::string& service, HealthStatus* out) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  *out = resp.status();
  return s;
}

TEST(HealthServiceTest, CheckReportsDeclaredServicesAndNotFoundForOthers) {
  HealthServer server;
  auto stub = server.Stub();
  HealthStatus st;
  ASSERT_TRUE(Check(stub.get(), "", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::NOT_SERVING);  // starting
  ASSERT_TRUE(Check(stub.get(), "lockstep.v1.Test", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::NOT_SERVING);

  server.health().SetAllServing(true);
  ASSERT_TRUE(Check(stub.get(), "", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::SERVING);
  ASSERT_TRUE(Check(stub.get(), "lockstep.v1.Test", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::SERVING);

  server.health().SetServing("lockstep.v1.Test", false);
  ASSERT_TRUE(Check(stub.get(), "lockstep.v1.Test", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Check(stub.get(), "", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::SERVING);

  grpc::Status s = Check(stub.get(), "no.such.Service", &st);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "service \"no.such.Service\" is not served here");
  EXPECT_EQ(server.health().Status("no.such.Service"), HealthCheckResponse::SERVICE_UNKNOWN);

  s = Check(stub.get(), std::string(kMaxHealthServiceNameBytes + 1, 'x'), &st);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "service: expected at most 256 bytes, got 257");
}

TEST(HealthServiceTest, WatchSeesTransitionsAndEndsAtShutdown) {
  HealthServer server;
  auto stub = server.Stub();
  grpc::ClientContext ctx;
  Deadline(&ctx);
  HealthCheckRequest req;
  req.set_service("lockstep.v1.Test");
  auto reader = stub->Watch(&ctx, req);
  HealthCheckResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);

  server.health().SetServing("lockstep.v1.Test", true);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);

  server.health().SetServing("", true);  // another service: no message for this one
  server.health().SetAllNotServing();    // drain
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);

  const absl::Time t0 = absl::Now();
  server.health().Shutdown();
  EXPECT_FALSE(reader->Read(&resp));  // already NOT_SERVING: nothing more to send
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));

  // After Shutdown: setters are ignored, Check says NOT_SERVING, Watch ends at once.
  server.health().SetAllServing(true);
  HealthStatus st;
  ASSERT_TRUE(Check(stub.get(), "", &st).ok());
  EXPECT_EQ(st, HealthCheckResponse::NOT_SERVING);
  grpc::ClientContext ctx2;
  Deadline(&ctx2);
  auto reader2 = stub->Watch(&ctx2, req);
  EXPECT_FALSE(reader2->Read(&resp));
  EXPECT_EQ(reader2->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(HealthServiceTest, WatchOfUnknownServiceReportsItWhenDeclared) {
  HealthServer server;
  auto stub = server.Stub();
  grpc::ClientContext ctx;
  Deadline(&ctx);
  HealthCheckRequest req;
  req.set_service("later.Service");
  auto reader = stub->Watch(&ctx, req);
  HealthCheckResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  server.health().SetServing("later.Service", true);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  ctx.TryCancel();
  EXPECT_FALSE(reader->Read(&resp));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(HealthServiceTest, WatchStreamsAreBoundedAndFreedWhenClientsLeave) {
  HealthServiceOptions options;
  options.max_watchers = 1;
  HealthServer server(options);
  auto stub = server.Stub();
  HealthCheckRequest req;
  HealthCheckResponse resp;
  auto first_ctx = std::make_unique<grpc::ClientContext>();
  Deadline(first_ctx.get());
  auto first = stub->Watch(first_ctx.get(), req);
  ASSERT_TRUE(first->Read(&resp));
  EXPECT_EQ(server.health().active_watchers(), 1);

  grpc::ClientContext ctx2;
  Deadline(&ctx2);
  auto second = stub->Watch(&ctx2, req);
  EXPECT_FALSE(second->Read(&resp));
  grpc::Status s = second->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "too many health Watch streams (at most 1 at once)");

  // The first client leaves: its slot is free within the cancel poll.
  first_ctx->TryCancel();
  EXPECT_FALSE(first->Read(&resp));
  first->Finish();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (server.health().active_watchers() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(server.health().active_watchers(), 0);
  grpc::ClientContext ctx3;
  Deadline(&ctx3);
  auto third = stub->Watch(&ctx3, req);
  ASSERT_TRUE(third->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  ctx3.TryCancel();
  third->Finish();
}

TEST(HealthServiceTest, CheckHealthProbe) {
  HealthServer server;
  absl::StatusOr<HealthStatus> st = CheckHealth(server.address(), "", absl::Seconds(5));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, HealthCheckResponse::NOT_SERVING);
  server.health().SetAllServing(true);
  st = CheckHealth(server.address(), "lockstep.v1.Test", absl::Seconds(5));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*st, HealthCheckResponse::SERVING);
  st = CheckHealth(server.address(), "x.Y", absl::Seconds(5));
  EXPECT_EQ(st.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.status().message(),
            absl::StrCat(server.address(), ": service \"x.Y\" is not served here"));
}

TEST(HealthServiceTest, CheckHealthOfAnAddressNobodyServesFailsWithinItsTimeout) {
  std::string address;
  {
    HealthServer gone;  // a port that was just served and is closed now
    address = gone.address();
  }
  const absl::Time t0 = absl::Now();
  absl::StatusOr<HealthStatus> st = CheckHealth(address, "", absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - t0;
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(st.status().code() == absl::StatusCode::kUnavailable ||
              st.status().code() == absl::StatusCode::kDeadlineExceeded)
      << st.status();
  EXPECT_NE(st.status().message().find(address), absl::string_view::npos) << st.status();
  EXPECT_LT(took, absl::Seconds(2));
}

}  // namespace
}  // namespace lockstep
