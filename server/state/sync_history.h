// SyncHistoryBuffer: one job's per-step replica hash checks in bounded
// memory, with exact counters.
//
// Contract:
//   * Add(check) takes checks in increasing step order (the sync checker
//     appends one per completed step). An all-matching check is held
//     compactly (its rank hashes, all equal to the majority hash, are not
//     stored; they are filled in again on the way out, with the number of
//     ranks the check had).
//   * The newest `limits.recent` checks are kept in full (the window). A
//     check that leaves the window is summarised: an all-matching check
//     without a note extends the newest SyncRun (or starts one after an
//     event); an *event* — a mismatch, or any check with a note (a
//     divergence, awaiting repair, repaired) — is kept in full among at most
//     `limits.max_mismatches` old events (the oldest are dropped beyond
//     that, still counted). At most `limits.max_runs` runs are kept: beyond
//     that the two oldest merge (SyncRun.checks then counts the
//     all-matching steps inside the span).
//   * checked_steps / mismatched_steps / first_mismatch_step are exact for
//     every check ever added, whatever was summarised or dropped.
//   * Memory: O(recent + max_mismatches + max_runs) checks, independent of
//     the number of steps (SpaceUsed() measures it). SetLimits shrinks a
//     finished job's buffer to smaller limits.
//   * Snapshot(max_entries) answers GetSyncHistory without paging: the
//     counters, every run, and the newest checks of (old events ++ window),
//     at most max_entries (0 = all) and never more than the reply caps
//     kMaxReplyChecks / kMaxReplyBytes, so a reply stays far below gRPC's
//     4 MiB default message limit for any K.
//   * Page(from_step, max_entries) answers a paged request from memory: the
//     checks kept in full with step >= from_step in step order (same caps),
//     next_step = the step after the last one returned, or -1 when the page
//     reached the newest check. Steps older than OldestFullStep() that were
//     summarised are not in memory (a caller with a database reads them
//     there first); Summary(from, to) gives what memory knows of them.
// Not thread-safe: the owner's lock protects it.
#ifndef LOCKSTEP_SERVER_STATE_SYNC_HISTORY_H_
#define LOCKSTEP_SERVER_STATE_SYNC_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "proto/coordinator.pb.h"

namespace lockstep {

struct SyncHistoryLimits {
  int64_t recent = 4096;          // newest checks kept in full (>= 1)
  int64_t max_mismatches = 1024;  // older events (mismatches, noted checks) kept in full (>= 0)
  int64_t max_runs = 1024;        // summarised all-matching runs (>= 1)
};

class SyncHistoryBuffer {
 public:
  // Most checks and bytes (SyncCheck::ByteSizeLong summed) one reply holds.
  static constexpr int64_t kMaxReplyChecks = 4096;
  static constexpr size_t kMaxReplyBytes = 1 << 20;

  explicit SyncHistoryBuffer(SyncHistoryLimits limits = {});

  void Add(lockstep::v1::SyncCheck check);
  // The same for an all-matching check given without its rank hashes:
  // `ranks` ranks, each with check.majority_hash() (no copies made).
  void AddMatching(lockstep::v1::SyncCheck check, int32_t ranks);
  // A check that may be older than checks already added (a closed
  // generation's step reported again after a coordinator restart,
  // SyncChecker::AddLate): counted as Add counts (first_mismatch_step is
  // the smallest); held in step order when it is newer than the window's
  // oldest check (or the window is empty), else only counted (a caller with
  // a database stores it there; pages read steps older than the window
  // from the database). Precondition: no check of its step was added.
  void AddLate(lockstep::v1::SyncCheck check);
  // The newest check added (to note what it meant); nullptr when none.
  lockstep::v1::SyncCheck* MutableNewest();
  // New limits (e.g. smaller ones once the job finished): the window,
  // the kept events and the runs are cut down to them at once.
  void SetLimits(SyncHistoryLimits limits);
  const SyncHistoryLimits& limits() const { return limits_; }

  int64_t checked_steps() const { return checked_; }
  int64_t mismatched_steps() const { return mismatched_; }
  int64_t first_mismatch_step() const { return first_mismatch_; }
  // The oldest step whose check memory holds in the window (-1: none yet).
  // Every check added with a step >= it is in the window.
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
  // What memory still knows of steps in [from_step, to_step) that left the
  // window: the runs that overlap it (appended to out->runs) and the kept
  // events inside it (appended to out->checks, at most the reply caps).
  // Returns the number of events appended.
  int64_t Summary(int64_t from_step, int64_t to_step, lockstep::v1::SyncHistory* out) const;
  // The newest n checks held (events and window), oldest first, rank
  // hashes filled in; n is capped at the number held.
  std::vector<lockstep::v1::SyncCheck> Newest(int64_t n) const;

  // Checks held in full (window + old events) and runs: for tests and
  // memory accounting.
  size_t held_checks() const { return window_.size() + old_events_.size(); }
  size_t held_runs() const { return runs_.size(); }
  // Bytes held (the checks' and runs' SpaceUsedLong plus the deques'
  // per-entry overhead): what this buffer costs in memory.
  size_t SpaceUsed() const;

 private:
  // A check as held: an all-matching one without its rank hashes (`ranks`
  // > 0 says how many ranks, each with the majority hash).
  struct Held {
    lockstep::v1::SyncCheck check;
    int32_t ranks = 0;
  };
  static Held Compact(lockstep::v1::SyncCheck check);
  static void Expand(const Held& h, lockstep::v1::SyncCheck* out);
  static size_t WireSize(const Held& h);
  // Counts a check (checked, mismatched, the smallest mismatching step).
  void Count(const lockstep::v1::SyncCheck& check);
  void Trim();
  void Evict(Held held);
  // The i-th of (old_events_ ++ window_).
  const Held& At(size_t i) const;

  SyncHistoryLimits limits_;
  std::deque<Held> window_;
  std::deque<Held> old_events_;
  std::deque<lockstep::v1::SyncRun> runs_;
  bool run_open_ = false;  // the newest run may be extended
  int64_t checked_ = 0;
  int64_t mismatched_ = 0;
  int64_t first_mismatch_ = -1;
  int64_t last_step_ = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STATE_SYNC_HISTORY_H_
