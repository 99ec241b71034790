#include "common/grpcutil/health_service.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

grpc::Status CheckName(const HealthCheckRequest& request) {
  if (request.service().size() > kMaxHealthServiceNameBytes) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("service: expected at most ", kMaxHealthServiceNameBytes,
                                     " bytes, got ", request.service().size()));
  }
  return grpc::Status::OK;
}

}  // namespace

std::string HealthStatusName(HealthStatus status) {
  return HealthCheckResponse::ServingStatus_Name(status);
}

HealthService::HealthService(const std::vector<std::string>& services,
                             HealthServiceOptions options)
    : options_(options) {
  absl::MutexLock l(&mu_);
  serving_[""] = false;
  for (const std::string& s : services) serving_[s] = false;
}

void HealthService::SetServing(const std::string& service, bool serving) {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  auto [it, added] = serving_.emplace(service, serving);
  if (!added && it->second == serving) return;
  it->second = serving;
  ++version_;
}

void HealthService::SetAllServing(bool serving) {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  for (auto& [name, s] : serving_) s = serving;
  ++version_;
}

void HealthService::Shutdown() {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  for (auto& [name, s] : serving_) s = false;
  shut_down_ = true;
  ++version_;
}

HealthStatus HealthService::StatusLocked(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

HealthStatus HealthService::Status(const std::string& service) const {
  absl::ReaderMutexLock l(&mu_);
  return StatusLocked(service);
}

int HealthService::active_watchers() const {
  absl::ReaderMutexLock l(&mu_);
  return watchers_;
}

grpc::Status HealthService::Check(grpc::ServerContext*, const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  if (grpc::Status s = CheckName(*request); !s.ok()) return s;
  const HealthStatus status = Status(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("service \"", request->service(), "\" is not served here"));
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* context,
                                  const HealthCheckRequest* request,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  if (grpc::Status s = CheckName(*request); !s.ok()) return s;
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
    }
    if (watchers_ >= options_.max_watchers) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("too many health Watch streams (at most ",
                                       options_.max_watchers, " at once)"));
    }
    ++watchers_;
  }
  const std::string& service = request->service();
  bool have_sent = false;
  HealthStatus sent = HealthCheckResponse::UNKNOWN;
  uint64_t seen = 0;  // version_ starts at 1: the first pass sends at once
  grpc::Status result;
  while (true) {
    HealthStatus now;
    bool ended;
    {
      absl::MutexLock l(&mu_);
      auto changed = [this, seen]() {
        return shut_down_ || version_ != seen;
      };
      mu_.AwaitWithTimeout(absl::Condition(&changed), options_.cancel_poll);
      now = StatusLocked(service);
      seen = version_;
      ended = shut_down_;
    }
    if (!have_sent || now != sent) {
      HealthCheckResponse response;
      response.set_status(now);
      if (!writer->Write(response)) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
        break;
      }
      have_sent = true;
      sent = now;
    }
    if (ended) {
      result = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
      break;
    }
    if (context->IsCancelled()) {
      result = grpc::Status(grpc::StatusCode::CANCELLED, "the watcher cancelled");
      break;
    }
  }
  absl::MutexLock l(&mu_);
  --watchers_;
  return result;
}

}  // namespace lockstep
