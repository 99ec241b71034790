// SyncChecker: one job's per-step replica hash checks and its sync history.
//
// Each of the job's K ranks reports (ReportStep) its weights hash, loss,
// examples and epoch after step t. The checker keeps the reports of steps
// not yet reported by every rank (pending steps); when the K-th report of
// step t arrives it completes the check:
//   * the majority hash is the most common one (ties: the one of the lowest
//     rank); ranks with another hash differ (MajorityHash);
//   * a SyncCheck is appended to the history, a SyncHistoryBuffer
//     (server/state/sync_history.h): the newest `limits.recent` checks in
//     full, older all-matching steps summarised as SyncRuns, older events
//     (mismatches, divergence / repair notes) kept in full up to a bound;
//     the counters (checked, mismatched, first_mismatch) are exact;
//   * the step's loss is the examples-weighted mean of the ranks' losses,
//     sum(loss_r * examples_r) / sum(examples_r) (the plain mean when every
//     rank reports 0 examples), its examples the sum, its epoch the largest.
// What a mismatch means for the job (FAILED, "replicas diverged ...") is the
// Coordinator's decision, not the checker's.
//
// Duplicates: the caller records a rank's report only when its step is
// larger than the last one recorded for that rank (each rank's steps arrive
// in increasing order; the first report wins) and then calls
// DropSettled(min over ranks of their last step): a pending step at or
// below it can no longer complete.
//
// Not thread-safe: the Coordinator holds one per job (in its JobRecord) and
// calls it under its mutex. Bounded: the history holds at most
// recent + max_mismatches checks and max_runs runs whatever the number of
// steps (FinishHistory shrinks a finished job's to smaller limits);
// pending steps are bounded by how far the fastest rank runs ahead of the
// slowest.
#ifndef LOCKSTEP_SERVER_SYNC_CHECKER_H_
#define LOCKSTEP_SERVER_SYNC_CHECKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "server/state/sync_history.h"

namespace lockstep {

// One rank's report of one step.
struct StepReport {
  std::string hash;  // lower-case hex
  double loss = 0;
  int64_t examples = 0;
  int64_t epoch = 0;
  std::string optimizer_hash;   // lower-case hex; "" = not reported
  std::vector<uint64_t> blocks; // per-tensor hashes of the weights (may be empty)
  int repaired_from = -1;       // this rank copied that rank's state before the step
  // No majority, resolved from a checkpoint (ReportStepRequest.rolled_back):
  // found in the combine of step rolled_back_at, every rank reloaded the
  // checkpoint of step rolled_back_to. -1 = none.
  int64_t rolled_back_to = -1, rolled_back_at = -1;
};

struct MajorityResult {
  std::string majority;            // "" for no hashes
  std::vector<int32_t> differing;  // ascending ranks whose hash is not it
};
// The most common of `hashes` (index = rank; ties: the one held by the
// lowest rank) and the ranks whose hash differs from it.
MajorityResult MajorityHash(const std::vector<std::string>& hashes);

// A step every rank reported, as checked.
struct CompletedStep {
  int64_t step = 0;
  std::vector<std::string> hashes;  // index = rank
  std::string majority;
  std::vector<int32_t> differing;   // empty: all ranks match
  double loss = 0;                  // examples-weighted mean (see above)
  int64_t examples = 0;             // sum over ranks
  int64_t epoch = 0;                // max over ranks
  // Divergence (issue 10): a rank's identity is its weights hash AND its
  // optimizer hash. No identity held by more than half of the ranks: no
  // majority, and `differing` lists every rank.
  bool no_majority = false;
  // The first differing rank's first block that differs from the
  // majority's (a tensor name, "optimizer state", or "weights" when no
  // block hashes were reported); "" when all match.
  std::string first_block;
  // Ranks that copied a peer's state before this step, and from whom.
  std::vector<int32_t> repaired;
  int repaired_from = -1;
  // A rank's report says the ranks rolled back to a checkpoint (StepReport).
  int64_t rolled_back_to = -1, rolled_back_at = -1;
};

// What a job does about a divergence (JobSpec.on_divergence).
enum class DivergencePolicy { kRepair, kHalt };
// "" / "repair" -> kRepair, "halt" -> kHalt; else InvalidArgument "expected
// repair or halt, got \"x\"".
absl::StatusOr<DivergencePolicy> ParseDivergencePolicy(const std::string& s);

// How far ahead of the step whose check found a divergence the repair's
// boundary lies: 2 L + 2 with L = kReportLag = 2 steps a worker may run
// ahead of its replies. Every rank's reply to its report of step t + L + 1
// comes after the check of t (that step cannot complete before the last
// rank to report t has its reply), and a rank starts step t + 2L + 2 only
// with that reply in: so every rank hears of the repair before it reaches
// the boundary.
inline constexpr int64_t kRepairDistance = 6;

// The decision on a completed check (Judge).
struct DivergenceVerdict {
  enum Action {
    kOk,
    kFail,
    kRepairScheduled,
    kAwaitingRepair,
    kRepaired,
    kAwaitingRollback,  // no majority: the ranks roll back to a checkpoint
  } action = kOk;
  std::string reason;  // kFail: the job's reason
};

// A scheduled repair: at boundary `step` the `ranks` copy `source`'s state.
struct PendingRepair {
  int64_t detected = 0;  // the step whose check found it
  int64_t step = 0;      // the boundary
  int source = -1;
  std::vector<int32_t> ranks;
};

class SyncChecker {
 public:
  // k >= 1 ranks; the history's bounds (sync_history.h).
  explicit SyncChecker(int k = 1, SyncHistoryLimits limits = {});
  // The same with limits.recent = max_history (< 1 counts as 1).
  SyncChecker(int k, int64_t max_history);

