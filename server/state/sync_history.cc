#include "server/state/sync_history.h"

#include <algorithm>
#include <utility>

#include "google/protobuf/io/coded_stream.h"

namespace lockstep {

namespace {

SyncHistoryLimits Clamp(SyncHistoryLimits limits) {
  limits.recent = std::max<int64_t>(1, limits.recent);
  limits.max_mismatches = std::max<int64_t>(0, limits.max_mismatches);
  limits.max_runs = std::max<int64_t>(1, limits.max_runs);
  return limits;
}

bool IsEvent(const v1::SyncCheck& c) { return !c.all_match() || !c.note().empty(); }

}  // namespace

SyncHistoryBuffer::SyncHistoryBuffer(SyncHistoryLimits limits) : limits_(Clamp(limits)) {}

void SyncHistoryBuffer::RestoreCounters(int64_t checked, int64_t mismatched,
                                        int64_t first_mismatch, int64_t last_step) {
  checked_ = checked;
  mismatched_ = mismatched;
  first_mismatch_ = first_mismatch;
  last_step_ = last_step;
}

SyncHistoryBuffer::Held SyncHistoryBuffer::Compact(v1::SyncCheck check) {
  Held h;
  const bool uniform =
      check.all_match() && check.rank_hashes_size() > 0 &&
      std::all_of(check.rank_hashes().begin(), check.rank_hashes().end(),
                  [&](const std::string& s) { return s == check.majority_hash(); });
  if (uniform) {
    h.ranks = check.rank_hashes_size();
    // Clear() would keep the strings allocated for reuse: free them.
    google::protobuf::RepeatedPtrField<std::string> none;
    check.mutable_rank_hashes()->Swap(&none);
  }
  h.check = std::move(check);
  return h;
}

void SyncHistoryBuffer::Expand(const Held& h, v1::SyncCheck* out) {
  *out = h.check;
  for (int32_t r = 0; r < h.ranks; ++r) out->add_rank_hashes(h.check.majority_hash());
}

size_t SyncHistoryBuffer::WireSize(const Held& h) {
  const size_t len = h.check.majority_hash().size();
  return h.check.ByteSizeLong() +
         static_cast<size_t>(h.ranks) *
             (1 + google::protobuf::io::CodedOutputStream::VarintSize64(len) + len);
}

void SyncHistoryBuffer::Count(const v1::SyncCheck& check) {
  ++checked_;
  if (!check.all_match()) {
    ++mismatched_;
    if (first_mismatch_ < 0 || check.step() < first_mismatch_) first_mismatch_ = check.step();
  }
}

void SyncHistoryBuffer::Add(v1::SyncCheck check) {
  Count(check);
  last_step_ = std::max(last_step_, check.step());
  window_.push_back(Compact(std::move(check)));
  Trim();
}

void SyncHistoryBuffer::AddMatching(v1::SyncCheck check, int32_t ranks) {
  ++checked_;
  last_step_ = std::max(last_step_, check.step());
  Held h;
  h.check = std::move(check);
  h.check.set_all_match(true);
  h.ranks = ranks;
  window_.push_back(std::move(h));
  Trim();
}

void SyncHistoryBuffer::AddLate(v1::SyncCheck check) {
  const int64_t step = check.step();
  if (step > last_step_) {
    Add(std::move(check));
    return;
  }
  Count(check);
  if (!window_.empty() && step < window_.front().check.step()) return;  // only counted
  auto at = std::upper_bound(window_.begin(), window_.end(), step,
                             [](int64_t s, const Held& h) { return s < h.check.step(); });
  window_.insert(at, Compact(std::move(check)));
  Trim();
}

v1::SyncCheck* SyncHistoryBuffer::MutableNewest() {
  return window_.empty() ? nullptr : &window_.back().check;
}

void SyncHistoryBuffer::SetLimits(SyncHistoryLimits limits) {
  limits_ = Clamp(limits);
  Trim();
  while (static_cast<int64_t>(old_events_.size()) > limits_.max_mismatches) {
    old_events_.pop_front();
  }
  while (static_cast<int64_t>(runs_.size()) > limits_.max_runs) {
    v1::SyncRun first = std::move(runs_.front());
    runs_.pop_front();
    runs_.front().set_first_step(first.first_step());
    runs_.front().set_checks(runs_.front().checks() + first.checks());
  }
  window_.shrink_to_fit();
  old_events_.shrink_to_fit();
  runs_.shrink_to_fit();
}

void SyncHistoryBuffer::Trim() {
  while (static_cast<int64_t>(window_.size()) > limits_.recent) {
    Held oldest = std::move(window_.front());
    window_.pop_front();
    Evict(std::move(oldest));
  }
}

void SyncHistoryBuffer::Evict(Held held) {
  const v1::SyncCheck& check = held.check;
  if (IsEvent(check)) {
    run_open_ = false;
    if (limits_.max_mismatches == 0) return;
    old_events_.push_back(std::move(held));
    while (static_cast<int64_t>(old_events_.size()) > limits_.max_mismatches) {
      old_events_.pop_front();
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
  return window_.empty() ? -1 : window_.front().check.step();
}

const SyncHistoryBuffer::Held& SyncHistoryBuffer::At(size_t i) const {
  return i < old_events_.size() ? old_events_[i] : window_[i - old_events_.size()];
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
    const size_t size = WireSize(At(begin - 1));
    if (bytes + size > kMaxReplyBytes && begin < n) break;
    bytes += size;
    --begin;
    --want;
  }
  for (size_t i = begin; i < n; ++i) Expand(At(i), out->add_checks());
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
    if (At(mid).check.step() < from_step) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  int64_t want = max_entries <= 0 ? kMaxReplyChecks : std::min(max_entries, kMaxReplyChecks);
  size_t bytes = 0;
  size_t i = lo;
  for (; i < n && want > 0; ++i, --want) {
    const size_t size = WireSize(At(i));
    if (bytes + size > kMaxReplyBytes && i > lo) break;
    bytes += size;
    Expand(At(i), out->add_checks());
  }
  out->set_next_step(i < n ? At(i).check.step() : -1);
}

int64_t SyncHistoryBuffer::Summary(int64_t from_step, int64_t to_step,
                                   v1::SyncHistory* out) const {
  for (const v1::SyncRun& r : runs_) {
    if (r.last_step() >= from_step && r.first_step() < to_step) *out->add_runs() = r;
  }
  int64_t added = 0;
  size_t bytes = 0;
  for (const Held& h : old_events_) {
    const int64_t s = h.check.step();
    if (s < from_step || s >= to_step) continue;
    const size_t size = WireSize(h);
    if (added >= kMaxReplyChecks || (added > 0 && bytes + size > kMaxReplyBytes)) break;
    bytes += size;
    Expand(h, out->add_checks());
    ++added;
  }
  return added;
}

std::vector<v1::SyncCheck> SyncHistoryBuffer::Newest(int64_t n) const {
  const size_t held = held_checks();
  const size_t take = n <= 0 ? 0 : std::min(held, static_cast<size_t>(n));
  std::vector<v1::SyncCheck> out(take);
  for (size_t i = 0; i < take; ++i) Expand(At(held - take + i), &out[i]);
  return out;
}

size_t SyncHistoryBuffer::SpaceUsed() const {
  size_t bytes = sizeof(*this);
  for (const Held& h : window_) bytes += h.check.SpaceUsedLong() + sizeof(Held) - sizeof(h.check);
  for (const Held& h : old_events_) {
    bytes += h.check.SpaceUsedLong() + sizeof(Held) - sizeof(h.check);
  }
  for (const v1::SyncRun& r : runs_) bytes += r.SpaceUsedLong();
  return bytes;
}

}  // namespace lockstep
