// The one place that converts between absl::Status and grpc::Status.
//
// Codes map one to one (gRPC and Abseil share the canonical code numbers
// 0..16); messages are copied unchanged. A code outside 0..16 becomes
// UNKNOWN with the original number noted in the message. Payloads and
// grpc error details are not carried.
//
// Thread-safety: pure functions.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_GRPC_STATUS_H_
#define LOCKSTEP_COMMON_GRPCUTIL_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace lockstep {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_GRPC_STATUS_H_
