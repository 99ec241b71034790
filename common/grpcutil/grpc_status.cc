#include "common/grpcutil/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

constexpr int kMaxCanonicalCode = 16;  // UNAUTHENTICATED in both enums

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = status.raw_code();
  if (code < 1 || code > kMaxCanonicalCode) {
    return grpc::Status(grpc::StatusCode::UNKNOWN,
                        absl::StrCat("(status code ", code, ") ", status.message()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  if (code < 1 || code > kMaxCanonicalCode) {
    return absl::UnknownError(
        absl::StrCat("(grpc status code ", code, ") ", status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace lockstep
