#include "common/grpcutil/rpc_errors.h"

#include <map>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpcutil/health_service.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

class Tally {
 public:
  RpcErrorCallback Callback() {
    return [this](absl::string_view method, absl::string_view code) {
      absl::MutexLock l(&mu_);
      ++counts_[absl::StrCat(method, " ", code)];
    };
  }
  std::map<std::string, int> counts() {
    absl::MutexLock l(&mu_);
    return counts_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

grpc::Status Check(grpc::health::v1::Health::Stub* stub, const std::string& service) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp);
}

TEST(RpcErrors, ServerAndClientCountFailedCallsByMethodAndCode) {
  Tally server_errors, client_errors;
  HealthService health({"lockstep.v1.Test"});
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&health);
  b.experimental().SetInterceptorCreators(RpcErrorServerInterceptors(server_errors.Callback()));
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = grpc::health::v1::Health::NewStub(
      CreateChannelCountingErrors(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials(), client_errors.Callback()));
  EXPECT_TRUE(Check(stub.get(), "").ok());                      // not counted
  EXPECT_EQ(Check(stub.get(), "no.such.Service").error_code(),  // counted twice
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Check(stub.get(), "no.such.Service").error_code(), grpc::StatusCode::NOT_FOUND);
  const std::map<std::string, int> want = {{"Check NOT_FOUND", 2}};
  EXPECT_EQ(client_errors.counts(), want);
  // The server's status is sent before the client sees it; the interceptor
  // ran by then.
  EXPECT_EQ(server_errors.counts(), want);

  // A server that is gone: the client counts UNAVAILABLE.
  health.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server.reset();
  EXPECT_EQ(Check(stub.get(), "").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(client_errors.counts(),
            (std::map<std::string, int>{{"Check NOT_FOUND", 2}, {"Check UNAVAILABLE", 1}}));
}

TEST(RpcErrors, Names) {
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(GrpcCodeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
  EXPECT_EQ(ShortMethodName("/lockstep.v1.Coordinator/ReportStep"), "ReportStep");
  EXPECT_EQ(ShortMethodName("plain"), "plain");
}

}  // namespace
}  // namespace lockstep
