// Coordinator: the logic of the lockstep coordinator (worker registry, job
// queue, rank assignment, per-step replica hash checks, sync history, final
// weights). Plain C++: no gRPC here; the lockstep.v1 protobuf messages are
// used as data types. server/coordinator_service.h adapts it to gRPC.
//
// Thread-safety: every public method is thread-safe (one absl::Mutex, mu_).
// Time: decisions ("worker lost", throughput, timestamps) read the injected
// Clock; only WaitForJobChange, NextJobEvents and WaitForWorkersIdle block,
// against real time. No lock is held across I/O: event log lines are queued
// under mu_ and written after it is released (coordinator_log.cc).
//
// ---- Map: where each behaviour lives ----------------------------------------
// The Coordinator is a facade: it owns the parts below (plain classes and
// functions, not thread-safe, called under mu_) and ties them together.
//   server/worker_registry.h  workers by id, register/re-register address
//                             rules, heartbeat bookkeeping, lost detection,
//                             idle workers in id order.
//   server/scheduler.h        strict-FIFO start of the head PENDING job,
//                             binding K idle workers as ranks, the ps / tcp
//                             preconditions, no_wait.
//   server/job_store.h        job records by id, id allocation, the PENDING
//                             FIFO, lookups, the JobStatus snapshot, the
//                             per-change persistence hook.
//   server/sync_checker.h     per-step replica hash checks (majority,
//                             differing ranks), the bounded sync history and
//                             exact counters, the step's loss / examples.
//   server/rank_timing.h      per-rank timing windows and medians.
//   server/weights_store.h    final-weights uploads in chunks, published
//                             weights, eviction order.
//   server/watch_fanout.h     version counter, state-change snapshots, what a
//                             watcher is sent next (NextJobEvents).
//   server/job_series.h       the status page's bounded curves per job.
//   server/state/             the SQLite state database (state_db.h) and
//                             the bounded per-job sync history buffer
//                             (sync_history.h), used under --state_dir.
// Facade files: coordinator.cc (construction, helpers, job end, scheduling
// loop, workers: register / heartbeat / tick), coordinator_reports.cc
// (ReportStep / ReportEval / ReportDone / weights upload),
// coordinator_queries.cc (submit, cancel, reads, watches),
// coordinator_drain.cc (leaving and draining), coordinator_log.cc (event
// lines), coordinator_state.cc (the state database: restore after a
// restart, recording changes, the paged sync history).
//
// ---- Worker protocol (coordinator.cc) ---------------------------------------
// RegisterWorker(address, data_address) -> worker id "w-1", "w-2", ... in
//   registration order, state IDLE. An address with an empty host
//   (":7071", a worker listening on a wildcard address) gets the IP address
//   the call came from (`caller_host`). Address conflicts: see
//   worker_registry.h (ALREADY_EXISTS for a live worker of another process).
//   Registering an address held by a LOST worker, or again by the same
//   process, drops the old worker id (its heartbeats then get
//   reregister=true); if it was bound to a RUNNING job, that job FAILS
//   naming the old worker. data_address may be empty (no TCP data plane).
// Heartbeat(worker_id, job_id, step):
//   * unknown worker id -> reregister = true (status OK).
//   * refreshes the worker's last-seen time (Clock); a LOST worker that
//     heartbeats again is back: BUSY if still bound to a job, else IDLE.
//   * job_id == 0 (worker runs nothing):
//       - bound to a RUNNING job whose assignment it has not acknowledged
//         -> reply.assignment (rank, spec, peer_addresses in rank = ring
//         order, data_addresses in the same order, ps_addresses shard
//         order). Re-sent on every such heartbeat until acknowledged, so a
//         lost reply is harmless.
//       - bound to a RUNNING job it had acknowledged (heartbeat with that
//         job id, or a ReportStep) and not finished with ReportDone ->
//         the worker abandoned the job: the job FAILS naming the rank and
//         worker. Contract: a worker sends ReportDone before it heartbeats
//         with job_id 0 again.
//       - bound to a RUNNING job it finished (ReportDone ok) -> nothing;
//         stays BUSY until the job ends.
//       - bound to a job that is no longer RUNNING -> unbound, IDLE; the
//         scheduler runs and, if it binds this worker to a new job, the same
//         reply already carries that assignment.
//   * job_id == J != 0: acknowledges the assignment when J is the bound job
//     and RUNNING; otherwise (J ended, or J is not this worker's job)
//     reply.stop_job = true.
//   A worker is BUSY from the moment the scheduler binds it until it
//   heartbeats with job_id 0 after its job ended, so a worker still winding
//   down is never handed a new job.
// Tick(): workers not heard from for more than options.lost_after become
//   LOST (worker_registry.h); a RUNNING job with a LOST rank FAILS with
//   "worker w-3 (rank 2, host vm3, 127.0.0.1:4567) lost: no heartbeat for
//   3.2s" under spec.on_worker_lost "fail"; under "shrink" the survivors
//   regroup instead (server/membership.h: new generation, renumbered ranks,
//   k - 1; their heartbeats carry the new Assignment, then its start);
//   under "wait" the rank is left vacant and the job pauses until an idle
//   worker takes it (or spec.wait_timeout_ms passes: FAILED naming it).
//   Scheduling first gives idle workers to RUNNING jobs with a vacant rank
//   or (shrink) below their spec.num_workers, in job id order
//   (membership.h OpenRank/AddRank), then starts PENDING jobs.
//   RegisterWorkerReply.lost_after_ms tells workers options.lost_after.
//   Then PENDING jobs are scheduled (scheduler.h). Scheduling also runs on
//   submit and whenever a worker becomes IDLE.
//
// ---- Jobs (coordinator_queries.cc, coordinator_reports.cc) -------------------
// SubmitJob validates (ValidateJobSpec: errors name the field), assigns ids
// 1, 2, 3, ... (job_store.h) and queues the job PENDING; when and where it
// starts, PS addresses, the TCP data-address check and no_wait:
// scheduler.h. A job that fails to start leaves its workers IDLE and the
// next PENDING job is scheduled. The job is RUNNING from the moment it is
// bound.
//
// ReportStep(job, rank, step t, hash, loss, examples, ...):
//   NOT_FOUND "job 42 not found"; INVALID_ARGUMENT for a rank outside
//   [0, K), a negative step or a hash that is not 32 hex digits (hashes
//   are compared and shown in lower case);
//   FAILED_PRECONDITION naming the worker and rank when the sender is not
//   the job's worker at that rank. When the job is not RUNNING the report
//   is not recorded and reply.stop = true with the reason
//   ("job 3 is CANCELLED: cancelled by user").
//   Timing: rank_timing.h (RankStatus.median_*); RankStatus.resident_bytes
//   is the last nonzero resident_bytes reported.
//   Idempotent: each rank's steps must arrive in increasing order; a report
//   for a step <= the last one recorded for that rank is a duplicate (or
//   stale) and ignored (the first report wins). After a restart the last
//   recorded step is the newest stored check's, so the reports a worker
//   resends on its new report stream (worker/report_replay.h) fill the
//   checks the database had not committed, each once.
//   When all K ranks reported step t it is checked (sync_checker.h: majority
//   hash, differing ranks, history). A mismatch marks the job out_of_sync
//   and FAILED with "replicas diverged at step t: rank(s) 2 differ from the
//   majority hash <hex>" (halting; no repair yet).
//   Progress at a completed step t:
//     step    = t + 1 (steps every rank completed)
//     epoch   = the largest epoch the ranks reported for t
//     loss    = examples-weighted mean of the ranks' reported losses
//               (sync_checker.h). Equals the global-batch mean whether
//               ranks report their slice's mean or the global one.
//     examples_per_second = examples of the steps completed after the first
//               one / (Clock time of the latest completion - Clock time of
//               the first completion), so start-up (dataset loading,
//               connecting) does not count; until a second step completes,
//               examples / (time since job start). 0 while no time passed.
//     total_steps = spec.steps if > 0, else the largest total_steps a rank
//               reported (ReportStep.total_steps / ReportDone.steps).
// ReportEval: records the latest test accuracy / loss (any rank; all ranks
//   hold the same model). Ignored (OK) when the job is not RUNNING.
// ReportDone: ok = false -> job FAILED "rank r (w-3): <error>"; when all K
//   ranks reported ok -> SUCCEEDED with final test accuracy / loss from
//   rank 0 and final_hash = the common hash; if the final hashes disagree the
//   job FAILS ("replicas finished with different weights: rank(s) 1 differ
//   from the majority hash <hex>"). Ignored (OK) when the job already ended.
// UploadWeightsChunk / FinishWeightsUpload: rank 0 uploads the final weights
//   while the job is RUNNING or SUCCEEDED; chunks, publishing and eviction
//   (at most options.max_jobs_with_weights jobs): weights_store.h. A job
//   that ends other than SUCCEEDED loses its weights and its upload.
// CancelJob: PENDING/RUNNING -> CANCELLED, reason "cancelled by user";
//   already terminal jobs are returned unchanged with OK (idempotent cancel).
//   Unknown id -> NOT_FOUND "job 42 not found".
// Under a state database both reply only once it committed the new job or
// the cancel (at most 5 s, then logged WARN and answered anyway).
// ---- Sync history and finished jobs (coordinator_history.cc) --------------
// Each job's sync history is bounded (sync_checker.h, state/sync_history.h):
// a running job keeps its newest options.max_sync_history checks in full,
// older matching steps as SyncRuns, older mismatches and noted checks in
// full up to 1024; a finished job keeps 128 / 32 / 32. The counters
// (checked_steps, mismatched_steps, first_mismatch_step) are exact.
// A GetSyncHistory reply holds at most kMaxSyncReplyChecks checks and about
// kMaxSyncReplyBytes (the newest; max_entries 0 = as many as fit) plus the
// runs, so it stays far below gRPC's 4 MiB default for any job length and
// K. GetSyncHistoryPage pages in step order: steps older than memory's
// window from the --state_dir database (every check is stored there), the
// window from memory; without a database the steps older than the window
// come back summarised (SyncHistory.summarised_to_step, .summary, runs,
// the kept mismatches), and the next page starts at the window.
// Finished jobs: at most options.max_finished_jobs_in_memory stay in memory
// (the oldest finished are evicted by Tick, once no worker is bound to
// them; their final weights stay in the weights store, bounded as any
// job's, and GetWeights serves them). JobList.evicted_jobs counts them;
// with a state database ListJobs(with_evicted) lists the newest 1000 of
// them from it (JobList.evicted_listed), and GetJob, GetSyncHistory(Page),
// GetJobSeries and NextJobEvents (one event: the stored final status)
// answer from it;
// CancelJob answers the stored status (it had finished). Without one they
// are not listed and every call but GetWeights is NOT_FOUND "job 5 was
// evicted from memory (...)". PENDING and RUNNING jobs are never evicted.
//
// ---- State database and restarts (coordinator_state.cc) --------------------
// AttachStateDb(db), before serving: restores what db holds (workers,
// jobs, id counters, the incarnation) and from then on records every change:
// workers on register / removal, job ids and the incarnation when they
// move, a job on each state change and at most every kPersistProgressEvery
// (Clock) of progress, and every completed sync check. Nothing is written
// under mu_: StateDb queues and a writer thread commits (state_db.h).
// After a restart:
//   * every job is back with its spec, state, reason, progress, ranks,
//     counters and final hash; PENDING jobs queue again in id order;
//   * the incarnation is the stored one, so a RUNNING job keeps its group
//     key and its workers' peer streams and ps state stay valid;
//   * workers are back under their ids, last seen at the restart, BUSY when
//     bound to a RUNNING job: those that do not heartbeat within lost_after
//     become LOST (failing their job) as usual; the others are LOST until
//     their first heartbeat (then IDLE, "worker back"), so nothing is
//     scheduled on a worker that died while the coordinator was down;
//   * a RUNNING job continues: its workers heartbeat with its id
//     (acknowledged), their reports are accepted; checks of steps that
//     completed in the last moments before the kill and were not yet
//     committed, and steps some ranks had reported to the old process, are
//     checked from the reports the workers send again (their newest 4096,
//     worker/report_replay.h: on a new report stream, and before a resent
//     ReportDone from resend_reports_from_step); every rank restores its
//     last step as the newest stored check's, or as the lowest last step
//     the ranks had stored in the job row if higher, so each step is
//     checked once;
//   * membership: each job's generation, members (worker ids, addresses by
//     rank, held steps) and membership events are stored when they change
//     (with the job row, at once), so a job that shrank (or regroups) comes
//     back with its current group and group key;
//   * final weights (while the weights store keeps them, up to
//     kMaxStoredWeightsBytes each), the curves (at the job's end, and every
//     kPersistSeriesEvery while it runs) and the final hash and metrics are
//     kept (a RUNNING job's too: published before a kill that came before
//     its SUCCEEDED row was committed);
//   * a rank restored RUNNING that was acknowledged but has no committed
//     ReportDone: while its worker heartbeats saying it runs no job, the
//     reply asks it to send its ReportDone again (resend_done_job_id, up
//     to 25 heartbeats; then it abandoned the job as before), so a job
//     whose end was not committed before the kill ends SUCCEEDED with the
//     ranks' hash (still compared across ranks);
//   * a ps job keeps the ps addresses it started with (stored with it),
//     whatever this coordinator's --ps_addresses; one on the coordinator's
//     own shard (JobRecord::coordinator_ps_shard) lost the shard's sums:
//     it regroups (membership.h RegroupAfterRestart: generation + 1, same
//     ranks, a "restart" event; the ranks continue at the newest step one
//     of them completed, the others copying its state), unless a rank had
//     already finished (then it is at its end and is left as it is); a
//     ReportDone of the generation before such regroups still counts, and
//     so do its step reports of the steps after each rank's last recorded
//     one (SyncChecker::OpenLate: late reports, checked and stored but
//     not judged, answered with an empty reply; a probe of that generation
//     names where the rank's late reports resume; a rank's first report of
//     the new generation ends its late reports), so the database's lost
//     checks come back as for any other job, except the step a rank never
//     ran because it copies the state after it (and late checks not yet
//     committed at a second restart);
//   * not kept: timing medians.
//
// ---- Leaving and draining (SIGTERM; coordinator_drain.cc) -----------------
// DeregisterWorker(worker_id, reason): a worker that shuts down says so. It
//   is removed from the registry at once (never scheduled again; later
//   heartbeats from its id get reregister = true). If it was bound to a
//   RUNNING job whose part it had not finished (no ReportDone ok), the
//   job's on_worker_lost applies at once (LoseWorkerLocked), with the reason
//   "worker w-2 (rank 1, host h2, 10.0.0.2:7071) left: shutting down
//   (SIGTERM)": `fail` FAILS the job, `shrink` regroups the others, `wait`
//   leaves its rank to the next idle worker. Under `fail` a worker normally
//   sends ReportDone(ok = false) naming itself first, so the job has
//   already failed with that reason; under `shrink`/`wait` it deregisters
//   first and sends no failed ReportDone. Unknown ids are OK (idempotent).
//   The reason is cut to 256 bytes.
// BeginDrain(reason): the coordinator stops taking work. From then on
//   SubmitJob and RegisterWorker fail UNAVAILABLE "coordinator is shutting
//   down", nothing is scheduled, and every PENDING and RUNNING job FAILS
//   with `reason` (e.g. "coordinator shut down (SIGTERM)"; failed, not
//   requeued: the queue lives in memory and dies with the process). Workers
//   bound to those jobs learn it from their next heartbeat (stop_job) or
//   ReportStep (stop) reply, stop at the next step boundary, ReportDone and
//   go IDLE, as after a cancel. Idempotent (a second call fails nothing).
// WaitForWorkersIdle(deadline): blocks (real time) until no worker is BUSY
//   (LOST ones do not count) or `deadline`; true when none is BUSY.
#ifndef LOCKSTEP_SERVER_COORDINATOR_H_
#define LOCKSTEP_SERVER_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/collective/ps_aggregator.h"
#include "common/log.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "server/job_series.h"
#include "server/coordinator_options.h"
#include "server/job_store.h"
#include "server/ps_control.h"
#include "server/rank_timing.h"
#include "common/net/data_auth.h"
#include "server/state/state_db.h"
#include "server/sync_checker.h"
#include "server/watch_fanout.h"
#include "server/weights_store.h"
#include "server/worker_registry.h"

