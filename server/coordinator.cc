// Coordinator facade: construction, the helpers every part of the facade
// uses (job end, scheduling loop, assignments, snapshots) and the worker
// protocol (Heartbeat, Tick; RegisterWorker is in coordinator_register.cc).
// Contracts: coordinator.h.
#include "server/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/membership.h"
#include "server/scheduler.h"

namespace lockstep {

Coordinator::Coordinator(CoordinatorOptions options, Clock* clock)
    : options_(std::move(options)), clock_(clock),
      log_(LoggerOrStderr(options_.logger, "coordinator")),
      jobs_(JobStoreLimits{SyncHistoryLimits{std::max<int64_t>(1, options_.max_sync_history),
                                              SyncHistoryLimits().max_mismatches,
                                              SyncHistoryLimits().max_runs},
                           JobStoreLimits().finished_history,
                           options_.max_finished_jobs_in_memory}),
      weights_(options_.max_jobs_with_weights) {
  // Milliseconds since 2023-11-14 (unix 1.7e9 s): a later start gets a
  // larger incarnation; 43 bits last 278 years. A clock before that (tests'
  // fake clocks) gives 1.
  constexpr uint64_t kMaxIncarnation = (uint64_t{1} << 43) - 1;
  incarnation_ = options_.incarnation & kMaxIncarnation;
  if (incarnation_ == 0) {
    const int64_t ms = absl::ToUnixMillis(clock_->Now()) - int64_t{1700000000} * 1000;
    incarnation_ = static_cast<uint64_t>(
        std::clamp<int64_t>(ms, 1, static_cast<int64_t>(kMaxIncarnation)));
  }
  absl::MutexLock lock(&mu_);
  advertise_ = options_.advertise_address;
}

void Coordinator::SetAdvertiseAddress(std::string address) {
  absl::MutexLock lock(&mu_);
  advertise_ = std::move(address);
}

// ---- helpers ----------------------------------------------------------------

absl::StatusOr<Coordinator::Job*> Coordinator::ReportingJobLocked(
    uint64_t job_id, const std::string& worker_id, int rank) {
  absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
  if (!found.ok()) return found.status();
  const Job& job = **found;
  if (rank < 0 || rank >= job.k) {
    return absl::InvalidArgumentError(absl::StrCat("rank: expected in [0, ", job.k,
                                                   ") for job ", job.id, ", got ", rank));
  }
  if (job.ranks.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker_id, " cannot report as rank ", rank, " of job ", job.id,
        ": the job never started (", v1::JobState_Name(job.state), ")"));
  }
  const Rank& r = job.ranks[rank];
  if (r.worker_id != worker_id) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " is not rank ",
                                                      rank, " of job ", job.id, " (rank ",
                                                      rank, " is ", r.worker_id, ")"));
  }
  return *found;
}

void Coordinator::BumpLocked(Job* job) {
  versions_.Bump(&job->watch);
  jobs_.Changed(*job);
}

void Coordinator::StateChangedLocked(Job* job) {
  versions_.StateChanged(&job->watch, StatusLocked(*job, clock_->Now()));
  jobs_.Changed(*job);
}

void Coordinator::EndJobLocked(Job* job, v1::JobState state, std::string reason) {
  if (job->state == v1::PENDING) jobs_.RemovePending(job->id);
  job->state = state;
  job->reason = std::move(reason);
  job->finished = clock_->Now();
  job->sync.ClearPending();
  weights_.AbortUpload(job->id);
  if (state != v1::SUCCEEDED) weights_.Drop(job->id);
  ForgetPsGroupsLocked(*job, job->membership.generation + 1);
  if (state == v1::SUCCEEDED) {
    LogLocked(LogLevel::kInfo, "job succeeded",
              {{"job", job->id}, {"steps", job->steps_done}, {"final_hash", job->final_hash},
               {"test_accuracy", job->test_accuracy}});
  } else {
    LogLocked(state == v1::FAILED ? LogLevel::kError : LogLevel::kInfo,
              state == v1::FAILED ? "job failed" : "job cancelled",
              {{"job", job->id}, {"steps", job->steps_done}, {"reason", job->reason}});
  }
  StateChangedLocked(job);
}

void Coordinator::FailJobLocked(Job* job, std::string reason) {
  EndJobLocked(job, v1::FAILED, std::move(reason));
}

