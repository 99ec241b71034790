// StateDb: the coordinator's durable state in SQLite under --state_dir
// (file DIR/coordinator.db, WAL mode, synchronous=NORMAL: every committed
// transaction survives SIGKILL of the process; an OS crash may lose the
// last ones). Schema version kSchemaVersion in table meta; a database with
// another version is refused with an error naming the file and both
// versions, except version 1 (the schema before membership, results and
// weights were stored), which Open migrates in place to version 2 (adds the
// new tables; v1 jobs load without a stored membership). DIR/LOCK is flock()ed for the life of the StateDb, so a second
// coordinator on the same directory fails at Open (the kernel drops the
// lock when a killed process dies).
//
// What is stored:
//   meta        next_worker_seq, next_job_id, incarnation (group keys)
//   workers     seq, id, address, data_address, hostname, pid
//   worker_limits seq -> the worker's advertised max_job_memory_bytes
//   jobs        id, state, JobStatus (spec, state, reason, progress, ranks
//               with their workers, counters, final hash), first mismatch
//               step, and an opaque `extra` blob for the coordinator
//   sync_checks (job, step) -> SyncCheck, every check (detail the bounded
//               in-memory history summarises), at most
//               options.max_checks_per_job per job (then mismatches only)
//   job_membership, job_members, membership_events (v2)
//               a job's current generation (world, regrouping, decided
//               start step and source rank), its members by rank (worker
//               id, addresses, host, held generation/step) and its
//               membership events; written with the job row (same
//               transaction) when StoredJob.membership is set
//   job_series  (v2) an opaque blob per job (the coordinator's curves),
//               written with the job row when StoredJob.series is set
//   job_weights (v2) a job's final weights (total floats, block names and
//               shapes, the float32 bytes), until DeleteWeights
//
// Writes never block the caller on SQLite: Put*/AddSyncCheck only copy into
// a queue under a short internal lock; a writer thread commits what is
// queued in one transaction every options.flush_interval (or sooner when
// many checks are queued, or on Flush). Job and worker puts coalesce (the
// newest value per key wins), so the queue holds at most one entry per job
// and worker plus at most options.max_queued_checks checks; checks beyond
// that are dropped and counted (Stats.dropped_checks; the job's counters,
// stored with the job, stay exact). Callers may hold their own mutex while
// calling these (no I/O happens in them); they never wait for the disk.
//
// Reads (Load, ReadSyncChecks, ReadJob*) use a second connection (WAL readers do not
// block the writer). Load is meant for start-up, before any write.
// Thread-safe.
#ifndef LOCKSTEP_SERVER_STATE_STATE_DB_H_
#define LOCKSTEP_SERVER_STATE_STATE_DB_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

struct sqlite3;

