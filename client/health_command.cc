#include "client/health_command.h"

#include <cstdio>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpcutil/health_check.h"
#include "common/json.h"

namespace lockstep {

int HealthCommand(const std::string& address, const std::string& service, int64_t timeout_ms,
                  bool json, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (timeout_ms <= 0) {
    std::fprintf(stderr, "lockstep health: --timeout_ms: expected > 0, got %lld\n",
                 static_cast<long long>(timeout_ms));
    return 2;
  }
  absl::StatusOr<HealthStatus> st = CheckHealth(address, service, absl::Milliseconds(timeout_ms), std::move(credentials));
  std::string status, error;
  if (st.ok()) {
    status = HealthStatusName(*st);
  } else {
    status = st.status().code() == absl::StatusCode::kNotFound ? "SERVICE_UNKNOWN" : "UNREACHABLE";
    error = absl::StrCat(absl::StatusCodeToString(st.status().code()), ": ", st.status().message());
  }
  if (json) {
    std::string out = absl::StrCat("{\"address\": ", JsonQuote(address),
                                   ", \"service\": ", JsonQuote(service),
                                   ", \"status\": ", JsonQuote(status));
    if (!error.empty()) absl::StrAppend(&out, ", \"error\": ", JsonQuote(error));
    std::printf("%s}\n", out.c_str());
  } else {
    std::printf("%s\n", status.c_str());
  }
  if (!error.empty()) std::fprintf(stderr, "lockstep health: %s\n", error.c_str());
  return st.ok() && *st == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace lockstep