namespace lockstep {

class Coordinator {
 public:
  // `clock` is not owned and must outlive the Coordinator.
  Coordinator(CoordinatorOptions options, Clock* clock);
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  ~Coordinator();

  // Sets the advertised address (used as the PS address when
  // options.ps_addresses is empty), e.g. once the real port is known.
  // ":port" (no host) tells workers to dial the host they reach the
  // coordinator at.
  void SetAdvertiseAddress(std::string address);

  // ---- worker-facing ----
  // `caller_host`: the IP address (IPv6 bracketed) the call came from, ""
  // when unknown. INVALID_ARGUMENT when address is empty, malformed, or has
  // an empty host and caller_host is unknown; ALREADY_EXISTS as above.
  // `token`: the worker token the call carries (lockstep-worker-token
  // metadata; "" = none). Registering again at the address of a LIVE
  // worker of the same process (which replaces it; its job's
  // on_worker_lost applies as for a lost worker) needs
  // that worker's token; without it the call is refused with
  // ALREADY_EXISTS until the old registration is LOST, so a caller that
  // knows a worker's address, host and pid cannot take its place. A repeat
  // by the same process (request.instance_secret equal to the one a LIVE
  // registration at that address, host, pid and data address was made
  // with) returns that registration unchanged (same id and token; its
  // last_seen is refreshed), whatever token it carries: idempotent. The
  // process whose LOST registration was replaced at its address by another
  // (live) one takes the address back with its instance_secret: the live
  // one is removed and its job's on_worker_lost applies, naming both.
  absl::StatusOr<lockstep::v1::RegisterWorkerReply> RegisterWorker(
      const lockstep::v1::RegisterWorkerRequest& request, const std::string& caller_host = "",
      const std::string& token = "");
  // Whether `token` is the one RegisterWorker gave `worker_id`
  // (RegisterWorkerReply.worker_token: an HMAC of the registration, id,
  // address, hostname and pid, under this coordinator's start-up key, the
  // stored one under --state_dir). PermissionDeniedError naming the worker
  // and what is wrong (not registered, no token, another one) otherwise.
  // Constant-time comparison, outside the lock. The service adapter calls
  // it before every call that names a worker
  // (server/coordinator_service.cc).
  absl::Status CheckWorkerToken(const std::string& worker_id, const std::string& token);
  // Whether `secret` is the data-plane secret this coordinator gives job key
  // `job` (a group key, or its shape-agreement key with bit 63 set): what
  // its own ps shard checks a worker's DataAddress registration against, so
  // a worker certificate cannot claim another job's key there. Constant-time
  // comparison. Any thread.
  bool IsDataPlaneSecret(uint64_t job, const std::string& secret) const;
  // The shape (the generation's K, the job's S) of job key `key` (a group
  // key, or its shape-agreement key) if it is the current group of a
  // running ps job on this coordinator's own shard; NotFound otherwise
  // (never started, ended, an older generation's). What its own ps shard's
  // registry asks before it creates a key (PsRegistryLimits::key_shape), so
  // that no request makes it hold shards for a key, K or shard index no
  // job has. Any thread (takes the coordinator's lock: the registry calls
  // it without its own).
  absl::StatusOr<PsKeyShape> PsKeyShapeOf(uint64_t key) const;
  absl::StatusOr<lockstep::v1::HeartbeatReply> Heartbeat(
      const lockstep::v1::HeartbeatRequest& request);
  absl::StatusOr<lockstep::v1::ReportStepReply> ReportStep(
      const lockstep::v1::ReportStepRequest& request);
  // Several reports (StepReports, at most kMaxStepReports, else
  // INVALID_ARGUMENT naming `reports`), in order, under one lock: as many
  // ReportStep calls. Returns the first reply that says stop or the first
  // error (the reports after it are not looked at), else the last reply.
  // A probe (StepReports.probe, exactly one report naming job, worker, rank
  // and generation) records nothing and answers probe_answered with
  // resend_from_step = the rank's last recorded step + 1, stop for a job
  // that is no longer RUNNING, neither for a stale generation, and the
  // report's errors (NOT_FOUND, FAILED_PRECONDITION) as ReportStep would.
  static constexpr int kMaxStepReports = 8;
  absl::StatusOr<lockstep::v1::ReportStepReply> ReportSteps(
      const lockstep::v1::StepReports& request);
  absl::Status ReportEval(const lockstep::v1::ReportEvalRequest& request);
  absl::Status ReportDone(const lockstep::v1::ReportDoneRequest& request);
  // One chunk of an upload. NOT_FOUND (job), FAILED_PRECONDITION (not rank
  // 0 of the job, job CANCELLED/FAILED/PENDING, chunk out of order),
  // INVALID_ARGUMENT (data not a multiple of 4 bytes, total < 1, chunk past
  // total, total changed mid-upload).
  absl::Status UploadWeightsChunk(const lockstep::v1::WeightsChunk& chunk);
  // End of an upload stream: FAILED_PRECONDITION (and the partial upload is
  // discarded) when an upload of `job_id` by `worker_id` is still
  // incomplete; OK otherwise. NOT_FOUND for an unknown job.
  absl::Status FinishWeightsUpload(const std::string& worker_id, uint64_t job_id);