namespace lockstep {

struct StoredWorker {
  int64_t seq = 0;  // "w-<seq>"
  std::string id;
  std::string address;
  std::string data_address;
  std::string hostname;
  int64_t pid = 0;
  // Advertised at registration (RegisterWorkerRequest.max_job_memory_bytes;
  // 0 = none), so SubmitJob's check holds for restored workers too (table
  // worker_limits: a database without it reads 0).
  int64_t max_job_memory_bytes = 0;
};

// One rank of a job's current generation (job_members).
struct StoredMember {
  std::string worker_id, address, data_address, hostname;
  int64_t held_generation = -1, held_step = -1;
};

// A job's membership (server/membership.h's MembershipState and the ranks).
struct StoredMembership {
  int64_t generation = 0;
  int32_t world = 0;
  bool regrouping = false;
  int64_t start_step = -1;
  int32_t source_rank = -1;
  std::vector<StoredMember> members;                  // index = rank; "" = vacant
  std::vector<lockstep::v1::MembershipEvent> events;  // oldest first
  // on_worker_lost = "wait": since when the job waits for a worker (unix
  // seconds, 0 = not waiting) and why (the first loss).
  double waiting_since_unix_s = 0;
  std::string waiting_for;
};

// A job's final weights (job_weights). `data` is shared, not copied: the
// writer thread reads it (total * 4 bytes, float32 little-endian).
struct StoredWeights {
  uint64_t job_id = 0;
  int64_t total = 0;
  std::vector<std::string> block_names;
  std::vector<int64_t> block_shapes;
  std::shared_ptr<const std::string> data;
};

struct StoredJob {
  lockstep::v1::JobStatus status;  // status.job_id is the key
  int64_t first_mismatch_step = -1;
  int64_t last_checked_step = -1;
  std::string extra;  // opaque to StateDb
  // Filled by Load from the stored sync checks (committed more often than
  // the job row): how many, how many mismatched, the first mismatched step
  // and the newest step (-1 = none).
  int64_t stored_checks = 0, stored_mismatches = 0;
  int64_t stored_first_mismatch = -1, stored_last_step = -1;
  // PutJob: written (replacing the stored ones) when set; a queued put
  // without them keeps a queued one's. Load: set when stored.
  std::optional<StoredMembership> membership;
  std::optional<std::string> series;  // opaque to StateDb
};

struct StoredCounters {
  int64_t next_worker_seq = 1;
  uint64_t next_job_id = 1;
  uint64_t incarnation = 0;  // 0 = none stored yet
  // The coordinator's data-plane key (Assignment.data_plane_secret is
  // derived from it per group key), so that a restarted coordinator hands
  // out the secrets its running jobs' connections were made with. 32 bytes,
  // stored as 4 little-endian 64-bit meta values; empty = none stored yet.
  // The state directory must be readable by the coordinator only.
  std::string data_plane_key;
};

struct StateDbOptions {
  std::string dir;  // created if missing
  absl::Duration flush_interval = absl::Milliseconds(25);
  int64_t max_queued_checks = 1 << 16;
  int64_t max_checks_per_job = 1 << 20;
  // Test fault: called on the writer thread before each non-empty commit;
  // when it returns an error, the transaction is rolled back with it (as a
  // failing disk would). Unset in production.
  std::function<absl::Status()> commit_fault_for_test;
};

class StateDb {
 public:
  static constexpr int kSchemaVersion = 2;

  struct Loaded {
    StoredCounters counters;
    std::vector<StoredWorker> workers;  // by seq
    std::vector<StoredJob> jobs;        // by id
    std::vector<StoredWeights> weights; // by job id
  };
  struct Stats {
    int64_t transactions = 0;
    int64_t rows = 0;            // rows written (jobs + workers + checks + meta)
    int64_t checks_written = 0;
    int64_t dropped_checks = 0;  // queue full, or past max_checks_per_job (not mismatches)
    double write_seconds = 0;    // writer time inside transactions
    int64_t queued_checks = 0;   // now
    std::string last_error;      // "" = none
  };

  // Opens (creating) DIR/coordinator.db. Errors name the file and what
  // failed (cannot create the directory, locked by another process, schema
  // version N where kSchemaVersion is expected, SQLite's message).
  static absl::StatusOr<std::unique_ptr<StateDb>> Open(StateDbOptions options);
  ~StateDb();  // writes what is queued, then closes
  StateDb(const StateDb&) = delete;
  StateDb& operator=(const StateDb&) = delete;

  const std::string& path() const { return path_; }

  absl::StatusOr<Loaded> Load();
  // Up to `limit` stored checks of `job_id` with step >= from_step, in step
  // order (committed ones: call Flush first to include queued ones).
  absl::StatusOr<std::vector<lockstep::v1::SyncCheck>> ReadSyncChecks(uint64_t job_id,
                                                                     int64_t from_step,
                                                                     int64_t limit);

  // The newest `limit` stored checks of `job_id` with step < before_step,
  // in step order.
  absl::StatusOr<std::vector<lockstep::v1::SyncCheck>> ReadLastSyncChecks(uint64_t job_id,
                                                                         int64_t before_step,
                                                                         int64_t limit);

  // The stored JobStatus of one job (committed rows), nullopt when none:
  // for a job the coordinator evicted from memory.
  absl::StatusOr<std::optional<lockstep::v1::JobStatus>> ReadJobStatus(uint64_t job_id);

