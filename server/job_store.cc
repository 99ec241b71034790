#include "server/job_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

namespace {

double UnixSeconds(absl::Time t) {
  return t == absl::InfinitePast() ? 0.0 : absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace

bool IsTerminalJobState(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

std::string JobNotFoundMessage(uint64_t job_id) {
  return absl::StrCat("job ", job_id, " not found");
}

v1::JobStatus JobStatusOf(const JobRecord& job, absl::Time now, bool has_weights) {
  v1::JobStatus s;
  s.set_job_id(job.id);
  *s.mutable_spec() = job.spec;
  s.set_state(job.state);
  s.set_reason(job.reason);
  s.set_step(job.steps_done);
  s.set_total_steps(job.total_steps);
  s.set_epoch(job.epoch);
  s.set_loss(job.loss);
  s.set_test_accuracy(job.test_accuracy);
  s.set_test_loss(job.test_loss);
  s.set_examples_per_second(job.examples_per_second);
  s.set_out_of_sync(job.out_of_sync);
  s.set_repairs(job.sync.repairs());
  s.set_evaluated(job.series.evals_offered() > 0);
  s.set_last_divergence(job.sync.last_divergence());
  s.set_generation(job.membership.generation);
  s.set_world(job.k);
  s.set_regrouping(job.membership.regrouping);
  for (const v1::MembershipEvent& e : job.membership.events) *s.add_membership_events() = e;
  FillMembershipStatus(job, &s);
  s.set_checked_steps(CheckedStepsOf(job));
  s.set_mismatched_steps(MismatchedStepsOf(job));
  s.set_skipped_steps(job.skipped_steps);
  if (job.skipped_steps > 0) {
    s.set_last_skipped_step(job.last_skipped_step);
    for (int32_t r : job.last_nonfinite_ranks) s.add_last_nonfinite_ranks(r);
  }
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    const RankRecord& rank = job.ranks[r];
    v1::RankStatus* rs = s.add_ranks();
    rs->set_rank(static_cast<int32_t>(r));
    rs->set_worker_id(rank.worker_id);
    rs->set_address(rank.address);
    rs->set_data_address(rank.data_address);
    rs->set_hostname(rank.hostname);
    rs->set_step(rank.last_step + 1);
    rs->set_last_hash(rank.last_hash);
    rs->set_in_sync(rank.in_sync);
    rs->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - rank.last_heartbeat));
    const StepTimes m = rank.timing.Medians();
    rs->set_median_step_seconds(m.step);
    rs->set_median_compute_seconds(m.compute);
    rs->set_median_communication_seconds(m.communication);
    rs->set_median_exposed_seconds(m.exposed);
    rs->set_median_peer_wait_seconds(m.peer_wait);
    rs->set_resident_bytes(rank.resident_bytes);
    if (rank.waiting_for >= 0 || rank.waiting_for_shard >= 0) {
      rs->set_waiting_for_peer(rank.waiting_for + 1);
      rs->set_waiting_for_shard(rank.waiting_for_shard + 1);
      rs->set_waiting_s(absl::ToDoubleSeconds(rank.waited));
    }
  }
  s.set_submitted_unix_s(UnixSeconds(job.submitted));
  s.set_started_unix_s(UnixSeconds(job.started));
  s.set_finished_unix_s(UnixSeconds(job.finished));
  s.set_final_hash(job.final_hash);
  s.set_has_weights(has_weights);
  return s;
}

JobStore::JobStore(JobStoreLimits limits) : limits_([&] {
  limits.max_finished_jobs = std::max<int64_t>(1, limits.max_finished_jobs);
  return limits;
}()) {}

JobRecord* JobStore::Create(const v1::JobSpec& spec, absl::Time now) {
  auto job = std::make_unique<JobRecord>();
  job->id = next_id_++;
  job->spec = spec;
  job->k = spec.num_workers();
  job->sync = SyncChecker(job->k, limits_.running_history);
  job->submitted = now;
  job->total_steps = spec.steps();
  JobRecord* j = job.get();
  jobs_.emplace(j->id, std::move(job));
  pending_.push_back(j->id);
  return j;
}

JobRecord* JobStore::Find(uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const JobRecord* JobStore::Find(uint64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

absl::StatusOr<JobRecord*> JobStore::FindOrNotFound(uint64_t id) {
  JobRecord* job = Find(id);
  if (job == nullptr && WasEvicted(id)) {
    return absl::NotFoundError(absl::StrCat(
        "job ", id, " was evicted from memory (the coordinator keeps the newest ",
        limits_.max_finished_jobs, " finished jobs: --max_finished_jobs_in_memory)"));
  }
  if (job == nullptr) return absl::NotFoundError(JobNotFoundMessage(id));
  return job;
}

bool JobStore::WasEvicted(uint64_t id) const {
  return evicted_ > 0 && id >= 1 && id < next_id_ && jobs_.count(id) == 0;
}

void JobStore::NoteIfFinished(JobRecord& job) {
  if (job.finish_noted || !IsTerminalJobState(job.state)) return;
  job.finish_noted = true;
  job.sync.FinishHistory(limits_.finished_history);
  finished_.push_back(job.id);
}

std::vector<uint64_t> JobStore::EvictFinished(const std::function<bool(uint64_t)>& may_evict) {
  std::vector<uint64_t> out;
  const size_t bound = static_cast<size_t>(limits_.max_finished_jobs);
  if (finished_.size() <= bound) return out;
  std::deque<uint64_t> kept;
  size_t excess = finished_.size() - bound;
  for (uint64_t id : finished_) {
    if (excess > 0 && may_evict(id)) {
      jobs_.erase(id);
      out.push_back(id);
      --excess;
      ++evicted_;
    } else {
      kept.push_back(id);
    }
  }
  finished_ = std::move(kept);
  return out;
}

JobRecord* JobStore::Restore(std::unique_ptr<JobRecord> job) {
  JobRecord* j = job.get();
  next_id_ = std::max(next_id_, j->id + 1);
  jobs_[j->id] = std::move(job);
  if (j->state == v1::PENDING) pending_.push_back(j->id);
  NoteIfFinished(*j);
  return j;
}

void JobStore::RemovePending(uint64_t id) {
  pending_.erase(std::remove(pending_.begin(), pending_.end(), id), pending_.end());
}

}  // namespace lockstep
