#include "server/ps/ps_service.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpcutil/grpc_status.h"

namespace lockstep {

absl::StatusOr<std::shared_ptr<PsShard>> PsService::GetShard(uint64_t job, int shard,
                                                             int num_workers,
                                                             int64_t shard_len) {
  if (num_workers < 1 || shard < 0 || shard_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: job ", job, ": expected num_workers >= 1, shard >= 0 and shard_len >= 0, got ",
        num_workers, ", ", shard, ", ", shard_len));
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    while (!created_.empty() && static_cast<int>(jobs_.size()) >= max_jobs_) {
      jobs_.erase(created_.front());
      created_.pop_front();
    }
    it = jobs_.emplace(job, std::map<int, std::shared_ptr<PsShard>>()).first;
    created_.push_back(job);
  }
  std::shared_ptr<PsShard>& s = it->second[shard];
  if (s == nullptr) {
    s = std::make_shared<PsShard>(num_workers, shard_len, shard);
  } else if (s->num_workers() != num_workers || s->shard_len() != shard_len) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ps: job ", job, " shard ", shard, " holds K=", s->num_workers(), " and ",
        s->shard_len(), " floats; request says K=", num_workers, " and ", shard_len));
  }
  return s;
}

grpc::Status PsService::Push(grpc::ServerContext*, const v1::PushRequest* req,
                             v1::PushReply*) {
  if (req->grad_sum().size() != static_cast<size_t>(req->shard_len()) * sizeof(float)) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "ps push: job ", req->job(), " step ", req->step(), " worker ", req->worker_rank(),
        ": grad_sum has ", req->grad_sum().size(), " bytes, expected shard_len ",
        req->shard_len(), " x 4")));
  }
  auto shard = GetShard(req->job(), req->shard(), req->num_workers(), req->shard_len());
  if (!shard.ok()) return ToGrpcStatus(shard.status());
  // The bytes are float32 in the sender's (and our) native layout.
  std::vector<float> data(req->shard_len());
  if (!data.empty()) std::memcpy(data.data(), req->grad_sum().data(), req->grad_sum().size());
  absl::Status pushed =
      (*shard)->Push(req->job(), req->step(), req->worker_rank(), data, req->count());
  if (pushed.ok()) {
    pushes_.fetch_add(1, std::memory_order_relaxed);
    pushed_bytes_.fetch_add(static_cast<int64_t>(req->grad_sum().size() + sizeof(int64_t)),
                            std::memory_order_relaxed);
  }
  return ToGrpcStatus(pushed);
}

grpc::Status PsService::Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                             v1::PullReply* reply) {
  auto shard = GetShard(req->job(), req->shard(), req->num_workers(), req->shard_len());
  if (!shard.ok()) return ToGrpcStatus(shard.status());
  std::string* bytes = reply->mutable_grad_sum();
  bytes->resize(static_cast<size_t>(req->shard_len()) * sizeof(float));
  int64_t count = 0;
  // Wait as long as the client asked (wait_micros), never past its RPC
  // deadline, never longer than 5 minutes.
  absl::Time deadline = absl::Now() + absl::Minutes(5);
  if (req->wait_micros() > 0) {
    deadline = std::min(deadline, absl::Now() + absl::Microseconds(req->wait_micros()));
  }
  if (ctx->deadline() != std::chrono::system_clock::time_point::max()) {
    deadline = std::min(deadline, absl::FromChrono(ctx->deadline()));
  }
  // Wait in slices so that a pull the client has given up on (a cancelled
  // job) frees this server thread within a slice, not at its deadline.
  waiting_pulls_.fetch_add(1, std::memory_order_relaxed);
  absl::Status s;
  for (;;) {
    const absl::Time slice = std::min(deadline, absl::Now() + kCancelCheckEvery);
    s = (*shard)->Pull(
        req->job(), req->step(), req->worker_rank(),
        absl::MakeSpan(reinterpret_cast<float*>(bytes->data()), req->shard_len()), &count,
        slice);
    if (s.code() != absl::StatusCode::kDeadlineExceeded || slice >= deadline) break;
    if (ctx->IsCancelled()) {
      s = absl::CancelledError(absl::StrFormat(
          "pull (job %d step %d shard %d) by worker %d: cancelled by the client", req->job(),
          req->step(), req->shard(), req->worker_rank()));
      break;
    }
  }
  waiting_pulls_.fetch_sub(1, std::memory_order_relaxed);
  if (!s.ok()) return ToGrpcStatus(s);
  reply->set_count(count);
  pulls_.fetch_add(1, std::memory_order_relaxed);
  pulled_bytes_.fetch_add(static_cast<int64_t>(bytes->size() + sizeof(int64_t)),
                          std::memory_order_relaxed);
  return grpc::Status::OK;
}

PsService::Stats PsService::stats() const {
  Stats s;
  s.pushes = pushes_.load(std::memory_order_relaxed);
  s.pulls = pulls_.load(std::memory_order_relaxed);
  s.pushed_bytes = pushed_bytes_.load(std::memory_order_relaxed);
  s.pulled_bytes = pulled_bytes_.load(std::memory_order_relaxed);
  return s;
}

int PsService::num_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

}  // namespace lockstep
