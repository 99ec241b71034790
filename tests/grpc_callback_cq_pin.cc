// Linked into every test binary that builds and destroys gRPC servers and
// channels (alwayslink): holds one idle callback-API server for the whole
// test process.
//
// Why: gRPC 1.51 on Linux (epoll1 poller, no background iomgr) runs every
// callback-API reactor on one process-wide "callback alternative" completion
// queue, created when the first callback server or channel appears and torn
// down (shutdown, join its polling threads, destroy) when the last one goes.
// A daemon never tears it down: its server lives as long as the process.
// Tests do it dozens of times per process (every cluster is built and
// destroyed), and under ASan about one run in ten of
// //worker/net:grpc_transport_test aborted with a double free inside gRPC
// (grpc_cq_internal_unref reached from the queue's polling thread, freeing
// the queue's debug tag array twice). With this pin the queue is created
// once and lives until exit, as in the daemons; see the README ("Known
// issues") for the measurements.
#include <memory>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

class CallbackCqPin : public ::testing::Environment {
 public:
  void SetUp() override {
    grpc::ServerBuilder b;
    // No listening port: the server only has to exist and use the callback
    // API, which makes it hold a reference on the shared callback queue.
    b.RegisterCallbackGenericService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr) << "callback queue pin: server did not start";
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    server_->Shutdown();
    server_.reset();
  }

 private:
  grpc::CallbackGenericService service_;
  std::unique_ptr<grpc::Server> server_;
};

// gtest owns registered environments.
[[maybe_unused]] ::testing::Environment* const kPin =
    ::testing::AddGlobalTestEnvironment(new CallbackCqPin);

}  // namespace
}  // namespace lockstep