  // Stored JobStatuses of jobs with id < before_id for which want(id) is
  // true, newest first as read, returned in ascending id order: at most
  // `limit` of them and about max_bytes (serialised; at least one).
  // `want` runs on the caller's thread under the reader's lock: it must not
  // block.
  // *more (if not null): whether a wanted job was left out by the limits.
  absl::StatusOr<std::vector<lockstep::v1::JobStatus>> ReadJobStatuses(
      uint64_t before_id, const std::function<bool(uint64_t)>& want, int64_t limit,
      size_t max_bytes, bool* more = nullptr);

  // A job's stored curves blob (StoredJob.series), nullopt when none.
  absl::StatusOr<std::optional<std::string>> ReadJobSeries(uint64_t job_id);

  void PutCounters(const StoredCounters& counters);
  void PutWorker(StoredWorker worker);
  void DeleteWorker(int64_t seq);
  void PutJob(StoredJob job);
  void AddSyncCheck(uint64_t job_id, const lockstep::v1::SyncCheck& check);
  // A job's final weights (replacing stored ones), or none.
  void PutWeights(StoredWeights weights);
  void DeleteWeights(uint64_t job_id);

  // The number of puts queued so far (a position in the write order): a
  // caller takes it before and after its puts (QueuedRange) and hands
  // them to Flush.
  uint64_t QueuedSeq() const;
  // A caller's puts: the positions (since, until] of the write order.
  struct QueuedRange {
    uint64_t since = 0;
    uint64_t until = std::numeric_limits<uint64_t>::max();
  };

  // Blocks until everything queued before the call (at most up to
  // puts.until) is committed, or `deadline` (DEADLINE_EXCEEDED). Returns
  // INTERNAL with the commit's error if a commit holding a put in `puts`
  // failed: those puts are lost. Failures of other commits are not
  // reported (Stats.last_error keeps the newest). The newest
  // kFailedCommitsKept failed commits are remembered; without a range,
  // every put counts.
  absl::Status Flush(absl::Time deadline, QueuedRange puts);
  absl::Status Flush(absl::Time deadline);
  static constexpr size_t kFailedCommitsKept = 64;

  // Test fault (lockstep-coordinator --fault_hold_state_from_step): from
  // now on the writer commits nothing until the destructor, which writes
  // what is queued as before. Puts are still queued (and checks dropped
  // past the bound); Flush waits for its deadline. A SIGKILL while held
  // loses everything queued since, as a crash inside the flush interval
  // would, but deterministically. True on the first call.
  bool HoldWrites();

  Stats GetStats() const;

 private:
  struct Batch {
    std::optional<StoredCounters> counters;
    std::map<int64_t, std::optional<StoredWorker>> workers;  // nullopt = delete
    std::map<uint64_t, StoredJob> jobs;
    std::vector<std::pair<uint64_t, lockstep::v1::SyncCheck>> checks;
    std::map<uint64_t, std::optional<StoredWeights>> weights;  // nullopt = delete
    bool empty() const {
      return !counters && workers.empty() && jobs.empty() && checks.empty() && weights.empty();
    }
  };

  StateDb(StateDbOptions options, std::string path, int lock_fd, sqlite3* writer,
          sqlite3* reader);
  void WriterLoop();
  absl::Status Write(Batch& batch);  // writer thread only

  const StateDbOptions options_;
  const std::string path_;
  const int lock_fd_;
  sqlite3* const writer_db_;  // writer thread only (and Open/destructor)
  absl::Mutex read_mu_;
  sqlite3* const reader_db_ ABSL_PT_GUARDED_BY(read_mu_);

  mutable absl::Mutex mu_;
  Batch queued_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_seq_ ABSL_GUARDED_BY(mu_) = 0;   // bumped by every put
  uint64_t committed_seq_ ABSL_GUARDED_BY(mu_) = 0;  // last seq the writer finished
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;  // HoldWrites
  // The newest failed commits (at most kFailedCommitsKept): each held the
  // puts at positions (from_seq, to_seq].
  struct FailedCommit {
    uint64_t from_seq;
    uint64_t to_seq;
    std::string error;
  };
  std::deque<FailedCommit> failed_commits_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int64_t> checks_per_job_ ABSL_GUARDED_BY(mu_);  // accepted for writing
  std::thread writer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STATE_STATE_DB_H_
