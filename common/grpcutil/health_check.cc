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

std::string ConnectFailure(const std::shared_ptr<grpc::Channel>& channel,
                           absl::Duration timeout) {
  if (channel == nullptr || channel->GetState(false) != GRPC_CHANNEL_TRANSIENT_FAILURE) return "";
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response);
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  return s.error_message();
}

}  // namespace lockstep
