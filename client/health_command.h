// `lockstep health`: probes any lockstep daemon's standard gRPC health
// service (grpc.health.v1.Health/Check) for scripts and container health
// checks.
#ifndef LOCKSTEP_CLIENT_HEALTH_COMMAND_H_
#define LOCKSTEP_CLIENT_HEALTH_COMMAND_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

namespace lockstep {

// Asks the daemon at `address` for the status of `service` ("" = the whole
// daemon) within `timeout_ms` and prints it on stdout: SERVING,
// NOT_SERVING, SERVICE_UNKNOWN (the daemon does not serve `service`) or
// UNREACHABLE (no answer in time, or no health service), the error going
// to stderr; with `json` one object {"address", "service", "status"
// [, "error"]}. Returns the exit code: 0 when SERVING, 1 otherwise, 2 when
// timeout_ms <= 0.
// `credentials`: the channel's (common/grpcutil/tls.h); nullptr = plain text.
int HealthCommand(const std::string& address, const std::string& service, int64_t timeout_ms,
                  bool json, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_HEALTH_COMMAND_H_
