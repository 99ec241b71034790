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
    : channels_(std::move(channels)), log_(log) {
  thread_ = std::thread([this] { Loop(); });
}

GrpcPsControl::~GrpcPsControl() {
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
  }
  thread_.join();
}

void GrpcPsControl::StartKeys(const std::vector<std::string>& shards,
                              std::vector<PsKeyStart> keys) {
  for (size_t i = 0; i < keys.size(); i += kMaxEntries) {
    Message m;
    m.shards = shards;
    for (size_t j = i; j < std::min(keys.size(), i + kMaxEntries); ++j) {
      v1::JobSecret* js = m.request.add_secrets();
      js->set_job(keys[j].job);
      js->set_data_plane_secret(std::move(keys[j].secret));
      js->set_num_workers(keys[j].num_workers);
      js->set_num_shards(keys[j].num_shards);
    }
    Enqueue(std::move(m));
  }
}

void GrpcPsControl::Forget(const std::vector<std::string>& shards, std::vector<uint64_t> jobs) {
  for (size_t i = 0; i < jobs.size(); i += kMaxEntries) {
    Message m;
    m.shards = shards;
    m.forget_only = true;
    for (size_t j = i; j < std::min(jobs.size(), i + kMaxEntries); ++j) {
      m.request.add_forget_jobs(jobs[j]);
    }
    Enqueue(std::move(m));
  }
}

void GrpcPsControl::Enqueue(Message m) {
  bool dropped_one = false;
  {
    absl::MutexLock l(&mu_);
    if (queue_.size() >= kMaxQueued) {
      auto victim = std::find_if(queue_.begin(), queue_.end(),
                                 [](const Message& q) { return q.forget_only; });
      queue_.erase(victim != queue_.end() ? victim : queue_.begin());
      ++dropped_;
      dropped_one = true;
    }
    queue_.push_back(std::move(m));
  }
  // Logged outside the lock (the caller may hold its own).
  if (dropped_one && log_ != nullptr) {
    log_->Warn("ps control queue full: dropped the oldest message",
               {{"limit", static_cast<int64_t>(kMaxQueued)}});
  }
}

grpc::Status GrpcPsControl::Send(const std::string& address,
                                 const v1::PsControlRequest& request) {
  auto& stub = stubs_[address];
  if (stub == nullptr) stub = v1::ParameterServer::NewStub(channels_(address));
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

void GrpcPsControl::Loop() {
  for (;;) {
    Message m;
    {
      absl::MutexLock l(&mu_);
      busy_ = false;
      auto ready = [this] {
        mu_.AssertReaderHeld();
        return quit_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (quit_) return;
      m = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    for (const std::string& address : m.shards) {
      const grpc::Status s = Send(address, m.request);
      {
        absl::MutexLock l(&mu_);
        ++(s.ok() ? delivered_ : failed_);
      }
      if (!s.ok() && log_ != nullptr) {
        std::vector<uint64_t> jobs;
        for (const v1::JobSecret& js : m.request.secrets()) jobs.push_back(js.job());
        for (uint64_t j : m.request.forget_jobs()) jobs.push_back(j);
        log_->Warn("ps control failed",
                   {{"shard", address},
                    {"what", m.forget_only ? "forget" : "set data-plane secrets"},
                    {"job_keys", absl::StrJoin(jobs, ",")},
                    {"error", absl::StrCat(static_cast<int>(s.error_code()), " ", s.error_message())}});
      }
    }
  }
}

bool GrpcPsControl::WaitIdle(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto idle = [this] {
    mu_.AssertReaderHeld();
    return queue_.empty() && !busy_;
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