std::vector<std::string> Coordinator::PsAddressesLocked() const {
  return PsAddresses(options_.ps_addresses, advertise_);
}

void Coordinator::ScheduleLocked() {
  if (draining_) return;
  FillOpenRanksLocked();  // running jobs first (membership.h)
  while (!jobs_.pending().empty()) {
    Job* job = jobs_.Find(jobs_.pending().front());
    if (job == nullptr || job->state != v1::PENDING) {
      jobs_.PopPending();
      continue;
    }
    std::vector<Worker*> idle = workers_.Idle();
    if (!job->spec.resume_from().checkpoint_dir().empty()) {
      // The worker that wrote the checkpoint reads it (scheduler.h).
      const Job* from = jobs_.Find(job->spec.resume_from().job_id());
      if (from != nullptr && !from->ranks.empty()) {
        PreferAsRankZero(from->ranks[0].worker_id, &idle);
      }
    }
    if (job->spec.sync_mode() != v1::PS && job->spec.peer_transport() == v1::SHM) {
      PreferOneHost(job->k, &idle);  // after the writer's preference: one host wins
    }
    StartPlan plan = PlanStart(*job, idle, PsAddressesLocked());
    if (plan.kind == StartPlan::kWait) return;  // strict FIFO
    if (plan.kind == StartPlan::kFail) {
      FailJobLocked(job, std::move(plan.fail_reason));
      continue;
    }
    jobs_.PopPending();
    BindRanks(job, idle, std::move(plan.ps_addresses), clock_->Now());
    job->coordinator_ps_shard = job->spec.sync_mode() == v1::PS && options_.ps_addresses.empty();
    StateChangedLocked(job);
    std::vector<std::string> ids;
    for (const Rank& r : job->ranks) ids.push_back(r.worker_id);
    std::vector<LogField> fields = {{"job", job->id},
                                    {"mode", ModeName(job->spec)},
                                    {"workers", absl::StrJoin(ids, ",")}};
    if (!job->ps_addresses.empty()) {
      fields.emplace_back("ps", absl::StrJoin(job->ps_addresses, ","));
    }
    LogLocked(LogLevel::kInfo, "job started", std::move(fields));
  }
}

uint64_t Coordinator::GroupKeyLocked(const Job& job, int64_t generation) const {
  // 43 + 20 bits: bit 63 stays clear for the workers' shape-agreement key.
  // Job ids past 2^20 in one coordinator's life wrap onto jobs a million
  // submissions old, long forgotten by workers (1024) and ps servers (8).
  return GenerationKey((incarnation_ << 20) | (job.id & 0xfffffu), generation);
}

v1::Assignment Coordinator::AssignmentLocked(const Job& job, int rank) const {
  v1::Assignment a;
  a.set_job_id(job.id);
  a.set_group_key(GroupKeyLocked(job, job.membership.generation));
  // Per group key: a regroup's new generation gets a new one.
  a.set_data_plane_secret(dataauth::JobGroupSecret(data_plane_key_, a.group_key()));
  *a.mutable_spec() = job.spec;
  a.set_rank(rank);
  for (const Rank& r : job.ranks) a.add_peer_addresses(r.address);
  for (const Rank& r : job.ranks) a.add_data_addresses(r.data_address);
  for (const std::string& p : job.ps_addresses) a.add_ps_addresses(p);
  a.set_coordinator_ps_shard(job.coordinator_ps_shard);
  a.set_checkpoint_source(CheckpointSourceLocked(job));
  FillMembership(job, &a);
  if (a.start_ready() && a.state_source_rank() >= 0 &&
      a.state_source_rank() < static_cast<int>(job.ranks.size()) &&
      job.ranks[a.state_source_rank()].done) {
    // A rank that finished offers its final state under the key of the
    // generation it finished in (membership.h RegroupAfterRestart).
    a.set_state_source_group_key(
        GroupKeyLocked(job, job.ranks[a.state_source_rank()].done_generation));
  }
  return a;
}

