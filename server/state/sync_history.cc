#include "server/state/sync_history.h"

#include <algorithm>
#include <utility>

namespace lockstep {

SyncHistoryBuffer::SyncHistoryBuffer(SyncHistoryLimits limits) : limits_([&] {
  limits.recent = std::max<int64_t>(1, limits.recent);
  limits.max_mismatches = std::max<int64_t>(0, limits.max_mismatches);
  limits.max_runs = std::max<int64_t>(1, limits.max_runs);
  return limits;
}()) {}

void SyncHistoryBuffer::RestoreCounters(int64_t checked, int64_t mismatched,
                                        int64_t first_mismatch, int64_t last_step) {
  checked_ = checked;
  mismatched_ = mismatched;
  first_mismatch_ = first_mismatch;
  last_step_ = last_step;
}

void SyncHistoryBuffer::Add(v1::SyncCheck check) {
  ++checked_;
  if (!check.all_match()) {
    ++mismatched_;
    if (first_mismatch_ < 0) first_mismatch_ = check.step();
  }
  last_step_ = std::max(last_step_, check.step());
  window_.push_back(std::move(check));
  while (static_cast<int64_t>(window_.size()) > limits_.recent) {
    v1::SyncCheck oldest = std::move(window_.front());
    window_.pop_front();
    Evict(std::move(oldest));
  }
}

void SyncHistoryBuffer::Evict(v1::SyncCheck check) {
  if (!check.all_match()) {
    run_open_ = false;
    if (limits_.max_mismatches == 0) return;
    old_mismatches_.push_back(std::move(check));
    while (static_cast<int64_t>(old_mismatches_.size()) > limits_.max_mismatches) {
      old_mismatches_.pop_front();
    }
    return;
  }
  if (run_open_ && !runs_.empty()) {
    v1::SyncRun& run = runs_.back();
    run.set_last_step(check.step());
    run.set_checks(run.checks() + 1);
    run.set_last_majority_hash(check.majority_hash());
    return;
  }
  v1::SyncRun run;
  run.set_first_step(check.step());
  run.set_last_step(check.step());
  run.set_checks(1);
  run.set_last_majority_hash(check.majority_hash());
  runs_.push_back(std::move(run));
  run_open_ = true;
  while (static_cast<int64_t>(runs_.size()) > limits_.max_runs) {
    v1::SyncRun first = std::move(runs_.front());
    runs_.pop_front();
    v1::SyncRun& second = runs_.front();
    second.set_first_step(first.first_step());
    second.set_checks(second.checks() + first.checks());
  }
}

int64_t SyncHistoryBuffer::OldestFullStep() const {
  return window_.empty() ? -1 : window_.front().step();
}

const v1::SyncCheck& SyncHistoryBuffer::At(size_t i) const {
  return i < old_mismatches_.size() ? old_mismatches_[i] : window_[i - old_mismatches_.size()];
}

void SyncHistoryBuffer::Snapshot(int64_t max_entries, v1::SyncHistory* out) const {
  out->set_checked_steps(checked_);
  out->set_mismatched_steps(mismatched_);
  out->set_first_mismatch_step(first_mismatch_);
  out->set_next_step(-1);
  for (const v1::SyncRun& r : runs_) *out->add_runs() = r;
  const size_t n = held_checks();
  int64_t want = max_entries <= 0 ? kMaxReplyChecks : std::min(max_entries, kMaxReplyChecks);
  // Newest first until a cap is reached, then emit in step order.
  size_t begin = n;
  size_t bytes = 0;
  while (begin > 0 && want > 0) {
    const size_t size = At(begin - 1).ByteSizeLong();
    if (bytes + size > kMaxReplyBytes && begin < n) break;
    bytes += size;
    --begin;
    --want;
  }
  for (size_t i = begin; i < n; ++i) *out->add_checks() = At(i);
}

void SyncHistoryBuffer::Page(int64_t from_step, int64_t max_entries,
                             v1::SyncHistory* out) const {
  out->set_checked_steps(checked_);
  out->set_mismatched_steps(mismatched_);
  out->set_first_mismatch_step(first_mismatch_);
  const size_t n = held_checks();
  // First index with step >= from_step (steps increase along At).
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (At(mid).step() < from_step) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  int64_t want = max_entries <= 0 ? kMaxReplyChecks : std::min(max_entries, kMaxReplyChecks);
  size_t bytes = 0;
  size_t i = lo;
  for (; i < n && want > 0; ++i, --want) {
    const size_t size = At(i).ByteSizeLong();
    if (bytes + size > kMaxReplyBytes && i > lo) break;
    bytes += size;
    *out->add_checks() = At(i);
  }
  out->set_next_step(i < n ? At(i).step() : -1);
}

}  // namespace lockstep
