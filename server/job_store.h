// JobStore: the coordinator's jobs — the records (JobRecord, one per job, by
// id), id allocation (1, 2, 3, ... in submission order), the strict-FIFO
// queue of PENDING job ids, lookups, and the JobStatus snapshot of a record.
//
// Bounded: PENDING and RUNNING jobs are all kept; of the finished ones
// (SUCCEEDED, FAILED, CANCELLED) at most limits.max_finished_jobs stay in
// memory. When a job's change (Changed) first shows it finished, its sync
// history shrinks to limits.finished_history and it joins the finished
// FIFO; EvictFinished (called by the Coordinator's Tick, never while a
// JobRecord pointer is held across it) erases the oldest finished records
// beyond the bound that its caller allows (no worker still bound to them).
// An evicted id answers NOT_FOUND "job 5 was evicted ..." (JobStore keeps
// only a count; a --state_dir database still has the job).
//
// Persistence hook: every change to a stored record ends with Changed(job)
// (the Coordinator calls it from its BumpLocked, i.e. for every change that
// watchers see: submit, start, each recorded report, each completed check,
// eval, weights published/evicted, the end). SetChangeHook installs a
// callback run there, under the Coordinator's mutex: it must not block or
// do I/O itself (queue the write and perform it after the mutex is
// released, as the event log does).
//
// Not thread-safe: the Coordinator owns one and calls it under its mutex.
// Records are owned by the store; a JobRecord pointer stays valid until
// EvictFinished erases that job (only finished jobs are ever erased).
#ifndef LOCKSTEP_SERVER_JOB_STORE_H_
#define LOCKSTEP_SERVER_JOB_STORE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "server/job_series.h"
#include "server/membership.h"
#include "server/rank_timing.h"
#include "server/sync_checker.h"
#include "server/watch_fanout.h"

namespace lockstep {

// One rank of a started job.
struct RankRecord {
  std::string worker_id, address, hostname;
  std::string data_address;  // the worker's, when the job started
  int64_t last_step = -1;    // last 0-based step recorded
  std::string last_hash;
  bool in_sync = true;
  absl::Time last_heartbeat;
  bool acknowledged = false;  // the worker started the job
  bool done = false;          // ReportDone ok
  int64_t done_generation = 0;  // the generation of that ReportDone
  std::string done_hash;
  double done_test_accuracy = 0, done_test_loss = 0;
  RankTiming timing;          // the last RankTiming::kSize reports' timing
  int64_t resident_bytes = 0; // the last nonzero one reported
  // Membership (server/membership.h): the generation this rank last said
  // it holds its replica for, and the step it holds (-1 = none).
  int64_t held_generation = -1, held_step = -1;
  // The rank holds a replica of the job's state: false for a joiner
  // (AddRank) until it reports a step (it trained, so it received the
  // state); only such ranks count as holders (membership.h).
  bool holds_replica = true;
  // Restored RUNNING after a coordinator restart without a committed
  // ReportDone: heartbeats of its worker saying it runs no job are asked
  // to resend the ReportDone (HeartbeatReply.resend_done_job_id) this many
  // times before the rank counts as having abandoned the job.
  int done_asks_left = 0;
  // The peer its combine waited for at its last heartbeat (-1 = none), for
  // how long it said (HeartbeatRequest.waiting_for_peer / waiting_ms), and
  // when that heartbeat came (a report is used only while fresh, never
  // extrapolated).
  int waiting_for = -1;
  int waiting_for_shard = -1;  // ps jobs: the shard instead (waiting_for_shard)
  absl::Duration waited;
  absl::Time waiting_reported;
};

struct JobRecord {
  uint64_t id = 0;
  lockstep::v1::JobSpec spec;
  lockstep::v1::JobState state = lockstep::v1::PENDING;
  std::string reason;
  int k = 0;
  std::vector<std::string> ps_addresses;
  // ps mode on the coordinator's own shard (no --ps_addresses when it
  // started): a coordinator restart loses its sums (the job regroups).
  bool coordinator_ps_shard = false;
  // The generation whose data-plane secret the --ps_addresses shards were
  // given (Coordinator::StartPsKeysLocked; -1 none, also after a restart:
  // it is given again, which a shard takes as a no-op).
  int64_t ps_keys_generation = -1;
  std::vector<RankRecord> ranks;  // empty until the job starts
  SyncChecker sync;               // pending step reports, checks, history
  int64_t steps_done = 0, epoch = 0, total_steps = 0, examples = 0;
  // When the first step completed and the examples done by then: the
  // throughput excludes start-up (data loading, connecting).
  absl::Time first_step_time = absl::InfinitePast();
  int64_t first_step_examples = 0;
  double loss = 0, examples_per_second = 0;
  double test_accuracy = 0, test_loss = 0;
  bool out_of_sync = false;
  // Non-finite gradients skipped (JobSpec.on_nonfinite = "skip"), counted
  // from rank 0's step reports: how many, the last such step, its ranks.
  int64_t skipped_steps = 0, last_skipped_step = -1;
  std::vector<int32_t> last_nonfinite_ranks;
  absl::Time submitted, started = absl::InfinitePast(), finished = absl::InfinitePast();
  std::string final_hash;
  JobWatch watch;     // version and state-change snapshots
  JobSeries series;   // bounded loss / eval / sync-strip history (status page)
  // Sync counters of the checks made before a coordinator restart (restored
  // from --state_dir); `sync` counts the checks since. Use the *Of helpers.
  int64_t restored_checked = 0, restored_mismatched = 0, restored_first_mismatch = -1;
  // Generation, regroup and shrink events (server/membership.h).
  MembershipState membership;
  // JobStore: the job is in the finished FIFO (its history was shrunk).
  bool finish_noted = false;
};

// Exact sync counters of a job, across coordinator restarts.
inline int64_t CheckedStepsOf(const JobRecord& j) { return j.restored_checked + j.sync.checked(); }
inline int64_t MismatchedStepsOf(const JobRecord& j) {
  return j.restored_mismatched + j.sync.mismatched();
}
// The smaller of two steps, -1 meaning none.
inline int64_t EarlierStep(int64_t a, int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return a < b ? a : b;
}
// The smallest: a late check (SyncChecker::AddLate) may be older than the
// mismatches counted before the restart.
inline int64_t FirstMismatchOf(const JobRecord& j) {
  return EarlierStep(j.restored_first_mismatch, j.sync.first_mismatch());
}

// SUCCEEDED, FAILED or CANCELLED.
bool IsTerminalJobState(lockstep::v1::JobState state);

// "job 42 not found".
std::string JobNotFoundMessage(uint64_t job_id);

// The JobStatus message of `job` at Clock time `now` (RankStatus.median_*
// from each rank's RankTiming; has_weights as given: the WeightsStore
// knows).
lockstep::v1::JobStatus JobStatusOf(const JobRecord& job, absl::Time now, bool has_weights);

struct JobStoreLimits {
  // A PENDING or RUNNING job's sync history (sync_history.h).
  SyncHistoryLimits running_history;
  // A finished job's: the newest 128 checks, 32 older events, 32 runs.
  SyncHistoryLimits finished_history = {128, 32, 32};
  // Finished jobs kept in memory (>= 1).
  int64_t max_finished_jobs = 1000;
};

class JobStore {
 public:
  explicit JobStore(JobStoreLimits limits = {});