  // Marks overdue workers LOST (failing their jobs) and schedules PENDING
  // jobs. Called periodically by main and directly by tests.
  void Tick();

  // ---- user-facing ----
  absl::StatusOr<lockstep::v1::SubmitJobReply> SubmitJob(
      const lockstep::v1::SubmitJobRequest& request);
  absl::StatusOr<lockstep::v1::JobStatus> GetJob(uint64_t job_id);
  // Ascending job id: the jobs in memory; with_evicted (the ListJobs RPC)
  // adds the evicted ones the state database has (AddEvictedJobs), which
  // reads SQLite: the metrics and the status page leave it out.
  // evicted_before > 0 (ListRequest.evicted_before, with_evicted): a later
  // page, the evicted jobs below that id only.
  lockstep::v1::JobList ListJobs(bool with_evicted = false, uint64_t evicted_before = 0);
  lockstep::v1::WorkerList ListWorkers();  // registration order
  absl::StatusOr<lockstep::v1::JobStatus> CancelJob(uint64_t job_id);
  // max_entries: 0 = every kept check, else the most recent max_entries
  // (INVALID_ARGUMENT when negative); never more than the reply caps.
  absl::StatusOr<lockstep::v1::SyncHistory> GetSyncHistory(uint64_t job_id,
                                                           int64_t max_entries);
  // The checks with step >= from_step in step order, at most max_entries
  // (0 = the cap), from the state database (older checks) and memory;
  // next_step = where the next page starts, -1 at the newest check.
  absl::StatusOr<lockstep::v1::SyncHistory> GetSyncHistoryPage(uint64_t job_id,
                                                               int64_t from_step,
                                                               int64_t max_entries);
  static constexpr int64_t kMaxSyncReplyChecks = 4096;
  static constexpr size_t kMaxSyncReplyBytes = size_t{1} << 20;

