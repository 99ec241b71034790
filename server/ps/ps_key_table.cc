#include "server/ps/ps_key_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {

PsKeyTable::PsKeyTable(int capacity) : capacity_(std::max(1, capacity)) {}

absl::Status PsKeyTable::Set(uint64_t job, PsKeyShape shape) {
  if (shape.num_workers < 1 || shape.num_workers > PsShardRegistry::kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat("ps key ", job, ": num_workers is ",
                                                   shape.num_workers, ", expected 1..",
                                                   PsShardRegistry::kMaxWorkers));
  }
  if (shape.num_shards < 1 || shape.num_shards > PsShardRegistry::kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("ps key ", job, ": num_shards is ",
                                                   shape.num_shards, ", expected 1..",
                                                   PsShardRegistry::kMaxShards));
  }
  absl::MutexLock l(&mu_);
  auto it = keys_.find(job);
  if (it != keys_.end()) order_.erase(it->second.seq);
  const uint64_t seq = next_seq_++;
  keys_[job] = Entry{shape, seq};
  order_[seq] = job;
  if (static_cast<int>(keys_.size()) > capacity_) {  // the oldest goes
    keys_.erase(order_.begin()->second);
    order_.erase(order_.begin());
  }
  return absl::OkStatus();
}

void PsKeyTable::Forget(uint64_t job) {
  absl::MutexLock l(&mu_);
  auto it = keys_.find(job);
  if (it == keys_.end()) return;
  order_.erase(it->second.seq);
  keys_.erase(it);
}

absl::StatusOr<PsKeyShape> PsKeyTable::Wait(uint64_t job, absl::Time deadline) const {
  deadline = std::min(deadline, absl::Now() + kMaxWait);
  auto known = [this, job]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return keys_.count(job) > 0; };
  absl::MutexLock l(&mu_);
  if (!known() && waiters_ >= kMaxWaiters && absl::Now() < deadline) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job key ", job, " is not known yet and ", kMaxWaiters,
        " requests already wait for their keys; retry"));
  }
  ++waiters_;
  const bool found = mu_.AwaitWithDeadline(absl::Condition(&known), deadline);
  --waiters_;
  if (!found) {
    return absl::NotFoundError(absl::StrCat(
        "job key ", job,
        " was not started on this server by its coordinator (never, or it ended or "
        "regrouped since)"));
  }
  return keys_.at(job).shape;
}

int PsKeyTable::waiting() const {
  absl::MutexLock l(&mu_);
  return waiters_;
}

int PsKeyTable::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(keys_.size());
}

}  // namespace lockstep
