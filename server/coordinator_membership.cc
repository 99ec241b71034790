// Coordinator facade: membership changes of RUNNING jobs that need the
// worker registry — a lost rank left vacant under on_worker_lost = "wait"
// (and the wait's deadline), idle workers taking a vacant rank or joining
// a shrunk job — and forgetting the coordinator's own ps shards of
// generations nobody uses any more. The rules are plain functions in server/membership.h; the
// contracts are at the top of coordinator.h ("Worker protocol", Tick).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "server/coordinator.h"
#include "server/membership.h"
#include "server/scheduler.h"

namespace lockstep {

bool Coordinator::VacateLockedOnLoss(Job* job, const Worker& lost, const std::string& why) {
  const int rank = lost.rank;
  std::string no_replica;
  if (!VacateRank(job, rank, clock_->Now(), why, &no_replica)) {
    if (no_replica.empty()) return false;
    FailJobLocked(job, std::move(no_replica));  // at once: nobody left to copy from
    return true;
  }
  // The lost worker leaves the job and stays LOST (`lost` is its record).
  if (Worker* w = workers_.Find(lost.id); w != nullptr) {
    WorkerRegistry::Unbind(w);
    w->state = v1::LOST;
  }
  LogLocked(LogLevel::kWarn, "job waiting for a worker",
            {{"job", job->id},
             {"generation", job->membership.generation},
             {"rank", rank},
             {"wait_timeout_s", absl::ToDoubleSeconds(WaitTimeout(*job))},
             {"lost", why}});
  StateChangedLocked(job);
  return true;
}

void Coordinator::JobRegroupedLocked(Job* job) {
  ForgetPsGroupsLocked(*job, job->membership.generation);  // nobody uses them now
  LogLocked(LogLevel::kInfo, "job regrouped",
            {{"job", job->id},
             {"generation", job->membership.generation},
             {"world", job->k},
             {"start_step", job->membership.start_step},
             {"state_source_rank", job->membership.source_rank}});
  StateChangedLocked(job);
}

void Coordinator::ForgetPsGroupsLocked(const Job& job, int64_t below) {
  if (job.spec.sync_mode() != v1::PS) return;
  std::vector<uint64_t> keys;
  for (int64_t g = 0; g < below; ++g) {
    const uint64_t key = GroupKeyLocked(job, g);
    keys.push_back(key);
    keys.push_back(key | kShapeRoundBit);
  }
  if (job.coordinator_ps_shard) {
    if (!options_.forget_ps_group) return;
    for (uint64_t key : keys) options_.forget_ps_group(key);
  } else if (options_.ps_control != nullptr && !job.ps_addresses.empty() && !keys.empty()) {
    options_.ps_control->Forget(job.ps_addresses, std::move(keys));
  }
}

void Coordinator::StartPsKeysLocked(Job* job) {
  if (options_.ps_control == nullptr || job->coordinator_ps_shard || job->ps_addresses.empty() ||
      job->spec.sync_mode() != v1::PS ||
      job->ps_keys_generation == job->membership.generation) {
    return;
  }
  job->ps_keys_generation = job->membership.generation;
  options_.ps_control->StartKeys(job->ps_addresses, PsKeysLocked(*job));
}

std::vector<PsKeyStart> Coordinator::PsKeysLocked(const Job& job) const {
  const uint64_t key = GroupKeyLocked(job, job.membership.generation);
  // A raw-TCP job's shards also get its data-plane secret.
  const std::string secret = job.spec.ps_transport() == v1::TCP
                                 ? dataauth::JobGroupSecret(data_plane_key_, key)
                                 : std::string();
  const int k = static_cast<int>(job.ranks.size());  // the assignments' K
  const int s = static_cast<int>(job.ps_addresses.size());
  return {PsKeyStart{key, secret, k, s}, PsKeyStart{key | kShapeRoundBit, secret, k, s}};
}

void Coordinator::ResendPsKeysLocked(absl::Time now) {
  if (options_.ps_control == nullptr || now - last_ps_keys_resend_ < kPsKeysResendEvery) return;
  last_ps_keys_resend_ = now;
  // One message per shard list (jobs on the same shards share it).
  std::map<std::vector<std::string>, std::vector<PsKeyStart>> by_shards;
  for (const auto& [id, job] : jobs_.all()) {
    // Only generations whose keys went out with an assignment.
    if (job->state != v1::RUNNING || job->coordinator_ps_shard || job->ps_addresses.empty() ||
        job->spec.sync_mode() != v1::PS ||
        job->ps_keys_generation != job->membership.generation) {
      continue;
    }
    std::vector<PsKeyStart>& keys = by_shards[job->ps_addresses];
    for (PsKeyStart& k : PsKeysLocked(*job)) keys.push_back(std::move(k));
  }
  for (auto& [shards, keys] : by_shards) options_.ps_control->StartKeys(shards, std::move(keys));
}

absl::StatusOr<PsKeyShape> Coordinator::PsKeyShapeOf(uint64_t key) const {
  absl::MutexLock l(&mu_);
  const uint64_t group = key & ~kShapeRoundBit;
  for (const auto& [id, job] : jobs_.all()) {
    if (job->state != v1::RUNNING || !job->coordinator_ps_shard) continue;
    if (GroupKeyLocked(*job, job->membership.generation) == group) {
      return PsKeyShape{static_cast<int>(job->ranks.size()),  // the assignments' K
                        static_cast<int>(job->ps_addresses.size())};
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "job key ", key,
      " is no running ps job's current group on this coordinator (never started, or it "
      "ended or regrouped since)"));
}

bool Coordinator::IsDataPlaneSecret(uint64_t job, const std::string& secret) const {
  std::string expected;
  {
    absl::MutexLock l(&mu_);
    expected = dataauth::JobGroupSecret(data_plane_key_, job & ~kShapeRoundBit);
  }
  return dataauth::SecretEqual(secret, expected);
}

void Coordinator::ExpireWaitsLocked(absl::Time now) {
  for (const auto& [id, job] : jobs_.all()) {
    if (job->state != v1::RUNNING || job->membership.vacant.empty()) continue;
    std::string reason;
    if (WaitExpired(*job, now, &reason)) FailJobLocked(job.get(), std::move(reason));
  }
}

void Coordinator::FillOpenRanksLocked() {
  std::vector<Worker*> idle = workers_.Idle();
  if (idle.empty()) return;
  // Each idle worker takes at most one open rank: the first job's (in id
  // order) that it can take (scheduler.h CanTakeRank); one that fits no
  // job stays idle for the next.
  std::vector<bool> taken(idle.size(), false);
  size_t left = idle.size();
  const absl::Time now = clock_->Now();
  for (const auto& [id, job_ptr] : jobs_.all()) {
    if (left == 0) return;
    Job* job = job_ptr.get();
    if (job->state != v1::RUNNING) continue;
    for (int rank = OpenRank(*job); rank >= 0 && left > 0; rank = OpenRank(*job)) {
      size_t i = 0;
      while (i < idle.size() && (taken[i] || !CanTakeRank(*job, *idle[i]))) ++i;
      if (i == idle.size()) break;  // no idle worker fits this job
      Worker* w = idle[i];
      RankRecordLite joiner{w->id, w->address, w->data_address, w->hostname, w->last_seen};
      if (!AddRank(job, rank, std::move(joiner), now)) break;
      taken[i] = true;
      --left;
      w->state = v1::BUSY;
      w->job_id = job->id;
      w->rank = rank;
      const v1::MembershipEvent& e = job->membership.events.back();
      LogLocked(LogLevel::kInfo, e.kind() == "join" ? "worker joined a running job"
                                                     : "worker replaced a lost rank",
                {{"job", job->id},
                 {"worker", w->id},
                 {"rank", rank},
                 {"generation", job->membership.generation},
                 {"world", job->k}});
      StateChangedLocked(job);
    }
  }
}

}  // namespace lockstep