  // A new PENDING job with the next id, queued at the back of the FIFO.
  JobRecord* Create(const lockstep::v1::JobSpec& spec, absl::Time now);
  JobRecord* Find(uint64_t id);
  const JobRecord* Find(uint64_t id) const;
  // NOT_FOUND "job 42 not found" for an unknown id, "job 5 was evicted
  // from memory (the coordinator keeps the newest 1000 finished jobs)" for
  // an evicted one.
  absl::StatusOr<JobRecord*> FindOrNotFound(uint64_t id);
  // The id was handed out and its record evicted.
  bool WasEvicted(uint64_t id) const;
  // Every job, ascending id.
  const std::map<uint64_t, std::unique_ptr<JobRecord>>& all() const { return jobs_; }

  // The FIFO of PENDING job ids (submission order).
  const std::deque<uint64_t>& pending() const { return pending_; }
  void PopPending() { pending_.pop_front(); }
  void RemovePending(uint64_t id);
  void ClearPending() { pending_.clear(); }

  // A job restored from --state_dir (coordinator restart): kept under its
  // id, queued at the back of the FIFO when PENDING; later ids continue
  // after the largest of `next_id` and every restored id.
  JobRecord* Restore(std::unique_ptr<JobRecord> job);
  void SetNextId(uint64_t next_id) { next_id_ = std::max(next_id_, next_id); }
  uint64_t next_id() const { return next_id_; }
  // A new SyncChecker as Create makes them (k ranks, this store's bound).
  SyncChecker NewSyncChecker(int k) const { return SyncChecker(k, limits_.running_history); }

  // The persistence hook (see the top of this file).
  void SetChangeHook(std::function<void(const JobRecord&)> hook) { hook_ = std::move(hook); }
  // Runs the hook; a job seen finished for the first time has its history
  // shrunk and joins the finished FIFO.
  void Changed(JobRecord& job) {
    if (hook_) hook_(job);
    NoteIfFinished(job);
  }

  // Erases the oldest finished jobs beyond limits.max_finished_jobs for
  // which may_evict(id) holds; returns their ids (ascending by finish).
  std::vector<uint64_t> EvictFinished(const std::function<bool(uint64_t)>& may_evict);
  int64_t evicted() const { return evicted_; }
  size_t finished_in_memory() const { return finished_.size(); }
  const JobStoreLimits& limits() const { return limits_; }

 private:
  void NoteIfFinished(JobRecord& job);

  const JobStoreLimits limits_;
  std::deque<uint64_t> finished_;  // finished ids in memory, in finishing order
  int64_t evicted_ = 0;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<JobRecord>> jobs_;
  std::deque<uint64_t> pending_;  // FIFO of PENDING ids
  std::function<void(const JobRecord&)> hook_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_JOB_STORE_H_
