#include "server/sync_checker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

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

SyncChecker::SyncChecker(int k, SyncHistoryLimits limits)
    : k_(std::max(1, k)), history_(limits) {}

SyncChecker::SyncChecker(int k, int64_t max_history)
    : SyncChecker(k, SyncHistoryLimits{std::max<int64_t>(1, max_history),
                                       SyncHistoryLimits().max_mismatches,
                                       SyncHistoryLimits().max_runs}) {}

std::optional<CompletedStep> SyncChecker::Record(std::map<int64_t, Pending>* by_step, int rank,
                                                 int64_t step, StepReport report,
                                                 v1::SyncCheck* late) {
  auto it = by_step->try_emplace(step).first;
  Pending& pending = it->second;
  if (pending.reports.empty()) pending.reports.resize(k_);
  pending.reports[rank] = std::move(report);
  ++pending.count;
  if (pending.count < k_) return std::nullopt;
  Pending complete = std::move(pending);
  by_step->erase(it);
  return Complete(step, complete, late);
}

void SyncChecker::EraseThrough(std::map<int64_t, Pending>* by_step, int64_t step) {
  while (!by_step->empty() && by_step->begin()->first <= step) by_step->erase(by_step->begin());
}

std::optional<CompletedStep> SyncChecker::Add(int rank, int64_t step, StepReport report) {
  return Record(&pending_, rank, step, std::move(report), nullptr);
}

void SyncChecker::DropSettled(int64_t min_last_step) { EraseThrough(&pending_, min_last_step); }

void SyncChecker::ClearPending() {
  pending_.clear();
  CloseLate();
}

void SyncChecker::OpenLate(int64_t generation, std::vector<int64_t> last_steps) {
  late_pending_.clear();
  if (generation < 0 || static_cast<int>(last_steps.size()) != k_) {
    CloseLate();
    return;
  }
  late_generation_ = generation;
  late_last_ = std::move(last_steps);
}

void SyncChecker::CloseLate() {
  late_generation_ = -1;
  late_last_.clear();
  late_pending_.clear();
}

void SyncChecker::EndLate(int rank, int64_t step) {
  if (late_generation_ < 0 || rank < 0 || rank >= static_cast<int>(late_last_.size())) return;
  int64_t& last = late_last_[static_cast<size_t>(rank)];
  last = std::max(last, step);
  if (*std::min_element(late_last_.begin(), late_last_.end()) >= step) {
    CloseLate();
    return;
  }
  SettleLate();
}

void SyncChecker::SettleLate() {
  // A step at or below every rank's last late step can no longer complete.
  EraseThrough(&late_pending_, *std::min_element(late_last_.begin(), late_last_.end()));
}

std::optional<CompletedStep> SyncChecker::AddLate(int rank, int64_t step, StepReport report,
                                                  v1::SyncCheck* check) {
  if (late_generation_ < 0 || rank < 0 || rank >= static_cast<int>(late_last_.size()) ||
      step <= late_last_[static_cast<size_t>(rank)]) {
    return std::nullopt;
  }
  if (late_pending_.count(step) == 0 && late_pending_.size() >= kMaxLateSteps) {
    return std::nullopt;
  }
  late_last_[static_cast<size_t>(rank)] = step;
  std::optional<CompletedStep> out = Record(&late_pending_, rank, step, std::move(report), check);
  SettleLate();
  return out;
}