std::string Coordinator::CheckpointSourceLocked(const Job& job) const {
  if (job.spec.resume_from().checkpoint_dir().empty() || job.ranks.empty()) return "";
  const Job* from = jobs_.Find(job.spec.resume_from().job_id());
  if (from == nullptr || from->ranks.empty()) return "";
  const std::string& writer = from->ranks[0].worker_id;  // rank 0 wrote them
  if (writer == job.ranks[0].worker_id) return "";       // it reads them itself
  for (const auto& [seq, w] : workers_.all()) {
    if (w.id == writer) return w.state == v1::LOST ? "" : w.address;
  }
  return "";
}

v1::JobStatus Coordinator::StatusLocked(const Job& job, absl::Time now) const {
  return JobStatusOf(job, now, weights_.Has(job.id));
}

// ---- worker protocol --------------------------------------------------------


absl::StatusOr<v1::HeartbeatReply> Coordinator::Heartbeat(const v1::HeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  v1::HeartbeatReply reply;
  Worker* w = workers_.Find(request.worker_id());
  // Another process holding this id (a coordinator restarted without
  // --state_dir gave it to the worker that registered first): that process
  // registers again and gets its own id. Checked when both sides know the
  // process (a restored record or an older worker may not).
  const bool other_process = w != nullptr && w->pid != 0 && request.pid() != 0 &&
                             !SameProcess(*w, request.hostname(), request.pid());
  if (w == nullptr || other_process) {
    reply.set_reregister(true);
    return reply;
  }
  Job* bound = w->job_id != 0 ? jobs_.Find(w->job_id) : nullptr;
  Rank* rank = nullptr;
  if (bound != nullptr && w->rank >= 0 && w->rank < static_cast<int>(bound->ranks.size()) &&
      bound->ranks[w->rank].worker_id == w->id) {
    rank = &bound->ranks[w->rank];
    rank->last_heartbeat = now;
  }
  if (workers_.Seen(w, now)) {
    LogLocked(LogLevel::kInfo, "worker back",
              {{"worker", w->id}, {"address", w->address}, {"job", w->job_id}});
  }

  if (request.job_id() != 0) {
    if (rank != nullptr && request.job_id() == bound->id && bound->state == v1::RUNNING) {
      rank->acknowledged = true;
      // Checked before use: a peer of this job's current generation, a
      // wait of at most a day.
      const bool current = request.generation() == bound->membership.generation;
      const bool waits = current && request.waiting_for_peer() > 0 &&
                         request.waiting_for_peer() <= bound->k;
      rank->waiting_for = waits ? request.waiting_for_peer() - 1 : -1;
      const bool waits_shard =
          current && request.waiting_for_shard() > 0 &&
          request.waiting_for_shard() <= static_cast<int>(bound->ps_addresses.size());
      rank->waiting_for_shard = waits_shard ? request.waiting_for_shard() - 1 : -1;
      rank->waited = absl::Milliseconds(
          std::clamp<int64_t>(request.waiting_ms(), 0, int64_t{24} * 3600 * 1000));
      rank->waiting_reported = now;
      if (current && request.probe_id() != 0 && request.reachable_ranks_size() <=
                       std::max<int>(bound->k, bound->ps_addresses.size()) + kMaxWitnesses) {
        RecordProbeAnswer(bound, w->rank, request.probe_id(), request.reachable_ranks());
      }
      if (FailStuckCombineLocked(bound, now)) {
        if (bound->state == v1::RUNNING && w->job_id == bound->id) {
          // Regrouped without another rank: this one's new assignment.
          StartPsKeysLocked(bound);
          *reply.mutable_assignment() = AssignmentLocked(*bound, w->rank);
        } else {
          reply.set_stop_job(true);  // failed, or this worker was dropped
        }
        return reply;
      }
      // It runs the job after a restart: its done report will come by
      // itself; running nothing later without one is abandoning it.
      rank->done_asks_left = 0;
      // Membership (membership.h): a rank holding its state for a regroup.
      if (request.holds_state() &&
          RecordHeldStep(bound, w->rank, request.generation(), request.held_step())) {
        JobRegroupedLocked(bound);
      }
      if (NeedsAssignment(*bound, request.generation(), request.holds_state())) {
        StartPsKeysLocked(bound);
        *reply.mutable_assignment() = AssignmentLocked(*bound, w->rank);
      }
      FillProbeLocked(*bound, w->rank, &reply);
    } else {
      reply.set_stop_job(true);
    }
    if (w->state == v1::IDLE) ScheduleLocked();
    return reply;
  }

  // job_id == 0: the worker runs nothing.
  if (bound != nullptr && rank != nullptr && bound->state == v1::RUNNING &&
      rank->acknowledged && !rank->done) {
    if (rank->done_asks_left > 0) {
      // Restored after a restart (coordinator_state.cc): its ReportDone
      // may have been accepted but not committed; ask for it again.
      --rank->done_asks_left;
      reply.set_resend_done_job_id(bound->id);
      reply.set_resend_reports_from_step(std::max<int64_t>(0, rank->last_step + 1));
      return reply;
    }
    FailJobLocked(bound, absl::StrFormat(
                             "rank %d (%s, %s) abandoned the job: it reported no job "
                             "before sending ReportDone",
                             w->rank, w->id, w->address));
  }
  if (w->job_id != 0 && (bound == nullptr || bound->state != v1::RUNNING)) {
    WorkerRegistry::Unbind(w);
  }
  ScheduleLocked();
  if (w->job_id != 0) {
    Job* job = jobs_.Find(w->job_id);
    if (job != nullptr && job->state == v1::RUNNING &&
        !job->ranks[w->rank].acknowledged) {
      StartPsKeysLocked(job);
      *reply.mutable_assignment() = AssignmentLocked(*job, w->rank);
    }
  }
  return reply;
}

