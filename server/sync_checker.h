// SyncChecker: one job's per-step replica hash checks and its sync history.
//
// Each of the job's K ranks reports (ReportStep) its weights hash, loss,
// examples and epoch after step t. The checker keeps the reports of steps
// not yet reported by every rank (pending steps); when the K-th report of
// step t arrives it completes the check:
//   * the majority hash is the most common one (ties: the one of the lowest
//     rank); ranks with another hash differ (MajorityHash);
//   * a SyncCheck is appended to the history, which keeps the last
//     max_history checks; the counters (checked, mismatched,
//     first_mismatch) are exact beyond it;
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
// calls it under its mutex. Bounded: at most max_history checks; pending
// steps are bounded by how far the fastest rank runs ahead of the slowest.
#ifndef LOCKSTEP_SERVER_SYNC_CHECKER_H_
#define LOCKSTEP_SERVER_SYNC_CHECKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/coordinator.pb.h"

namespace lockstep {

// One rank's report of one step.
struct StepReport {
  std::string hash;  // lower-case hex
  double loss = 0;
  int64_t examples = 0;
  int64_t epoch = 0;
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
};

class SyncChecker {
 public:
  // k >= 1 ranks; max_history < 1 counts as 1.
  explicit SyncChecker(int k = 1, int64_t max_history = 1);

  // Records `rank`'s (in [0, k)) report of `step` (>= 0). When it is the
  // k-th report of that step, checks the step, appends it to the history
  // and returns it. Precondition: the caller has not recorded this rank's
  // report of this step before (see Duplicates above).
  std::optional<CompletedStep> Add(int rank, int64_t step, StepReport report);
  // Forgets the pending steps <= min_last_step.
  void DropSettled(int64_t min_last_step);
  // Forgets every pending step (the job ended).
  void ClearPending();

  int64_t checked() const { return checked_; }
  int64_t mismatched() const { return mismatched_; }
  int64_t first_mismatch() const { return first_mismatch_; }  // -1: none
  size_t history_size() const { return history_.size(); }
  size_t pending_steps() const { return pending_.size(); }

  // The counters and the most recent `max_entries` kept checks (0 = all
  // kept; precondition: >= 0), oldest first, as the SyncHistory message.
  lockstep::v1::SyncHistory History(uint64_t job_id, int64_t max_entries) const;

 private:
  struct Pending {
    std::vector<std::optional<StepReport>> reports;  // index = rank
    int count = 0;
  };
  struct StoredCheck {
    int64_t step = 0;
    std::string majority;
    std::vector<int32_t> differing;
    std::vector<std::string> rank_hashes;  // empty when all ranks matched
  };
  CompletedStep Complete(int64_t step, const Pending& pending);

  int k_;
  int64_t max_history_;
  std::map<int64_t, Pending> pending_;  // by step
  int64_t checked_ = 0, mismatched_ = 0, first_mismatch_ = -1;
  std::deque<StoredCheck> history_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_SYNC_CHECKER_H_