CompletedStep SyncChecker::Complete(int64_t step, const Pending& pending, v1::SyncCheck* late) {
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
  for (size_t r = 0; r < pending.reports.size(); ++r) {
    if (pending.reports[r]->repaired_from >= 0) {
      c.repaired.push_back(static_cast<int32_t>(r));
      c.repaired_from = pending.reports[r]->repaired_from;
    }
    if (pending.reports[r]->rolled_back_to >= 0) {
      c.rolled_back_to = pending.reports[r]->rolled_back_to;
      c.rolled_back_at = pending.reports[r]->rolled_back_at;
    }
  }
  // A rank's identity: weights and optimizer state.
  std::vector<std::string> ids;
  for (const std::optional<StepReport>& r : pending.reports) {
    ids.push_back(r->optimizer_hash.empty() ? r->hash : r->hash + "/" + r->optimizer_hash);
  }
  MajorityResult m = MajorityHash(ids);
  int holders = 0, representative = 0;
  for (int r = k_ - 1; r >= 0; --r) {
    if (ids[r] == m.majority) ++holders, representative = r;
  }
  c.majority = pending.reports[representative]->hash;
  c.differing = std::move(m.differing);
  if (!c.differing.empty() && 2 * holders <= k_) {
    c.no_majority = true;
    c.differing.clear();
    for (int r = 0; r < k_; ++r) c.differing.push_back(r);
  }
  if (!c.differing.empty()) {
    // The first differing rank against the majority's (no majority: rank 1
    // against rank 0, or whichever first differs from rank 0).
    int d = c.differing[0], ref = representative;
    if (c.no_majority) {
      ref = 0;
      d = 1;
      for (int r = 1; r < k_; ++r) {
        if (ids[r] != ids[0]) {
          d = r;
          break;
        }
      }
    }
    const StepReport& a = *pending.reports[d];
    const StepReport& b = *pending.reports[ref];
    if (a.hash == b.hash) {
      c.first_block = "optimizer state";
    } else if (a.blocks.empty() || a.blocks.size() != b.blocks.size()) {
      c.first_block = "weights";
    } else {
      for (size_t i = 0; i < a.blocks.size(); ++i) {
        if (a.blocks[i] != b.blocks[i]) {
          c.first_block = i < block_names_.size() ? block_names_[i]
                                                  : "weights block " + std::to_string(i);
          break;
        }
      }
      if (c.first_block.empty()) c.first_block = "weights";
    }
  }

  ++checked_;
  if (!c.differing.empty()) {
    ++mismatched_;
    if (first_mismatch_ < 0 || step < first_mismatch_) first_mismatch_ = step;
  }
  lockstep::v1::SyncCheck check;
  check.set_step(step);
  check.set_all_match(c.differing.empty());
  check.set_majority_hash(c.majority);
  for (int32_t r : c.differing) check.add_differing_ranks(r);
  const bool match = c.differing.empty();
  if (match && late == nullptr) {  // held without the K equal rank hashes
    history_.AddMatching(std::move(check), static_cast<int32_t>(c.hashes.size()));
    return c;
  }
  for (const std::string& h : c.hashes) check.add_rank_hashes(h);
  if (!match) {
    check.set_first_differing_block(c.first_block);
    check.set_no_majority(c.no_majority);
  }
  if (late == nullptr) {
    history_.Add(std::move(check));
    return c;
  }
  *late = check;
  history_.AddLate(std::move(check));
  return c;
}

absl::StatusOr<DivergencePolicy> ParseDivergencePolicy(const std::string& s) {
  if (s.empty() || s == "repair") return DivergencePolicy::kRepair;
  if (s == "halt") return DivergencePolicy::kHalt;
  return absl::InvalidArgumentError(absl::StrCat("expected repair or halt, got \"", s, "\""));
}

namespace {

// "rank 1", "ranks 0 and 2", "ranks 0, 1 and 3".
std::string Ranks(const std::vector<int32_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == ranks.size() ? " and " : ", ");
    absl::StrAppend(&out, ranks[i]);
  }
  return out;
}

}  // namespace

