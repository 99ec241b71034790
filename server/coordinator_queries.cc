// Coordinator facade: the user-facing calls — SubmitJob, CancelJob, the
// reads (GetJob, ListJobs, ListWorkers, GetSyncHistory, GetWeights,
// GetJobSeries) and the watches (WaitForJobChange, NextJobEvents).
// Contracts: coordinator.h; the parts: job_store.h, scheduler.h,
// sync_checker.h, weights_store.h, watch_fanout.h.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/train/job_spec_convert.h"
#include "server/coordinator.h"
#include "server/scheduler.h"
#include "server/submit_memory.h"

namespace lockstep {
namespace {

// How long an acknowledged submit or cancel waits for the state database.
constexpr absl::Duration kAcknowledgedCommitWait = absl::Seconds(5);

// Waits (mu_ not held) until what a submit or cancel queued is committed, so
// that a coordinator killed after its reply still has it. A database that
// does not commit in time (a stalled disk), or fails the commit holding the
// call's puts (another commit's failure is not blamed on it: `puts`, the
// database's positions before and after them), is logged, not returned: the call
// took effect in memory and the job runs, so an error would only make the
// user submit it twice.
void CommitAcknowledged(StateDb* db, const StateDb::QueuedRange& puts, const Logger& log,
                        const char* what, uint64_t job_id) {
  if (db == nullptr) return;
  const absl::Status s = db->Flush(absl::Now() + kAcknowledgedCommitWait, puts);
  if (s.ok()) return;
  log.Log(LogLevel::kWarn, "acknowledged before the state database committed it",
          {{"job", job_id}, {"call", what}, {"error", s.message()}});
}

}  // namespace

absl::StatusOr<v1::SubmitJobReply> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  StateDb* db = nullptr;
  StateDb::QueuedRange puts;
  absl::StatusOr<v1::SubmitJobReply> reply = SubmitJobUncommitted(request, &db, &puts);
  if (reply.ok()) CommitAcknowledged(db, puts, log_, "SubmitJob", reply->job_id());
  return reply;
}

absl::StatusOr<v1::SubmitJobReply> Coordinator::SubmitJobUncommitted(
    const v1::SubmitJobRequest& request, StateDb** db, StateDb::QueuedRange* puts) {
  const v1::JobSpec& spec = request.spec();
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return s;
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  *db = state_db_;
  if (state_db_ != nullptr) puts->since = state_db_->QueuedSeq();
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  if (absl::Status s = CheckPsShardsAtSubmit(spec, PsAddressesLocked()); !s.ok()) return s;
  {  // memory need against our limit and the live workers' (submit_memory.h)
    std::vector<int64_t> limits;
    for (const auto& [seq, w] : workers_.all()) {
      if (w.state != v1::LOST) limits.push_back(w.max_job_memory_bytes);
    }
    if (absl::Status s = CheckJobMemoryAtSubmit(spec, options_.max_job_memory_bytes, limits);
        !s.ok()) {
      return s;
    }
  }
  const int k = spec.num_workers();
  if (request.no_wait()) {
    if (absl::Status s = CheckCanStartNow(k, workers_.Idle(), jobs_.pending().size()); !s.ok()) {
      return s;
    }
  }
  Job* j = jobs_.Create(spec, now);
  StateChangedLocked(j);
  LogLocked(LogLevel::kInfo, "job submitted",
            {{"job", j->id},
             {"model", spec.model()},
             {"mode", ModeName(spec)},
             {"workers", k},
             {"batch", spec.global_batch()},
             {"name", spec.name()}});
  ScheduleLocked();
  if (state_db_ != nullptr) puts->until = state_db_->QueuedSeq();
  v1::SubmitJobReply reply;
  reply.set_job_id(j->id);
  reply.set_state(j->state);
  return reply;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(uint64_t job_id) {
  const absl::Time now = clock_->Now();
  absl::Status not_found;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Job*> job = jobs_.FindOrNotFound(job_id);
    if (job.ok()) return StatusLocked(**job, now);
    if (!jobs_.WasEvicted(job_id)) return job.status();
    not_found = job.status();
  }
  return EvictedJobStatus(job_id, not_found);  // from the state database, if any
}

v1::JobList Coordinator::ListJobs(bool with_evicted, uint64_t evicted_before) {
  const absl::Time now = clock_->Now();
  v1::JobList list;
  const bool later_page = with_evicted && evicted_before > 0;
  {
    absl::MutexLock lock(&mu_);
    if (!later_page) {
      for (const auto& [id, job] : jobs_.all()) *list.add_jobs() = StatusLocked(*job, now);
    }
    list.set_evicted_jobs(jobs_.evicted());
    list.set_max_finished_jobs_in_memory(jobs_.limits().max_finished_jobs);
    list.set_state_db_has_evicted(state_db_ != nullptr);
  }
  if (with_evicted) AddEvictedJobs(&list, evicted_before);  // from the database (no lock held)
  return list;
}