  // ---- state database (coordinator_state.cc; see the top of this file) ----
  // `db` is not owned and must outlive the Coordinator. Call once, before
  // the coordinator serves. Errors name the database file.
  absl::Status AttachStateDb(StateDb* db);
  static constexpr absl::Duration kPersistProgressEvery = absl::Seconds(1);
  static constexpr absl::Duration kPersistSeriesEvery = absl::Seconds(10);
  static constexpr size_t kMaxStoredWeightsBytes = size_t{256} << 20;
  // NOT_FOUND, or FAILED_PRECONDITION when the job has no (or no longer
  // has) final weights. The result stays valid after eviction.
  absl::StatusOr<std::shared_ptr<const FinalWeights>> GetWeights(uint64_t job_id);
  // A copy of the job's bounded curve history (server/job_series.h): loss
  // and examples/s per completed step, test accuracy / loss per ReportEval,
  // the sync checks as strip cells. NOT_FOUND for an unknown job.
  absl::StatusOr<JobSeriesSnapshot> GetJobSeries(uint64_t job_id);

  // ---- leaving and draining (see the top of this file) ----
  absl::StatusOr<lockstep::v1::DeregisterWorkerReply> DeregisterWorker(
      const lockstep::v1::DeregisterWorkerRequest& request);
  // Returns the ids of the jobs it failed, ascending.
  std::vector<uint64_t> BeginDrain(const std::string& reason);
  bool draining();