DivergenceVerdict SyncChecker::Judge(const CompletedStep& c, DivergencePolicy policy,
                                     int64_t total_steps) {
  DivergenceVerdict v;
  lockstep::v1::SyncCheck* newest = history_.MutableNewest();
  if (newest != nullptr && newest->step() != c.step) newest = nullptr;
  auto set_note = [&](std::string s) {
    if (newest != nullptr) newest->set_note(std::move(s));
  };
  if (rollback_from_ >= 0) {
    // No majority at step rollback_from_: every rank was to reload a
    // checkpoint in the next step's combine; this check must say so.
    rollback_from_ = -1;
    if (c.differing.empty() && c.rolled_back_to >= 0) {
      ++repairs_;
      set_note(absl::StrCat(
          "rolled back in the combine of step ", c.rolled_back_at,
          ": no majority, every rank reloaded the checkpoint of step ", c.rolled_back_to,
          c.rolled_back_at - 1 == c.rolled_back_to
              ? absl::StrCat(" and computed step ", c.rolled_back_to, " again")
              : absl::StrCat(" and computed steps ", c.rolled_back_to, " to ",
                             c.rolled_back_at - 1, " again")));
      v.action = DivergenceVerdict::kRepaired;
      return v;
    }
    if (c.differing.empty()) {
      set_note("the ranks did not roll back to a checkpoint");
      v.action = DivergenceVerdict::kFail;
      v.reason = absl::StrCat("replicas diverged at ", last_divergence_,
                              "; the ranks were to roll back to a checkpoint but reported step ",
                              c.step, " without one");
      return v;
    }
    // A mismatch again: judged below as a new divergence (the ranks bound
    // how often they roll back).
  }
  if (c.differing.empty()) {
    if (repair_.has_value() && !c.repaired.empty() && total_steps > 0 &&
        repair_->step >= total_steps) {
      ++repairs_;
      set_note(absl::StrCat("repaired in the combine of step ", c.step, ": ",
                            Ranks(c.repaired), " copied rank ", c.repaired_from,
                            "'s state and the step was computed again"));
      v.action = DivergenceVerdict::kRepaired;
      repair_.reset();
      return v;
    }
    if (!c.repaired.empty() && !(repair_.has_value() && c.step >= repair_->step)) {
      set_note(absl::StrCat("repaired in the combine of step ", c.step, ": ",
                            Ranks(c.repaired), " copied rank ", c.repaired_from,
                            "'s state and the step was computed again"));
    }
    if (repair_.has_value() && c.step >= repair_->step) {
      ++repairs_;
      set_note(absl::StrCat("repaired: ", Ranks(repair_->ranks), " copied rank ",
                            repair_->source, "'s state at step ", repair_->step,
                            " (divergence found at step ", repair_->detected, ")"));
      v.action = DivergenceVerdict::kRepaired;
      repair_.reset();
    }
    return v;
  }
  const bool one = c.differing.size() == 1;
  const std::string what =
      c.no_majority
          ? absl::StrCat(Ranks(c.differing), " differ, no majority (first differing block ",
                         c.first_block, ")")
          : absl::StrCat(Ranks(c.differing), one ? " differs" : " differ",
                         " from the majority in block ", c.first_block);
  const std::string divergence = absl::StrCat("step ", c.step, ": ", what);
  if (repair_.has_value()) {
    const bool within = std::all_of(c.differing.begin(), c.differing.end(), [&](int32_t r) {
      return std::find(repair_->ranks.begin(), repair_->ranks.end(), r) != repair_->ranks.end();
    });
    if (!c.no_majority && within && c.step < repair_->step) {
      set_note(absl::StrCat("awaiting repair at step ", repair_->step));
      v.action = DivergenceVerdict::kAwaitingRepair;
      return v;
    }
    last_divergence_ = divergence;
    set_note(absl::StrCat("divergence: ", what, "; the repair at step ", repair_->step,
                          " did not restore it"));
    v.action = DivergenceVerdict::kFail;
    v.reason = absl::StrCat("replicas diverged at ", divergence,
                            c.step >= repair_->step
                                ? absl::StrCat(" after the repair at step ", repair_->step)
                                : absl::StrCat(" while a repair at step ", repair_->step,
                                               " was pending"));
    return v;
  }
  last_divergence_ = divergence;
  if (policy == DivergencePolicy::kHalt) {
    set_note(absl::StrCat("divergence: ", what, "; halted (on_divergence=halt)"));
    v.action = DivergenceVerdict::kFail;
    v.reason = absl::StrCat("replicas diverged at ", divergence);
    return v;
  }
  if (c.no_majority && checkpoint_rollback_) {
    // Resolved by the ranks themselves in the next step's combine (they
    // see the same K identities): every rank reloads the last checkpoint
    // before the divergence (worker/job_runner.h).
    set_note(absl::StrCat("divergence: ", what, "; resolving from the last checkpoint"));
    rollback_from_ = c.step;
    v.action = DivergenceVerdict::kAwaitingRollback;
    return v;
  }
  if (c.no_majority) {
    set_note(absl::StrCat("divergence: ", what,
                          "; cannot repair: no majority and no checkpoint to resolve from"));
    v.action = DivergenceVerdict::kFail;
    v.reason = absl::StrCat(
        "replicas diverged at ", divergence,
        ": on_divergence=repair has no majority to copy from and no checkpoint to resolve "
        "from (the job writes none: set --checkpoint_dir and --checkpoint_every_steps)");
    return v;
  }
  PendingRepair p;
  p.detected = c.step;
  p.step = c.step + kRepairDistance;
  p.ranks = c.differing;
  for (int r = 0; r < k_; ++r) {
    if (std::find(c.differing.begin(), c.differing.end(), r) == c.differing.end()) {
      p.source = r;
      break;
    }
  }
  if (total_steps > 0 && p.step >= total_steps) {
    // No boundary left before the end: only the repair in the next step's
    // combine can fix it (a boundary at the end is never reached, so no
    // rank acts on the announcement); if it does not, the final hashes
    // disagree and ReportDone fails the job.
    p.step = total_steps;
    set_note(absl::StrCat("divergence: ", what,
                          "; too close to the end for a boundary repair (in-combine repair "
                          "only)"));
    repair_ = std::move(p);
    v.action = DivergenceVerdict::kRepairScheduled;
    return v;
  }
  set_note(absl::StrCat("divergence: ", what, "; repair at step ", p.step, " from rank ",
                        p.source));
  repair_ = std::move(p);
  v.action = DivergenceVerdict::kRepairScheduled;
  return v;
}

lockstep::v1::SyncHistory SyncChecker::History(uint64_t job_id, int64_t max_entries) const {
  lockstep::v1::SyncHistory h;
  h.set_job_id(job_id);
  h.set_checked_steps(checked_);
  h.set_mismatched_steps(mismatched_);
  h.set_first_mismatch_step(first_mismatch_);
  const int64_t n = max_entries <= 0 ? static_cast<int64_t>(history_.held_checks()) : max_entries;
  for (lockstep::v1::SyncCheck& c : history_.Newest(n)) *h.add_checks() = std::move(c);
  return h;
}

lockstep::v1::SyncHistory SyncChecker::Snapshot(uint64_t job_id, int64_t max_entries) const {
  lockstep::v1::SyncHistory h;
  history_.Snapshot(max_entries, &h);
  h.set_job_id(job_id);
  h.set_checked_steps(checked_);
  h.set_mismatched_steps(mismatched_);
  h.set_first_mismatch_step(first_mismatch_);
  return h;
}

}  // namespace lockstep
