#include "common/grpcutil/refusal_log.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpcutil/rpc_errors.h"

namespace lockstep {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr size_t kMaxDetailBytes = 200;

class RefusalInterceptor : public grpc::experimental::Interceptor {
 public:
  RefusalInterceptor(grpc::experimental::ServerRpcInfo* info, RefusalLog* log)
      : info_(info), log_(log) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsed_ = true;  // gRPC could not deserialize the request
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status s = methods->GetSendStatus();
      if (RefusalLog::IsRefusal(s.error_code())) {
        const std::string method =
            info_->method() != nullptr ? std::string(ShortMethodName(info_->method())) : "";
        // (A server-streaming callback method answers bytes it cannot
        // parse with UNIMPLEMENTED and no message: the same case.)
        if (s.error_message().empty() &&
            (s.error_code() == grpc::StatusCode::INTERNAL ||
             (unparsed_ && s.error_code() == grpc::StatusCode::UNIMPLEMENTED))) {
          // gRPC answers a request it cannot parse with INTERNAL and an
          // empty message (proto3's InitializationErrorString()); say so,
          // to the caller and in the log. Bytes that are no request are
          // the caller's error, not the server's: INVALID_ARGUMENT.
          s = grpc::Status(unparsed_ ? grpc::StatusCode::INVALID_ARGUMENT : s.error_code(),
                           absl::StrCat(method, ": malformed request: not a valid ", method,
                                        " request message", unparsed_ ? "" : " (or no message)"));
          methods->ModifySendStatus(s);
        }
        grpc::ServerContextBase* ctx = info_->server_context();
        log_->Refused(method, s.error_code(), ctx != nullptr ? ctx->peer() : std::string("?"),
                      s.error_message());
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  RefusalLog* const log_;
  bool unparsed_ = false;
};

class RefusalFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RefusalFactory(RefusalLog* log) : log_(log) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RefusalInterceptor(info, log_);
  }

 private:
  RefusalLog* const log_;
};

}  // namespace

RefusalLog::RefusalLog(const Logger* logger, Clock* clock, int max_lines, absl::Duration window)
    : logger_(logger), budget_(clock, max_lines, window) {}

bool RefusalLog::IsRefusal(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::UNAUTHENTICATED:
      return true;
    default:
      return false;
  }
}

void RefusalLog::Refused(absl::string_view method, grpc::StatusCode code, absl::string_view peer,
                         absl::string_view detail) {
  if (!IsRefusal(code)) return;
  int64_t left_out = 0;
  if (!budget_.Admit(&left_out)) return;
  // Logged with no lock held (the logger writes to a file descriptor).
  std::vector<LogField> fields = {{"method", method},
                                  {"code", GrpcCodeName(code)},
                                  {"peer", peer},
                                  {"detail", detail.substr(0, kMaxDetailBytes)}};
  if (left_out > 0) fields.push_back({"not_logged", left_out});
  logger_->Log(LogLevel::kWarn, "request refused", fields);
}

int64_t RefusalLog::refused() const { return budget_.seen(); }

int64_t RefusalLog::not_logged() const { return budget_.not_logged(); }

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RefusalLog::InterceptorFactory() {
  return std::make_unique<RefusalFactory>(this);
}

}  // namespace lockstep
