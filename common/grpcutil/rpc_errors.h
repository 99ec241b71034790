// Counting failed RPCs without touching the services or stubs: a gRPC
// server interceptor (every method of every service on a server) and a
// channel whose client calls are intercepted. Each RPC that ends with a
// status other than OK calls `on_error(method, code)` once, where `method`
// is the short method name ("ReportStep", from "/lockstep.v1.Coordinator/
// ReportStep") and `code` the canonical upper-case name ("UNAVAILABLE").
//
// Threading: `on_error` runs on gRPC's threads, concurrently; it must be
// thread-safe and quick (it increments a counter). It is copied into every
// interceptor, so whatever it captures must outlive the server / channel.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_RPC_ERRORS_H_
#define LOCKSTEP_COMMON_GRPCUTIL_RPC_ERRORS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/server_interceptor.h>

#include "absl/strings/string_view.h"

namespace lockstep {

using RpcErrorCallback = std::function<void(absl::string_view method, absl::string_view code)>;

// "OK", "CANCELLED", ..., "UNAUTHENTICATED" ("UNKNOWN" for values outside
// the canonical range).
const char* GrpcCodeName(grpc::StatusCode code);

// "/pkg.Service/Method" -> "Method".
absl::string_view ShortMethodName(absl::string_view full);

// For grpc::ServerBuilder::experimental().SetInterceptorCreators(...).
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcErrorServerInterceptors(RpcErrorCallback on_error);

// grpc::CreateCustomChannel (with `args`) with the client calls' errors
// reported.
std::shared_ptr<grpc::Channel> CreateChannelCountingErrors(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& creds,
    RpcErrorCallback on_error, const grpc::ChannelArguments& args = grpc::ChannelArguments());

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_RPC_ERRORS_H_