  // Event counts since start that no snapshot shows (for the metrics; jobs
  // and workers by state come from ListJobs / ListWorkers).
  struct Counters {
    int64_t workers_lost = 0;  // transitions to LOST (a worker may be lost again)
  };
  Counters counters();
  bool WaitForWorkersIdle(absl::Time deadline);

  // Watch support. Every change of a job stamps it with a new value of a
  // global version counter (>= 1, increasing). Returns the job's snapshot
  // and version as soon as its version is > seen_version, or at `deadline`
  // (real time) with the current snapshot and version (== seen_version when
  // nothing changed). Pass seen_version 0 to get the current state at once.
  // NOT_FOUND for an unknown job.
  absl::StatusOr<std::pair<lockstep::v1::JobStatus, uint64_t>> WaitForJobChange(
      uint64_t job_id, uint64_t seen_version, absl::Time deadline);

  // Coalesced watch (WatchJob): what a watcher that has seen `seen_version`
  // and last got events at Clock time `last_sent` should send next.
  //   * seen_version 0: the current snapshot, at once.
  //   * every state change (PENDING, RUNNING, the end) after seen_version:
  //     the snapshot taken when it happened, at once and in order, never
  //     coalesced away (the terminal one is always the last event);
  //   * otherwise, once the job changed after seen_version and the Clock
  //     reads >= last_sent + options.watch_interval: the current snapshot.
  // Progress (step reports) therefore reaches a watcher at most once per
  // watch_interval, however many ranks report how many steps, and nothing
  // is serialised for watchers between those events. Blocks (real time)
  // until there is something to send or `deadline`; `events` is empty then.
  // NOT_FOUND for an unknown job.
  // (watch_fanout.h: the rules, decided by NextEvents.)
  using JobEvents = ::lockstep::JobEvents;
  absl::StatusOr<JobEvents> NextJobEvents(uint64_t job_id, uint64_t seen_version,
                                          absl::Time last_sent, absl::Time deadline);

