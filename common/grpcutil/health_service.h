// HealthService: the standard gRPC health-checking protocol
// (grpc.health.v1.Health, proto/health.proto) served by every lockstep
// daemon, so load balancers, `lockstep health`, Docker and Kubernetes can
// ask a daemon whether it takes work.
//
// Statuses: every service name the daemon declares (constructor), plus the
// overall server "", starts NOT_SERVING. The daemon flips them to SERVING
// once it is ready (coordinator: listening with its address known; worker:
// registered with the coordinator; ps server: listening) and back to
// NOT_SERVING when it drains (SIGTERM) or, for a worker, must register again.
//
//   Check(service)  -> the status; NOT_FOUND ("service \"x\" is not served
//                      here") for a name never declared, as the spec says.
//   Watch(service)  -> the current status at once (SERVICE_UNKNOWN for an
//                      unknown name; the stream stays open and reports the
//                      name if it is declared later), then one message per
//                      change of that service's status (intermediate
//                      flips may be coalesced: the client always ends up
//                      with the latest). Ends with UNAVAILABLE after
//                      Shutdown(), CANCELLED when the client goes away
//                      (noticed within options.cancel_poll).
//
// Bounds: a service name longer than kMaxHealthServiceNameBytes is
// INVALID_ARGUMENT; at most options.max_watchers Watch streams at once
// (each holds one of the sync server's threads), the next one gets
// RESOURCE_EXHAUSTED. Every wait has a deadline (cancel_poll slices).
//
// Thread-safety: every method is thread-safe; the setters never block on
// I/O (watch streams write outside the lock). Shutdown() before
// grpc::Server::Shutdown() so watch streams end at once instead of holding
// the server's shutdown until its deadline.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_HEALTH_SERVICE_H_
#define LOCKSTEP_COMMON_GRPCUTIL_HEALTH_SERVICE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/health.grpc.pb.h"

namespace lockstep {

using HealthStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

constexpr size_t kMaxHealthServiceNameBytes = 256;

// "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", "UNKNOWN".
std::string HealthStatusName(HealthStatus status);

struct HealthServiceOptions {
  int max_watchers = 32;
  // How often a waiting Watch stream checks whether its client is gone.
  absl::Duration cancel_poll = absl::Milliseconds(100);
};

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  // Declares `services` (e.g. "lockstep.v1.Coordinator") and the overall
  // service "", all NOT_SERVING.
  explicit HealthService(const std::vector<std::string>& services,
                         HealthServiceOptions options = {});

  // Sets one service's status, declaring it if new. Ignored after Shutdown().
  void SetServing(const std::string& service, bool serving);
  // Sets every declared service (and ""). Ignored after Shutdown().
  void SetAllServing(bool serving);
  void SetAllNotServing() { SetAllServing(false); }
  // Every service NOT_SERVING for good; watch streams send that and end
  // with UNAVAILABLE; later Watch calls fail UNAVAILABLE at once (Check
  // keeps answering NOT_SERVING). Idempotent.
  void Shutdown();

  // The status Check would give (SERVICE_UNKNOWN for an undeclared name).
  HealthStatus Status(const std::string& service) const;
  int active_watchers() const;

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  HealthStatus StatusLocked(const std::string& service) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const HealthServiceOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;  // bumped on every change
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  int watchers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_HEALTH_SERVICE_H_