  // Records `rank`'s (in [0, k)) report of `step` (>= 0). When it is the
  // k-th report of that step, checks the step, appends it to the history
  // and returns it. Precondition: the caller has not recorded this rank's
  // report of this step before (see Duplicates above).
  std::optional<CompletedStep> Add(int rank, int64_t step, StepReport report);
  // Forgets the pending steps <= min_last_step.
  void DropSettled(int64_t min_last_step);
  // Forgets every pending step, late ones too (the job ended).
  void ClearPending();
  // The job's group changed (server/membership.h): `k` ranks from now on;
  // pending steps and a scheduled repair are forgotten, counters and
  // history kept. Late reports (below) stay open while k is unchanged.
  void Regroup(int k) {
    k_ = k < 1 ? 1 : k;
    pending_.clear();
    repair_.reset();
    rollback_from_ = -1;
    if (static_cast<int>(late_last_.size()) != k_) CloseLate();
  }

  // Late reports: a closed generation's reports of steps this checker never
  // completed, taken after the group moved on. The coordinator opens them
  // when a restart regroups a ps job on its own shard (coordinator.h,
  // "State database and restarts"): the ranks continue in a new generation
  // with the same ranks, while each worker resends its kept reports of the
  // old one (worker/report_replay.h) for the steps the database had not
  // committed. `last_steps` (index = rank, one per rank of the current K)
  // are the ranks' last recorded steps; `generation` is the closed one.
  void OpenLate(int64_t generation, std::vector<int64_t> last_steps);
  void CloseLate();
  // `rank` sends no more late reports up to `step` (its first report of
  // the current generation came: a worker resends its kept reports before
  // anything new). Once every rank is past `step` the late reports end.
  void EndLate(int rank, int64_t step);
  // The generation whose late reports are taken; -1 when none.
  int64_t late_generation() const { return late_generation_; }
  // `rank`'s last recorded late step (precondition: late reports open and
  // 0 <= rank < k).
  int64_t late_last_step(int rank) const { return late_last_[static_cast<size_t>(rank)]; }
  // Records `rank`'s late report of `step`; one at or below the rank's last
  // late step is a duplicate and dropped, and so is a new step beyond
  // kMaxLateSteps pending. When it is the K-th report of that step, the
  // step is checked as Add would (no Judge: the job has moved on), counted
  // (first_mismatch is the smallest mismatching step) and put in the
  // history in step order (SyncHistoryBuffer::AddLate); returns it and sets
  // *check to the SyncCheck, which the caller stores itself (History's
  // newest entries need not be it).
  std::optional<CompletedStep> AddLate(int rank, int64_t step, StepReport report,
                                       lockstep::v1::SyncCheck* check);
  static constexpr size_t kMaxLateSteps = 8192;
  // The job writes checkpoints at intervals (JobSpec checkpoint_dir with
  // checkpoint_every_steps or _seconds) and K > 1, so a divergence without
  // a majority under repair is resolved by every rank reloading the last
  // checkpoint before it (worker/job_runner.h) instead of failing the job.
  void set_checkpoint_rollback(bool on) { checkpoint_rollback_ = on; }

