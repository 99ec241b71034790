// Membership: shrink a job's group on a lost worker. Contract: membership.h.
#include "server/membership.h"

#include <algorithm>
#include <utility>

#include "server/job_store.h"

namespace lockstep {

bool ShrinksOnLoss(const JobRecord& job) { return job.spec.on_worker_lost() == "shrink"; }

ShrinkResult ShrinkJob(JobRecord* job, int lost_rank, absl::Time now,
                       const std::string& reason) {
  ShrinkResult result;
  const int k = static_cast<int>(job->ranks.size());
  if (k <= 1 || lost_rank < 0 || lost_rank >= k) return result;
  for (const RankRecord& r : job->ranks) {
    if (r.done) return result;  // the job is at its end: nothing to regroup
  }
  MembershipState& m = job->membership;
  v1::MembershipEvent e;
  e.set_kind("shrink");
  e.set_generation(m.generation + 1);
  e.set_world_before(k);
  e.set_world_after(k - 1);
  e.set_worker_id(job->ranks[lost_rank].worker_id);
  e.set_rank(lost_rank);
  e.set_step(-1);
  e.set_unix_s(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  e.set_reason(reason);
  m.events.push_back(std::move(e));
  while (m.events.size() > kMaxMembershipEvents) m.events.pop_front();

  ++m.generation;
  m.regrouping = true;
  m.start_step = -1;
  m.source_rank = -1;
  job->ranks.erase(job->ranks.begin() + lost_rank);
  job->k = k - 1;
  job->sync.Regroup(job->k);
  for (RankRecord& r : job->ranks) {
    r.held_generation = -1;
    r.held_step = -1;
    r.in_sync = true;
    result.workers.push_back(r.worker_id);
  }
  result.shrunk = true;
  return result;
}

bool RecordHeldStep(JobRecord* job, int rank, int64_t generation, int64_t held_step) {
  MembershipState& m = job->membership;
  if (!m.regrouping || generation != m.generation || rank < 0 ||
      rank >= static_cast<int>(job->ranks.size()) || held_step < 0) {
    return false;
  }
  job->ranks[rank].held_generation = generation;
  job->ranks[rank].held_step = held_step;
  int64_t s = -1;
  int source = -1;
  for (size_t r = 0; r < job->ranks.size(); ++r) {
    const RankRecord& rr = job->ranks[r];
    if (rr.held_generation != m.generation) return false;  // someone has not said yet
    if (rr.held_step > s) {
      s = rr.held_step;
      source = static_cast<int>(r);
    }
  }
  m.regrouping = false;
  m.start_step = s;
  m.source_rank = source;
  for (RankRecord& rr : job->ranks) rr.last_step = s - 1;
  job->sync.Regroup(job->k);  // nothing of the old generation completes
  job->steps_done = std::max(job->steps_done, s);
  if (!m.events.empty() && m.events.back().generation() == m.generation) {
    m.events.back().set_step(s);
  }
  return true;
}

bool NeedsAssignment(const JobRecord& job, int64_t generation, bool holds_state) {
  const MembershipState& m = job.membership;
  if (generation < m.generation) return true;
  return generation == m.generation && holds_state && !m.regrouping && m.start_step >= 0;
}

void FillMembership(const JobRecord& job, v1::Assignment* a) {
  const MembershipState& m = job.membership;
  a->set_generation(m.generation);
  if (m.generation > 0 && !m.regrouping && m.start_step >= 0) {
    a->set_start_ready(true);
    a->set_start_step(m.start_step);
    a->set_state_source_rank(m.source_rank);
  }
}

uint64_t GenerationKey(uint64_t base, int64_t generation) {
  if (generation == 0) return base;
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  uint64_t key = (base ^ (static_cast<uint64_t>(generation) * kGolden)) & ~(uint64_t{1} << 63);
  return key == 0 ? 1 : key;
}

}  // namespace lockstep
