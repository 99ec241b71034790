#include "server/sync_checker.h"

#include <algorithm>
#include <utility>

namespace lockstep {

MajorityResult MajorityHash(const std::vector<std::string>& hashes) {
  std::map<std::string, int> counts;
  for (const std::string& h : hashes) ++counts[h];
  MajorityResult out;
  out.majority = hashes.empty() ? std::string() : hashes[0];
  for (const std::string& h : hashes) {
    if (counts[h] > counts[out.majority]) out.majority = h;
  }
  for (size_t r = 0; r < hashes.size(); ++r) {
    if (hashes[r] != out.majority) out.differing.push_back(static_cast<int32_t>(r));
  }
  return out;
}

SyncChecker::SyncChecker(int k, int64_t max_history)
    : k_(std::max(1, k)), max_history_(std::max<int64_t>(1, max_history)) {}

std::optional<CompletedStep> SyncChecker::Add(int rank, int64_t step, StepReport report) {
  Pending& pending = pending_[step];
  if (pending.reports.empty()) pending.reports.resize(k_);
  pending.reports[rank] = std::move(report);
  ++pending.count;
  if (pending.count < k_) return std::nullopt;
  Pending complete = std::move(pending);
  pending_.erase(step);
  return Complete(step, complete);
}

void SyncChecker::DropSettled(int64_t min_last_step) {
  while (!pending_.empty() && pending_.begin()->first <= min_last_step) {
    pending_.erase(pending_.begin());
  }
}

void SyncChecker::ClearPending() { pending_.clear(); }

CompletedStep SyncChecker::Complete(int64_t step, const Pending& pending) {
  CompletedStep c;
  c.step = step;
  double loss_weighted = 0, loss_plain = 0;
  for (const std::optional<StepReport>& r : pending.reports) {
    c.hashes.push_back(r->hash);
    loss_weighted += r->loss * static_cast<double>(r->examples);
    loss_plain += r->loss;
    c.examples += r->examples;
    c.epoch = std::max(c.epoch, r->epoch);
  }
  c.loss = c.examples > 0 ? loss_weighted / static_cast<double>(c.examples)
                          : loss_plain / static_cast<double>(k_);
  MajorityResult m = MajorityHash(c.hashes);
  c.majority = std::move(m.majority);
  c.differing = std::move(m.differing);

  ++checked_;
  StoredCheck check;
  check.step = step;
  check.majority = c.majority;
  check.differing = c.differing;
  if (!c.differing.empty()) {
    ++mismatched_;
    if (first_mismatch_ < 0) first_mismatch_ = step;
    check.rank_hashes = c.hashes;
  }
  history_.push_back(std::move(check));
  while (static_cast<int64_t>(history_.size()) > max_history_) history_.pop_front();
  return c;
}

lockstep::v1::SyncHistory SyncChecker::History(uint64_t job_id, int64_t max_entries) const {
  lockstep::v1::SyncHistory h;
  h.set_job_id(job_id);
  h.set_checked_steps(checked_);
  h.set_mismatched_steps(mismatched_);
  h.set_first_mismatch_step(first_mismatch_);
  const size_t n = history_.size();
  const size_t first =
      max_entries <= 0 || static_cast<size_t>(max_entries) >= n ? 0 : n - max_entries;
  for (size_t i = first; i < n; ++i) {
    const StoredCheck& c = history_[i];
    lockstep::v1::SyncCheck* out = h.add_checks();
    out->set_step(c.step);
    out->set_all_match(c.differing.empty());
    out->set_majority_hash(c.majority);
    for (int32_t r : c.differing) out->add_differing_ranks(r);
    if (c.rank_hashes.empty()) {
      for (int r = 0; r < k_; ++r) out->add_rank_hashes(c.majority);
    } else {
      for (const std::string& hash : c.rank_hashes) out->add_rank_hashes(hash);
    }
  }
  return h;
}

}  // namespace lockstep
