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

// Why `channel` cannot connect, for an error message: when the channel is
// in TRANSIENT_FAILURE, one fail-fast Health/Check on it (it does not wait
// for a connection, so it does not reach the server) ends UNAVAILABLE with
// gRPC's last connection error, e.g. a failed TLS handshake naming the
// server certificate's role (tls.h); that text is returned. "" when the
// channel is in another state or the check says nothing more. A call made
// with wait_for_ready that ran into its deadline carries only "Deadline
// Exceeded": callers append this. Any thread; waits at most `timeout`.
std::string ConnectFailure(const std::shared_ptr<grpc::Channel>& channel,
                           absl::Duration timeout);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_HEALTH_CHECK_H_
