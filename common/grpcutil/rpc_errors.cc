#include "common/grpcutil/rpc_errors.h"

#include <utility>

#include <grpcpp/create_channel.h>

namespace lockstep {
namespace {

using grpc::experimental::InterceptionHookPoints;

class ServerErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  ServerErrorInterceptor(std::string method, const RpcErrorCallback* on_error)
      : method_(std::move(method)), on_error_(on_error) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status s = methods->GetSendStatus();
      if (!s.ok()) (*on_error_)(ShortMethodName(method_), GrpcCodeName(s.error_code()));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const RpcErrorCallback* on_error_;
};

class ServerErrorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServerErrorFactory(RpcErrorCallback on_error) : on_error_(std::move(on_error)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ServerErrorInterceptor(info->method() != nullptr ? info->method() : "",
                                      &on_error_);
  }

 private:
  const RpcErrorCallback on_error_;  // the factory lives as long as the server
};

class ClientErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  ClientErrorInterceptor(std::string method, const RpcErrorCallback* on_error)
      : method_(std::move(method)), on_error_(on_error) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      const grpc::Status* s = methods->GetRecvStatus();
      if (s != nullptr && !s->ok()) {
        (*on_error_)(ShortMethodName(method_), GrpcCodeName(s->error_code()));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const RpcErrorCallback* on_error_;
};

class ClientErrorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ClientErrorFactory(RpcErrorCallback on_error) : on_error_(std::move(on_error)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new ClientErrorInterceptor(info->method() != nullptr ? info->method() : "",
                                      &on_error_);
  }

 private:
  const RpcErrorCallback on_error_;  // the factory lives as long as the channel
};

}  // namespace

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

absl::string_view ShortMethodName(absl::string_view full) {
  const size_t slash = full.rfind('/');
  return slash == absl::string_view::npos ? full : full.substr(slash + 1);
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcErrorServerInterceptors(RpcErrorCallback on_error) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<ServerErrorFactory>(std::move(on_error)));
  return v;
}

std::shared_ptr<grpc::Channel> CreateChannelCountingErrors(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& creds,
    RpcErrorCallback on_error, const grpc::ChannelArguments& args) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<ClientErrorFactory>(std::move(on_error)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, args,
                                                                 std::move(v));
}

}  // namespace lockstep
