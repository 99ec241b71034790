// CheckHealth: a one-shot grpc.health.v1.Health/Check call, the probe behind
// `lockstep health` (and container health checks).
#ifndef LOCKSTEP_COMMON_GRPCUTIL_HEALTH_CHECK_H_
#define LOCKSTEP_COMMON_GRPCUTIL_HEALTH_CHECK_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpcutil/health_service.h"

namespace lockstep {

// Asks the daemon at `address` (host:port) for the status of `service`
// ("" = the whole server) within `timeout` (> 0; the call does not wait for
// a connection beyond it).
//   OK      -> SERVING or NOT_SERVING (what the daemon answered);
//   errors  -> NOT_FOUND when the daemon does not know `service`
//              (SERVICE_UNKNOWN), UNAVAILABLE / DEADLINE_EXCEEDED when it
//              cannot be reached in time, UNIMPLEMENTED when it serves no
//              health service; every message names the address.
// `credentials`: the channel's (common/grpcutil/tls.h); nullptr = plain text.
absl::StatusOr<HealthStatus> CheckHealth(
    const std::string& address, const std::string& service, absl::Duration timeout,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_HEALTH_CHECK_H_
