// SyncHistoryBuffer: one job's per-step replica hash checks in bounded
// memory, with exact counters.
//
// Contract:
//   * Add(check) takes checks in increasing step order (the sync checker
//     appends one per completed step).
//   * The newest `limits.recent` checks are kept in full. A check that
//     leaves that window is summarised: an all-matching check extends the
//     newest SyncRun (or starts one after a mismatch); a mismatch is kept
//     in full among at most `limits.max_mismatches` old mismatches (the
//     oldest are dropped beyond that, still counted). At most
//     `limits.max_runs` runs are kept: beyond that the two oldest merge
//     (SyncRun.checks then counts the all-matching steps inside the span).
//   * checked_steps / mismatched_steps / first_mismatch_step are exact for
//     every check ever added, whatever was summarised or dropped.
//   * Memory: O(recent + max_mismatches + max_runs) checks, independent of
//     the number of steps.
//   * Snapshot(max_entries) answers GetSyncHistory without paging: the
//     counters, every run, and the newest checks of (old mismatches ++
//     window), at most max_entries (0 = all) and never more than the reply
//     caps kMaxReplyChecks / kMaxReplyBytes, so a reply stays far below
//     gRPC's 4 MiB default message limit for any K.
//   * Page(from_step, max_entries) answers a paged request from memory: the
//     checks kept in full with step >= from_step in step order (same caps),
//     next_step = the step after the last one returned, or -1 when the page
//     reached the newest check. Steps older than OldestFullStep() that were
//     summarised are not in memory (a caller with a database reads them
//     there first).
// Not thread-safe: the owner's lock protects it.
#ifndef LOCKSTEP_SERVER_STATE_SYNC_HISTORY_H_
#define LOCKSTEP_SERVER_STATE_SYNC_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "proto/coordinator.pb.h"

namespace lockstep {

struct SyncHistoryLimits {
  int64_t recent = 4096;         // newest checks kept in full (>= 1)
  int64_t max_mismatches = 1024;  // older mismatches kept in full (>= 0)
  int64_t max_runs = 1024;        // summarised all-matching runs (>= 1)
};

class SyncHistoryBuffer {
 public:
  // Most checks and bytes (SyncCheck::ByteSizeLong summed) one reply holds.
  static constexpr int64_t kMaxReplyChecks = 4096;
  static constexpr size_t kMaxReplyBytes = 1 << 20;

  explicit SyncHistoryBuffer(SyncHistoryLimits limits = {});

  void Add(lockstep::v1::SyncCheck check);

  int64_t checked_steps() const { return checked_; }
  int64_t mismatched_steps() const { return mismatched_; }
  int64_t first_mismatch_step() const { return first_mismatch_; }
  // The oldest step whose check memory holds in the window (-1: none yet).
  int64_t OldestFullStep() const;
  // The newest step added (-1: none).
  int64_t LastStep() const { return last_step_; }
  // Restores the counters after a restart (checks themselves are re-added
  // or read from the database). Only before any Add.
  void RestoreCounters(int64_t checked, int64_t mismatched, int64_t first_mismatch,
                       int64_t last_step);

  // Fills counters, runs and checks (job_id is left to the caller).
  void Snapshot(int64_t max_entries, lockstep::v1::SyncHistory* out) const;
  void Page(int64_t from_step, int64_t max_entries, lockstep::v1::SyncHistory* out) const;

  // Checks held in full (window + old mismatches) and runs: for tests and
  // memory accounting.
  size_t held_checks() const { return window_.size() + old_mismatches_.size(); }
  size_t held_runs() const { return runs_.size(); }

 private:
  void Evict(lockstep::v1::SyncCheck check);
  // The i-th of (old_mismatches_ ++ window_).
  const lockstep::v1::SyncCheck& At(size_t i) const;

  const SyncHistoryLimits limits_;
  std::deque<lockstep::v1::SyncCheck> window_;
  std::deque<lockstep::v1::SyncCheck> old_mismatches_;
  std::deque<lockstep::v1::SyncRun> runs_;
  bool run_open_ = false;  // the newest run may be extended
  int64_t checked_ = 0;
  int64_t mismatched_ = 0;
  int64_t first_mismatch_ = -1;
  int64_t last_step_ = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STATE_SYNC_HISTORY_H_