  // The names of the blocks of StepReport::blocks (kept from the first
  // report that has them).
  void SetBlockNames(std::vector<std::string> names) {
    if (block_names_.empty()) block_names_ = std::move(names);
  }
  // Decides what the check `c` (just completed by Add, so the last history
  // entry) means under `policy` for a job of `total_steps` steps (0 =
  // unknown), notes it in that history entry, and keeps the repair state:
  //   all match, no repair pending            -> kOk
  //   all match, repair pending, step >= its boundary
  //                                           -> kRepaired ("repaired: ...")
  //   mismatch, halt                          -> kFail "replicas diverged at
  //       step 3: rank 1 differs from the majority in block W0"
  //   mismatch, no majority, without checkpoint rollback
  //                                           -> kFail "...: ranks 0 and 1
  //       differ, no majority ...: ... and no checkpoint to resolve from"
  //   mismatch, no majority, repair, with checkpoint rollback
  //                                           -> kAwaitingRollback; the next
  //       check must say the ranks rolled back (StepReport.rolled_back_*)
  //       and match: kRepaired ("rolled back ..."), else kFail
  //   mismatch, repair, none pending          -> kRepairScheduled at
  //       step + kRepairDistance, source = the lowest majority rank (kFail
  //       when that boundary is past the job's last step)
  //   mismatch within the pending repair's ranks before its boundary
  //                                           -> kAwaitingRepair
  //   anything else while a repair is pending -> kFail
  DivergenceVerdict Judge(const CompletedStep& c, DivergencePolicy policy, int64_t total_steps);
  const std::optional<PendingRepair>& pending_repair() const { return repair_; }
  int64_t repairs() const { return repairs_; }
  const std::string& last_divergence() const { return last_divergence_; }

  int64_t checked() const { return checked_; }
  int64_t mismatched() const { return mismatched_; }
  int64_t first_mismatch() const { return first_mismatch_; }  // -1: none
  // Checks held in full (window + old events).
  size_t history_size() const { return history_.held_checks(); }
  size_t pending_steps() const { return pending_.size(); }
  const SyncHistoryBuffer& history() const { return history_; }
  // The job ended: its history keeps only `limits` from now on.
  void FinishHistory(SyncHistoryLimits limits) { history_.SetLimits(limits); }

  // The counters and the most recent `max_entries` checks held in full (0 =
  // all held; precondition: >= 0), oldest first, as the SyncHistory
  // message; no runs, no reply caps (the state database's feed).
  lockstep::v1::SyncHistory History(uint64_t job_id, int64_t max_entries) const;
  // GetSyncHistory's answer from memory: the counters, every summarised
  // run, and the newest max_entries (0 = as many as fit) checks held in
  // full, within the reply caps (SyncHistoryBuffer::Snapshot).
  lockstep::v1::SyncHistory Snapshot(uint64_t job_id, int64_t max_entries) const;

 private:
  struct Pending {
    std::vector<std::optional<StepReport>> reports;  // index = rank
    int count = 0;
  };
  // Checks a step every rank reported and counts it; the SyncCheck made of
  // it goes to the history (Add) or, with `late` set, to *late and to the
  // history in step order (AddLate).
  CompletedStep Complete(int64_t step, const Pending& pending,
                         lockstep::v1::SyncCheck* late = nullptr);
  // Records `rank`'s report of `step` among `by_step` (pending_ or
  // late_pending_); at its K-th report the step is completed (Complete,
  // `late` as there) and leaves `by_step`.
  std::optional<CompletedStep> Record(std::map<int64_t, Pending>* by_step, int rank,
                                      int64_t step, StepReport report,
                                      lockstep::v1::SyncCheck* late);
  // Forgets the steps of `by_step` at or below `step`.
  static void EraseThrough(std::map<int64_t, Pending>* by_step, int64_t step);
  // Forgets the late steps that can no longer complete.
  void SettleLate();

  int k_;
  std::map<int64_t, Pending> pending_;  // by step
  int64_t checked_ = 0, mismatched_ = 0, first_mismatch_ = -1;
  SyncHistoryBuffer history_;
  std::vector<std::string> block_names_;
  std::optional<PendingRepair> repair_;
  int64_t repairs_ = 0;
  std::string last_divergence_;
  bool checkpoint_rollback_ = false;
  int64_t rollback_from_ = -1;  // the no-majority check awaiting a rollback
  // Late reports (OpenLate): -1 = closed.
  int64_t late_generation_ = -1;
  std::vector<int64_t> late_last_;       // index = rank
  std::map<int64_t, Pending> late_pending_;  // by step, at most kMaxLateSteps
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_SYNC_CHECKER_H_