void Coordinator::Tick() {
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  for (const WorkerRegistry::Lost& lost : workers_.MarkLost(now, options_.lost_after)) {
    const Worker& w = *lost.worker;
    LogLocked(LogLevel::kWarn, "worker lost",
              {{"worker", w.id},
               {"address", w.address},
               {"silent_s", absl::ToDoubleSeconds(lost.silent)},
               {"job", w.job_id}});
    if (w.job_id == 0) continue;
    Job* job = jobs_.Find(w.job_id);
    if (job != nullptr && job->state == v1::RUNNING) {
      LoseWorkerLocked(job, w,
                       absl::StrFormat("%s lost: no heartbeat for %.1fs", WorkerInJob(w),
                                       absl::ToDoubleSeconds(lost.silent)));
    }
  }
  ExpireWaitsLocked(now);
  ScheduleLocked();
  ResendPsKeysLocked(now);
  EvictFinishedJobsLocked();
}

void Coordinator::RenumberLocked(const ShrinkResult& shrunk) {
  for (size_t r = 0; r < shrunk.workers.size(); ++r) {
    if (Worker* w = workers_.Find(shrunk.workers[r]); w != nullptr) {
      w->rank = static_cast<int>(r);
    }
  }
}

bool Coordinator::LoseWorkerLocked(Job* job, const Worker& gone, const std::string& why) {
  // "shrink" regroups the survivors, "wait" leaves the rank vacant until an
  // idle worker takes it (membership.h); "fail" ends the job.
  if (ShrinksOnLoss(*job) && ShrinkLockedOnLoss(job, gone, why)) return job->state == v1::RUNNING;
  if (WaitsOnLoss(*job) && VacateLockedOnLoss(job, gone, why)) return job->state == v1::RUNNING;
  FailJobLocked(job, why);
  return false;
}

bool Coordinator::ShrinkLockedOnLoss(Job* job, const Worker& lost, const std::string& why) {
  const int lost_rank = lost.rank;
  ShrinkResult shrunk = ShrinkJob(job, lost_rank, clock_->Now(), why);
  if (!shrunk.shrunk && !shrunk.no_replica.empty()) {
    FailJobLocked(job, std::move(shrunk.no_replica));  // at once: nobody left to copy from
    return true;
  }
  if (!shrunk.shrunk) return false;
  // The lost worker leaves the job (and stays LOST: never scheduled until
  // it heartbeats again); the survivors take their new ranks.
  if (Worker* w = workers_.Find(lost.id); w != nullptr) {
    WorkerRegistry::Unbind(w);
    w->state = v1::LOST;
  }
  RenumberLocked(shrunk);
  LogLocked(LogLevel::kWarn, "job shrinking",
            {{"job", job->id},
             {"generation", job->membership.generation},
             {"world", job->k},
             {"lost", why}});
  StateChangedLocked(job);
  return true;
}

Coordinator::Counters Coordinator::counters() {
  absl::MutexLock lock(&mu_);
  Counters c;
  c.workers_lost = workers_.lost_total();
  return c;
}

}  // namespace lockstep
