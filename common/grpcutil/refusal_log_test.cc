// RefusalLog (refusal_log.h): exact lines and the line budget on a fake
// clock; over a real server, a refused call and a request gRPC cannot parse
// are logged naming the caller's address, and an OK call is not.
#include "common/grpcutil/refusal_log.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpcutil/health_service.h"
#include "common/log.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

struct Captured {
  std::shared_ptr<StringLogSink> sink = std::make_shared<StringLogSink>();
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  Logger logger{sink, clock};
};

TEST(RefusalLogTest, LinesNameMethodCodePeerAndDetail) {
  Captured c;
  RefusalLog log(&c.logger, c.clock.get(), 2, absl::Seconds(10));
  log.Refused("Push", grpc::StatusCode::INVALID_ARGUMENT, "ipv4:127.0.0.1:5555", "bad shard");
  log.Refused("Push", grpc::StatusCode::CANCELLED, "ipv4:127.0.0.1:5555", "ignored");
  log.Refused("Push", grpc::StatusCode::UNAVAILABLE, "ipv4:127.0.0.1:5555", "ignored");
  std::vector<std::string> lines = c.sink->lines();
  ASSERT_EQ(lines.size(), 1u) << c.sink->contents();
  EXPECT_NE(lines[0].find("request refused method=Push code=INVALID_ARGUMENT "
                          "peer=ipv4:127.0.0.1:5555 detail=\"bad shard\""),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(log.refused(), 1);
}

TEST(RefusalLogTest, AtMostMaxLinesPerWindowThenSaysHowManyWereLeftOut) {
  Captured c;
  RefusalLog log(&c.logger, c.clock.get(), 2, absl::Seconds(10));
  for (int i = 0; i < 7; ++i) {
    log.Refused("Heartbeat", grpc::StatusCode::NOT_FOUND, absl::StrCat("p", i), "");
  }
  EXPECT_EQ(c.sink->lines().size(), 2u);
  EXPECT_EQ(log.refused(), 7);
  EXPECT_EQ(log.not_logged(), 5);
  c.clock->Advance(absl::Seconds(9));
  log.Refused("Heartbeat", grpc::StatusCode::NOT_FOUND, "p7", "");
  EXPECT_EQ(c.sink->lines().size(), 2u);  // same window
  c.clock->Advance(absl::Seconds(1));
  log.Refused("Heartbeat", grpc::StatusCode::NOT_FOUND, "p8", "");
  std::vector<std::string> lines = c.sink->lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(absl::StrContains(lines[2], "peer=p8")) << lines[2];
  EXPECT_TRUE(absl::StrContains(lines[2], "not_logged=6")) << lines[2];
  EXPECT_EQ(log.not_logged(), 6);
}

TEST(RefusalLogTest, DetailIsCut) {
  Captured c;
  RefusalLog log(&c.logger, c.clock.get());
  log.Refused("X", grpc::StatusCode::INTERNAL, "p", std::string(1000, 'a'));
  const std::string line = c.sink->lines().at(0);
  EXPECT_TRUE(absl::StrContains(line, std::string(200, 'a')));
  EXPECT_FALSE(absl::StrContains(line, std::string(201, 'a')));
}

TEST(RefusalLogTest, ARealServerLogsRefusedAndUnparsableRequestsNamingThePeer) {
  Captured c;
  RealClock real;
  RefusalLog log(&c.logger, &real);
  HealthService health({"known"});
  health.SetAllServing(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&health);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
  f.push_back(log.InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(f));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(10); };
  {  // OK: not logged
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("known");
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(stub->Check(&ctx, req, &resp).ok());
  }
  {  // NOT_FOUND: logged
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("unknown-service");
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_EQ(stub->Check(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  grpc::Status unparsable;
  {  // bytes that are no HealthCheckRequest (field 0 does not exist)
    grpc::GenericStub generic(channel);
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    const char bad[] = {0x00, 0x01, 0x02};
    grpc::Slice slice(bad, sizeof(bad));
    grpc::ByteBuffer send(&slice, 1), recv;
    grpc::Status status;
    auto call = generic.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", send, &cq);
    call->StartCall();
    call->Finish(&recv, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    unparsable = status;
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  server->Shutdown(deadline());
  server->Wait();
  // gRPC answers INTERNAL with an empty message; the interceptor makes it
  // INVALID_ARGUMENT (the caller's bytes are no request) and names the
  // method and what was wrong, to the caller and in the log.
  EXPECT_EQ(unparsable.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << unparsable.error_message();
  EXPECT_EQ(unparsable.error_message(), "Check: malformed request: not a valid Check request message");
  const std::vector<std::string> lines = c.sink->lines();
  ASSERT_EQ(lines.size(), 2u) << c.sink->contents();
  EXPECT_TRUE(absl::StrContains(lines[0], "method=Check code=NOT_FOUND peer=ipv4:127.0.0.1:"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(
      lines[1], "method=Check code=INVALID_ARGUMENT peer=ipv4:127.0.0.1:"))
      << lines[1];
  EXPECT_TRUE(absl::StrContains(
      lines[1], "detail=\"Check: malformed request: not a valid Check request message\""))
      << lines[1];
  EXPECT_EQ(log.refused(), 2);
}

}  // namespace
}  // namespace lockstep
