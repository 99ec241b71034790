#include "common/grpcutil/health_check.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "proto/health.grpc.pb.h"

namespace lockstep {

absl::StatusOr<HealthStatus> CheckHealth(const std::string& address, const std::string& service,
                                         absl::Duration timeout,
                                         std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat(address, ": ", s.error_message()));
  }
  return response.status();
}

}  // namespace lockstep
