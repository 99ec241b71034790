#include "server/grpc_ps_control.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {

// Control's bound on each list (server/ps/ps_service.h kMaxControlEntries).
constexpr int kMaxEntries = 256;

}  // namespace

GrpcPsControl::GrpcPsControl(ChannelFactory channels, const Logger* log)
    : channels_(std::move(channels)), log_(log) {}

GrpcPsControl::~GrpcPsControl() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
    for (auto& [address, lane] : lanes_) threads.push_back(std::move(lane->thread));
  }
  for (std::thread& t : threads) t.join();  // without the lock
}

void GrpcPsControl::StartKeys(const std::vector<std::string>& shards,
                              std::vector<PsKeyStart> keys) {
  for (size_t i = 0; i < keys.size(); i += kMaxEntries) {
    v1::PsControlRequest request;
    for (size_t j = i; j < std::min(keys.size(), i + kMaxEntries); ++j) {
      v1::JobSecret* js = request.add_secrets();
      js->set_job(keys[j].job);
      js->set_data_plane_secret(std::move(keys[j].secret));
      js->set_num_workers(keys[j].num_workers);
      js->set_num_shards(keys[j].num_shards);
    }
    Enqueue(shards, request, /*forget_only=*/false);
  }
}

void GrpcPsControl::Forget(const std::vector<std::string>& shards, std::vector<uint64_t> jobs) {
  for (size_t i = 0; i < jobs.size(); i += kMaxEntries) {
    v1::PsControlRequest request;
    for (size_t j = i; j < std::min(jobs.size(), i + kMaxEntries); ++j) {
      request.add_forget_jobs(jobs[j]);
    }
    Enqueue(shards, request, /*forget_only=*/true);
  }
}

void GrpcPsControl::Enqueue(const std::vector<std::string>& shards,
                            const v1::PsControlRequest& request, bool forget_only) {
  std::vector<std::string> full, refused;
  {
    absl::MutexLock l(&mu_);
    if (quit_) return;
    for (const std::string& address : shards) {
      std::unique_ptr<Lane>& lane = lanes_[address];
      if (lane == nullptr) {
        if (lanes_.size() > kMaxLanes) {
          lanes_.erase(address);
          ++dropped_;
          refused.push_back(address);
          continue;
        }
        lane = std::make_unique<Lane>();
        lane->address = address;
        Lane* raw = lane.get();
        lane->thread = std::thread([this, raw] { Loop(raw); });
      }
      if (lane->queue.size() >= kMaxQueued) {
        auto victim = std::find_if(lane->queue.begin(), lane->queue.end(),
                                   [](const Message& q) { return q.forget_only; });
        lane->queue.erase(victim != lane->queue.end() ? victim : lane->queue.begin());
        ++dropped_;
        full.push_back(address);
      }
      lane->queue.push_back(Message{request, forget_only});
    }
  }
  // Logged outside the lock (the caller may hold its own).
  if (log_ == nullptr) return;
  for (const std::string& a : full) {
    log_->Warn("ps control queue full: dropped the oldest message",
               {{"shard", a}, {"limit", static_cast<int64_t>(kMaxQueued)}});
  }
  for (const std::string& a : refused) {
    log_->Warn("ps control: too many shard addresses, message dropped",
               {{"shard", a}, {"limit", static_cast<int64_t>(kMaxLanes)}});
  }
}

grpc::Status GrpcPsControl::Send(v1::ParameterServer::Stub* stub,
                                 const v1::PsControlRequest& request) {
  grpc::Status status;
  absl::Duration backoff = absl::Milliseconds(200);
  for (int attempt = 0; attempt < kTries; ++attempt) {
    if (attempt > 0) {
      absl::MutexLock l(&mu_);
      // Sleeps, but wakes at once for the destructor.
      auto quitting = [this] {
        mu_.AssertReaderHeld();
        return quit_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&quitting), backoff)) return status;
      backoff *= 2;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
    v1::PsControlReply reply;
    status = stub->Control(&ctx, request, &reply);
    // Retried: what a restart or a moment's unreachability gives.
    if (status.ok() || (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
                        status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)) {
      return status;
    }
  }
  return status;
}

void GrpcPsControl::Loop(Lane* lane) {
  // The lane's own stub (this thread's only), made on first use.
  std::unique_ptr<v1::ParameterServer::Stub> stub;
  for (;;) {
    Message m;
    {
      absl::MutexLock l(&mu_);
      lane->busy = false;
      auto ready = [this, lane] {
        mu_.AssertReaderHeld();
        return quit_ || !lane->queue.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (quit_) return;
      m = std::move(lane->queue.front());
      lane->queue.pop_front();
      lane->busy = true;
    }
    if (stub == nullptr) stub = v1::ParameterServer::NewStub(channels_(lane->address));
    const grpc::Status s = Send(stub.get(), m.request);
    {
      absl::MutexLock l(&mu_);
      ++(s.ok() ? delivered_ : failed_);
    }
    if (!s.ok() && log_ != nullptr) {
      std::vector<uint64_t> jobs;
      for (const v1::JobSecret& js : m.request.secrets()) jobs.push_back(js.job());
      for (uint64_t j : m.request.forget_jobs()) jobs.push_back(j);
      log_->Warn("ps control failed",
                 {{"shard", lane->address},
                  {"what", m.forget_only ? "forget" : "start job keys"},
                  {"job_keys", absl::StrJoin(jobs, ",")},
                  {"error", absl::StrCat(static_cast<int>(s.error_code()), " ", s.error_message())}});
    }
  }
}

bool GrpcPsControl::WaitIdle(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto idle = [this] {
    mu_.AssertReaderHeld();
    for (const auto& [address, lane] : lanes_) {
      if (lane->busy || !lane->queue.empty()) return false;
    }
    return true;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

int64_t GrpcPsControl::delivered() const {
  absl::MutexLock l(&mu_);
  return delivered_;
}
int64_t GrpcPsControl::failed() const {
  absl::MutexLock l(&mu_);
  return failed_;
}
int64_t GrpcPsControl::dropped() const {
  absl::MutexLock l(&mu_);
  return dropped_;
}

}  // namespace lockstep