  // Reports kept per rank for the RankStatus medians.
  static constexpr int kTimingWindow = RankTiming::kSize;

 private:
  using Job = JobRecord;
  using Rank = RankRecord;
  using Worker = WorkerRecord;

  // SubmitJob's work before the commit wait; *db = the database to wait for,
  // *puts = this call's puts in its write order (StateDb::Flush).
  absl::StatusOr<lockstep::v1::SubmitJobReply> SubmitJobUncommitted(
      const lockstep::v1::SubmitJobRequest& request, StateDb** db,
      StateDb::QueuedRange* puts) ABSL_LOCKS_EXCLUDED(mu_);

  // The job a worker reports on as rank `rank` (ReportStep/Eval/Done):
  // NOT_FOUND for an unknown job, INVALID_ARGUMENT for a rank out of range,
  // FAILED_PRECONDITION unless the job started with `worker_id` as `rank`.
  absl::StatusOr<Job*> ReportingJobLocked(uint64_t job_id, const std::string& worker_id,
                                          int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every change of a job: a new watch version, and the store's hook.
  void BumpLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BumpLocked, and a snapshot for watchers (the job's state changed).
  void StateChangedLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RUNNING/PENDING -> `state` with `reason`; workers stay bound.
  void EndJobLocked(Job* job, lockstep::v1::JobState state, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJobLocked(Job* job, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> PsAddressesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts PENDING jobs in FIFO order while they can start (scheduler.h).
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A StepReports probe (StepReports.probe): where the probe's rank should
  // resume resending its kept reports; records nothing.
  absl::StatusOr<lockstep::v1::ReportStepReply> ProbeLocked(
      const lockstep::v1::ReportStepRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReportStep's work, mu_ held (log lines queued for the Locked holder).
  absl::StatusOr<lockstep::v1::ReportStepReply> ReportStepLocked(
      const lockstep::v1::ReportStepRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A report of the closed generation whose late reports job->sync takes
  // (SyncChecker::OpenLate, after a restart regroup): checked, stored and
  // answered with an empty reply; nothing else of the job changes.
  absl::StatusOr<lockstep::v1::ReportStepReply> ReportLateLocked(
      Job* job, const lockstep::v1::ReportStepRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Progress, curves and the mismatch verdict of a checked step.
  void ApplyCompletedStepLocked(Job* job, const CompletedStep& step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  lockstep::v1::JobStatus StatusLocked(const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A regroup's start was decided (membership.h): forgets the older
  // generations' ps groups, logs "job regrouped", notifies watchers.
  void JobRegroupedLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `job`'s ps groups of the generations below `below`
  // (coordinator_membership.cc): CoordinatorOptions::forget_ps_group on the
  // coordinator's own shard, ps_control->Forget on --ps_addresses shards.
  void ForgetPsGroupsLocked(const Job& job, int64_t below) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A ps job on --ps_addresses shards: the first time an assignment of its
  // current generation goes out, starts that generation's keys (the group
  // and its shape round) on the shards with the generation's K and the
  // job's S, and for a raw-TCP job the data-plane secret
  // (ps_control->StartKeys).
  void StartPsKeysLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keys StartPsKeysLocked sends for `job`'s current generation.
  std::vector<PsKeyStart> PsKeysLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every kPsKeysResendEvery (Tick): sends the current keys of every running
  // ps job on --ps_addresses shards again, so that a lost Control message,
  // or a lockstep-server that restarted and forgot them, costs at most that
  // long (a shard waits 10 s for a key before refusing it; setting a key
  // again is a no-op).
  void ResendPsKeysLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr absl::Duration kPsKeysResendEvery = absl::Seconds(5);
  absl::Time last_ps_keys_resend_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The group key (Assignment.group_key) of `job`'s generation `generation`.
  uint64_t GroupKeyLocked(const Job& job, int64_t generation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  lockstep::v1::Assignment AssignmentLocked(const Job& job, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A resumed job's Assignment.checkpoint_source: the address of the worker
  // that wrote the checkpoints (rank 0 of the job it resumes) when it is
  // alive and not this job's rank 0; "" otherwise.
  std::string CheckpointSourceLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank's worker is gone from RUNNING `job`: LOST (no heartbeat), left
  // (DeregisterWorker: SIGTERM) or restarted (RegisterWorker at its
  // address); `why` names it ("worker w-2 (rank 1, host h2, 10.0.0.2:7071)
  // lost: no heartbeat for 3.1s"). The job's spec.on_worker_lost decides:
  // "shrink" regroups the survivors (ShrinkLockedOnLoss), "wait" leaves the
  // rank vacant (VacateLockedOnLoss), and "fail", or either of them when it
  // cannot, ends the job FAILED with `why`. True when the job goes on.
  bool LoseWorkerLocked(Job* job, const Worker& gone, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // spec.on_worker_lost = "shrink": regroups `job` without the `lost`
  // worker (membership.h); false when it cannot (then the job fails as
  // under "fail"); true, with the job FAILED, when no survivor holds a
  // replica (membership.h NoReplicaLeft).
  bool ShrinkLockedOnLoss(Job* job, const Worker& lost, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stuck combines: a ring job (K >= 2) whose every rank's last heartbeat
  // (fresh: within 3 heartbeat intervals + 1 s; reports are never
  // extrapolated; of the current generation) says its combine has waited
  // for a peer for at least its spec.stall_timeout_ms (0 = lost_after), or
  // a ps job (K >= 1) whose every rank's says it has waited for a shard
  // that long, is FAILED (not while
  // regrouping), whatever its on_worker_lost, naming every wait ("every
  // rank waits for a peer while every worker heartbeats: a link between
  // workers is down (rank 1 (w-2, host h2) for rank 0 (w-1, host h1) 3.2s;
  // ...)", or "... for a parameter-server shard ... (rank 0 (w-1, host h1)
  // for shard 0 (coord:7070) 3.0s; ...)"). Under on_worker_lost "shrink" or
  // "wait" a ring job whose waits name one rank (membership.h
  // RankToDropWhenStuck; K = 2: rank 1) drops that rank instead
  // (DropUnreachableRankLocked): shrunk or vacated as for a lost worker,
  // its worker IDLE and never again a rank of the job. True when it failed
  // the job or dropped a rank.
  // When the waits name no single rank (K >= 3: a cycle, a partition into
  // groups), ProbeStuckLocked asks every rank which peers accept a TCP
  // connection (HeartbeatReply.probe, FillProbeLocked; the answers come in
  // heartbeats, membership.h RecordProbeAnswer) and drops every rank
  // outside the largest set that reach each other both ways
  // (LargestMutuallyReachable). A stuck ps job under shrink or wait (K >= 2)
  // is probed the same way for its shards (PeerProbe.shards) and keeps the
  // ranks that reach every shard (RanksReachingEveryShard). The job waits
  // meanwhile, at most a connect timeout (1 s) + 3 heartbeat intervals +
  // 1 s; it is failed as before when a rank does not answer, when every
  // rank reaches every peer or shard, or when no group is left (the reason
  // then says what the probe found). Definitions: coordinator_stuck.cc.
  bool FailStuckCombineLocked(Job* job, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  enum class ProbeOutcome { kPending, kDropped, kNone };
  ProbeOutcome ProbeStuckLocked(Job* job, absl::Time now, std::string* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillProbeLocked(const Job& job, int rank, v1::HeartbeatReply* reply) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A ring of 2 is probed only when there are idle workers to probe as
  // witnesses (at most 4, never one dropped from the job): the rank that
  // reaches fewer of them is the one cut off, and is dropped; a tie drops
  // rank 1 as without a probe. These are their probe addresses.
  std::vector<std::string> WitnessesLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DropUnreachableRankLocked(Job* job, int rank, const std::string& stuck)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The survivors of a shrink take their new ranks.
  void RenumberLocked(const ShrinkResult& shrunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Membership with the registry (coordinator_membership.cc): "wait" leaves
  // the lost rank vacant (false: it cannot, the job fails; true with the
  // job FAILED at once when no rank holding a replica is left); waits past
  // their spec.wait_timeout_ms fail; idle workers take vacant ranks and
  // join shrunk jobs (before PENDING jobs start).
  bool VacateLockedOnLoss(Job* job, const Worker& lost, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireWaitsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillOpenRanksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Event logging without I/O under mu_ (coordinator_log.cc): LogLocked
  // queues a line; Locked (used instead of absl::MutexLock by the methods
  // that change state) writes the queued lines after releasing mu_. The
  // queue holds at most one call's events (one per job at most).
  struct QueuedLog {
    LogLevel level;
    std::string msg;
    std::vector<LogField> fields;
  };
  class ABSL_SCOPED_LOCKABLE Locked {
   public:
    explicit Locked(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_);
    ~Locked() ABSL_UNLOCK_FUNCTION();
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Coordinator* const c_;
  };
  void LogLocked(LogLevel level, std::string msg, std::vector<LogField> fields)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An ERROR line `what` (e.g. "hash mismatch") at `step` naming the
  // differing ranks, their workers and the majority hash.
  void LogMismatchLocked(const Job& job, absl::string_view what, int64_t step,
                         const std::vector<int32_t>& ranks, const std::string& majority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the queued lines (mu_ not held).
  void WriteLogs(std::vector<QueuedLog> logs) const;
  // "ring/grpc", "ring/tcp" or "ps".
  static std::string ModeName(const lockstep::v1::JobSpec& spec);

  // Finished jobs beyond options.max_finished_jobs_in_memory leave memory
  // (coordinator_history.cc; called by Tick).
  void EvictFinishedJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An evicted job's stored JobStatus from the state database (mu_ not
  // held); `not_found` when there is no database or no row.
  absl::StatusOr<lockstep::v1::JobStatus> EvictedJobStatus(uint64_t job_id,
                                                           const absl::Status& not_found)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for GetJobSeries (the stored curves; empty when none were
  // stored) and NextJobEvents (the stored final status as the one event).
  absl::StatusOr<JobSeriesSnapshot> EvictedJobSeries(uint64_t job_id,
                                                     const absl::Status& not_found)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<JobEvents> EvictedJobEvents(uint64_t job_id, uint64_t seen_version,
                                             const absl::Status& not_found)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NextJobEvents for a job in memory (NOT_FOUND otherwise).
  absl::StatusOr<JobEvents> NextJobEventsInMemory(uint64_t job_id, uint64_t seen_version,
                                                  absl::Time last_sent, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // ListJobs: the evicted jobs from the state database (the newest
  // options.max_listed_evicted_jobs below `before` (0: all), about
  // kMaxListedEvictedBytes), merged into `list` in id order, and
  // evicted_next_before when older ones are left; nothing without a
  // database.
  void AddEvictedJobs(lockstep::v1::JobList* list, uint64_t before) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxListedEvictedBytes = size_t{1} << 20;

  // State database (coordinator_state.cc). No-ops without one.
  void PersistJobLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistWorkerLocked(const Worker& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetWorkerLocked(int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistCountersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct PersistMark {
    lockstep::v1::JobState state = lockstep::v1::JOB_STATE_UNSPECIFIED;
    absl::Time at = absl::InfinitePast();
    int64_t checked = 0;  // sync.checked() already stored
    uint64_t membership = 0;  // fingerprint of the membership stored (0 = none)
    absl::Time series_at = absl::InfinitePast();  // curves last stored
    bool series_final = false;                     // stored at the job's end
    bool weights_stored = false;
    std::weak_ptr<const FinalWeights> weights;  // the stored ones
  };

  const CoordinatorOptions options_;
  uint64_t incarnation_ = 0;  // options_.incarnation or from the clock; set once
  // Key of the job groups' data-plane secrets (Assignment.data_plane_secret
  // = dataauth::JobGroupSecret(key, group_key)): 32 CSPRNG bytes drawn at
  // start, never logged; with a state database, the stored one (so that a
  // restarted coordinator hands out the secrets its running jobs'
  // connections were made with; StoredCounters::data_plane_key).
  std::string data_plane_key_ ABSL_GUARDED_BY(mu_) = dataauth::RandomSecret();
  // RegisterWorkerReply.worker_token of registration `w`: hex of the HMAC
  // of its id, address, hostname and pid under `key` (data_plane_key_;
  // domain "lockstep worker token v1").
  static std::string WorkerToken(const std::string& key, const WorkerRecord& w);
  // WorkerRecord.instance_digest of RegisterWorkerRequest.instance_secret:
  // hex of its HMAC under `key` (domain "lockstep worker instance v1").
  static std::string InstanceDigest(const std::string& key, const std::string& secret);
  // The RegisterWorker reply that hands out registration `w`.
  lockstep::v1::RegisterWorkerReply RegistrationReplyLocked(const WorkerRecord& w) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Clock* const clock_;
  const Logger log_;

  mutable absl::Mutex mu_;
  std::string advertise_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  JobStore jobs_ ABSL_GUARDED_BY(mu_);
  WeightsStore weights_ ABSL_GUARDED_BY(mu_);
  WatchVersions versions_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;  // BeginDrain was called
  StateDb* state_db_ ABSL_GUARDED_BY(mu_) = nullptr;  // not owned
  std::map<uint64_t, PersistMark> persisted_ ABSL_GUARDED_BY(mu_);  // by job id
  std::vector<QueuedLog> queued_logs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATOR_H_