v1::WorkerList Coordinator::ListWorkers() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  v1::WorkerList list;
  for (const auto& [seq, w] : workers_.all()) {
    v1::WorkerInfo* info = list.add_workers();
    info->set_worker_id(w.id);
    info->set_address(w.address);
    info->set_data_address(w.data_address);
    info->set_hostname(w.hostname);
    info->set_blas_core(w.blas_core);
    info->set_blas_advice(w.blas_advice);
    info->set_state(w.state);
    info->set_job_id(w.job_id);
    info->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - w.last_seen));
  }
  return list;
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(uint64_t job_id) {
  const absl::Time now = clock_->Now();
  absl::Status not_found;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
    if (!found.ok() && !jobs_.WasEvicted(job_id)) return found.status();
    not_found = found.status();
  }
  // Evicted: it had finished; like a finished job in memory, its status
  // (from the state database; without one NOT_FOUND "evicted").
  if (!not_found.ok()) return EvictedJobStatus(job_id, not_found);
  StateDb* db = nullptr;
  StateDb::QueuedRange puts;
  absl::StatusOr<v1::JobStatus> status;
  {
    Locked lock(this);  // writes this call's log lines after unlocking
    absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
    if (!found.ok()) return found.status();
    Job* job = *found;
    if (!IsTerminalJobState(job->state)) {
      if (state_db_ != nullptr) puts.since = state_db_->QueuedSeq();
      EndJobLocked(job, v1::CANCELLED, "cancelled by user");
      ScheduleLocked();
      if (state_db_ != nullptr) puts.until = state_db_->QueuedSeq();
      db = state_db_;
    }
    status = StatusLocked(*job, now);
  }
  CommitAcknowledged(db, puts, log_, "CancelJob", job_id);
  return status;
}

// GetSyncHistory and GetSyncHistoryPage: coordinator_history.cc.

absl::StatusOr<std::shared_ptr<const FinalWeights>> Coordinator::GetWeights(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
  // An evicted job's weights are served while the store keeps them.
  if (!found.ok() && !jobs_.WasEvicted(job_id)) return found.status();
  std::shared_ptr<const FinalWeights> w = weights_.Get(job_id);
  if (w == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no final weights (not uploaded yet, or evicted: only the last ",
        options_.max_jobs_with_weights, " jobs' weights are kept)"));
  }
  return w;
}

absl::StatusOr<JobSeriesSnapshot> Coordinator::GetJobSeries(uint64_t job_id) {
  absl::Status not_found;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
    if (found.ok()) return (*found)->series.Snapshot();
    if (!jobs_.WasEvicted(job_id)) return found.status();
    not_found = found.status();
  }
  return EvictedJobSeries(job_id, not_found);  // from the state database, if any
}

absl::StatusOr<std::pair<v1::JobStatus, uint64_t>> Coordinator::WaitForJobChange(
    uint64_t job_id, uint64_t seen_version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
  if (!found.ok()) return found.status();
  // The job is looked up again after each wait: a finished job may be
  // evicted meanwhile (coordinator_history.cc).
  auto changed = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const Job* j = jobs_.Find(job_id);
    return j == nullptr || j->watch.version > seen_version;
  };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  found = jobs_.FindOrNotFound(job_id);
  if (!found.ok()) return found.status();
  const Job* job = *found;
  return std::make_pair(StatusLocked(*job, clock_->Now()), job->watch.version);
}

absl::StatusOr<Coordinator::JobEvents> Coordinator::NextJobEvents(uint64_t job_id,
                                                                  uint64_t seen_version,
                                                                  absl::Time last_sent,
                                                                  absl::Time deadline) {
  absl::StatusOr<JobEvents> next = NextJobEventsInMemory(job_id, seen_version, last_sent, deadline);
  if (next.ok() || next.status().code() != absl::StatusCode::kNotFound) return next;
  {
    absl::MutexLock lock(&mu_);
    if (!jobs_.WasEvicted(job_id)) return next;
  }
  // Evicted (before or during the watch): its stored final status, once.
  return EvictedJobEvents(job_id, seen_version, next.status());
}

absl::StatusOr<Coordinator::JobEvents> Coordinator::NextJobEventsInMemory(
    uint64_t job_id, uint64_t seen_version, absl::Time last_sent, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
  if (!found.ok()) return found.status();
  const Job* job = *found;
  const absl::Time not_before = WatchNotBefore(last_sent, options_.watch_interval);
  // Evaluated by absl::Mutex on every release of mu_ while waiting: cheap,
  // and nothing is serialised until it holds. The job is looked up again
  // each time: a finished job may be evicted meanwhile.
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const Job* j = jobs_.Find(job_id);
    return j == nullptr || WatchReady(j->watch, seen_version, clock_->Now(), not_before);
  };
  while (!ready()) {
    job = jobs_.Find(job_id);  // present: ready() was false
    absl::Time wake = deadline;
    if (job->watch.version > seen_version) {
      // Changed, but too soon after the last event: look again when the
      // interval is over (Clock time, mapped onto real time).
      wake = std::min(wake, absl::Now() + (not_before - clock_->Now()));
    }
    if (absl::Now() >= deadline) break;
    mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
  }
  found = jobs_.FindOrNotFound(job_id);
  if (!found.ok()) return found.status();
  job = *found;
  const absl::Time now = clock_->Now();
  return NextEvents(job->watch, seen_version, now, not_before,
                    [&] { return StatusLocked(*job, now); });
}

}  // namespace lockstep
