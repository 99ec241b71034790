// Membership: shrink a job's group on a lost worker, wait for a
// replacement, add joiners. Contract: membership.h.
#include "server/membership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/train/job_spec_convert.h"
#include "server/job_store.h"

namespace lockstep {

bool ShrinksOnLoss(const JobRecord& job) { return job.spec.on_worker_lost() == "shrink"; }
bool WaitsOnLoss(const JobRecord& job) { return job.spec.on_worker_lost() == "wait"; }

absl::Duration WaitTimeout(const JobRecord& job) { return WorkerLostWaitTimeout(job.spec); }

int RankToDropWhenStuck(const std::vector<int>& waiting_for) {
  const int k = static_cast<int>(waiting_for.size());
  std::vector<int> waited(static_cast<size_t>(k), 0);
  for (int r = 0; r < k; ++r) {
    const int peer = waiting_for[static_cast<size_t>(r)];
    if (peer < 0 || peer >= k || peer == r) return -1;
    ++waited[static_cast<size_t>(peer)];
  }
  if (k == 2) return 1;
  int best = -1;
  bool unique = false;
  for (int r = 0; r < k; ++r) {
    if (best < 0 || waited[static_cast<size_t>(r)] > waited[static_cast<size_t>(best)]) {
      best = r;
      unique = true;
    } else if (waited[static_cast<size_t>(r)] == waited[static_cast<size_t>(best)]) {
      unique = false;
    }
  }
  return unique ? best : -1;
}

namespace {

// Bron-Kerbosch with pivoting over 64-bit rank sets: every maximal set of
// ranks that reach each other, keeping the best (LargestMutuallyReachable).
// *budget bounds the calls: the number of maximal sets can grow
// exponentially with K (64 ranks in 32 cut pairs have 2^32), and this runs
// under the coordinator's lock. A branch that cannot reach the best size
// found is not explored.
void MaximalCliques(const std::vector<uint64_t>& adj, uint64_t r, uint64_t p, uint64_t x,
                    uint64_t* best, int64_t* budget) {
  if (--*budget < 0) return;
  if (__builtin_popcountll(r | p) < __builtin_popcountll(*best)) return;
  if (p == 0 && x == 0) {
    const int n = __builtin_popcountll(r), b = __builtin_popcountll(*best);
    // Same size: the set that holds the lowest rank where the two differ.
    const uint64_t diff = r ^ *best;
    if (n > b || (n == b && diff != 0 && (r & diff & (~diff + 1)) != 0)) *best = r;
    return;
  }
  const int pivot = __builtin_ctzll(p | x);
  for (uint64_t cand = p & ~adj[static_cast<size_t>(pivot)]; cand != 0; cand &= cand - 1) {
    const int v = __builtin_ctzll(cand);
    const uint64_t bit = uint64_t{1} << v;
    MaximalCliques(adj, r | bit, p & adj[static_cast<size_t>(v)], x & adj[static_cast<size_t>(v)],
                   best, budget);
    if (*budget < 0) return;
    p &= ~bit;
    x |= bit;
  }
}

}  // namespace

std::vector<int> LargestMutuallyReachable(const std::vector<std::vector<bool>>& reach) {
  const int k = static_cast<int>(reach.size());
  if (k == 0 || k > kMaxProbedRanks) return {};
  std::vector<uint64_t> adj(static_cast<size_t>(k), 0);  // both ways, no self
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) {
      const auto at = [&](int a, int b) {
        const std::vector<bool>& row = reach[static_cast<size_t>(a)];
        return static_cast<size_t>(b) < row.size() && row[static_cast<size_t>(b)];
      };
      if (i != j && at(i, j) && at(j, i)) adj[static_cast<size_t>(i)] |= uint64_t{1} << j;
    }
  }
  const uint64_t all = k == 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1;
  uint64_t best = 0;
  int64_t budget = kMaxCliqueSteps;
  MaximalCliques(adj, 0, all, 0, &best, &budget);
  if (budget < 0) return {};  // too many groups to compare
  std::vector<int> keep;
  for (int i = 0; i < k; ++i) {
    if ((best >> i) & 1) keep.push_back(i);
  }
  return keep;
}

std::vector<int> RanksReachingEveryShard(const std::vector<std::vector<bool>>& reach,
                                         int shards) {
  std::vector<int> keep;
  for (size_t r = 0; r < reach.size(); ++r) {
    bool all = static_cast<int>(reach[r].size()) >= shards;
    for (int s = 0; all && s < shards; ++s) all = reach[r][static_cast<size_t>(s)];
    if (all) keep.push_back(static_cast<int>(r));
  }
  return keep;
}

bool RecordProbeAnswer(JobRecord* job, int rank, uint64_t id,
                       const google::protobuf::RepeatedField<int32_t>& reachable) {
  MembershipState::ReachProbe& p = job->membership.probe;
  const int k = static_cast<int>(job->ranks.size());
  if (id == 0 || id != p.id || p.generation != job->membership.generation || rank < 0 ||
      rank >= k || static_cast<int>(p.answered.size()) != k || p.width < 0) {
    return false;
  }
  std::vector<bool> row(static_cast<size_t>(p.width), false);
  if (!p.shards && rank < p.width) row[static_cast<size_t>(rank)] = true;
  for (int32_t r : reachable) {
    if (r >= 0 && r < p.width) row[static_cast<size_t>(r)] = true;
  }
  p.reachable[static_cast<size_t>(rank)] = std::move(row);
  p.answered[static_cast<size_t>(rank)] = true;
  return true;
}

void RecordDroppedWorker(JobRecord* job, const std::string& worker_id) {
  std::deque<std::string>& d = job->membership.dropped_workers;
  d.push_back(worker_id);
  while (d.size() > kMaxDroppedWorkers) d.pop_front();
}

void RestoreDroppedWorkers(JobRecord* job) {
  job->membership.dropped_workers.clear();
  for (const v1::MembershipEvent& e : job->membership.events) {
    if ((e.kind() == "shrink" || e.kind() == "wait") && !e.worker_id().empty() &&
        (e.reason().find(kDroppedUnreachable) != std::string::npos ||
         e.reason().find(kDroppedNoShard) != std::string::npos)) {
      RecordDroppedWorker(job, e.worker_id());
    }
  }
}

bool WasDropped(const JobRecord& job, const std::string& worker_id) {
  const std::deque<std::string>& d = job.membership.dropped_workers;
  return std::find(d.begin(), d.end(), worker_id) != d.end();
}

namespace {

double UnixSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

void AddEvent(MembershipState* m, v1::MembershipEvent e) {
  m->events.push_back(std::move(e));
  while (m->events.size() > kMaxMembershipEvents) m->events.pop_front();
}

bool IsVacant(const MembershipState& m, int rank) {
  return std::find(m.vacant.begin(), m.vacant.end(), rank) != m.vacant.end();
}

// What a rank said of the previous generation: which step it held, and the
// peer or shard its combine waited for (numbered in that generation).
void ForgetGenerationReports(RankRecord* r) {
  r->held_generation = -1;
  r->held_step = -1;
  r->in_sync = true;
  r->waiting_for = -1;
  r->waiting_for_shard = -1;
  r->waited = absl::ZeroDuration();
}

// A new generation of the same group: every rank says again which step it
// holds; nothing of the old generation completes.
void NewGeneration(JobRecord* job) {
  MembershipState& m = job->membership;
  ++m.generation;
  m.regrouping = true;
  m.start_step = -1;
  m.source_rank = -1;
  job->sync.Regroup(job->k);
  for (RankRecord& r : job->ranks) ForgetGenerationReports(&r);
}

// JobRecord::reason while ranks are vacant (waiting_for: the first loss).
std::string WaitingReason(const MembershipState& m) {
  if (m.vacant.size() == 1) {
    return absl::StrCat("waiting for a worker to replace rank ", m.vacant.front(),
                        " (lost: ", m.waiting_for, ")");
  }
  std::string ranks;
  for (int r : m.vacant) absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
  return absl::StrCat("waiting for workers to replace ranks ", ranks, " (first lost: ",
                      m.waiting_for, ")");
}

// A rank other than `lost_rank` holds a replica (a joiner holds none
// until it has trained a step; a vacant rank none).
bool OtherHolderLeft(const JobRecord& job, int lost_rank) {
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    if (r != lost_rank && !IsVacant(job.membership, r) && job.ranks[r].holds_replica) return true;
  }
  return false;
}

bool AnyDone(const JobRecord& job) {
  for (const RankRecord& r : job.ranks) {
    if (r.done) return true;
  }
  return false;
}

}  // namespace

std::string NoReplicaLeft(const JobRecord& job, int lost_rank, const std::string& reason) {
  const int k = static_cast<int>(job.ranks.size());
  if (k <= 1 || OtherHolderLeft(job, lost_rank)) return "";
  std::string out = absl::StrCat("no rank holding a replica of the job's state is left at step ",
                                 job.steps_done, " (nothing to copy from): rank ", lost_rank,
                                 " lost: ", reason);
  std::string vacant, joiners;
  for (int r = 0; r < k; ++r) {
    if (r == lost_rank) continue;
    if (IsVacant(job.membership, r)) {
      absl::StrAppend(&vacant, vacant.empty() ? "" : ", ", r);
    } else {
      absl::StrAppend(&joiners, joiners.empty() ? "" : ", ", r, " (", job.ranks[r].worker_id,
                      ")");
    }
  }
  if (!vacant.empty()) {
    absl::StrAppend(&out, "; rank(s) ", vacant, " vacant (first lost: ",
                    job.membership.waiting_for, ")");
  }
  if (!joiners.empty()) {
    absl::StrAppend(&out, "; rank(s) ", joiners,
                    " joined and had not received the job's state yet");
  }
  return out;
}

bool VacateRank(JobRecord* job, int lost_rank, absl::Time now, const std::string& reason,
                std::string* no_replica) {
  const int k = static_cast<int>(job->ranks.size());
  MembershipState& m = job->membership;
  if (lost_rank < 0 || lost_rank >= k || IsVacant(m, lost_rank)) return false;
  if (AnyDone(*job)) return false;  // the job is at its end: nothing to wait for
  if (!OtherHolderLeft(*job, lost_rank)) {
    if (no_replica != nullptr) *no_replica = NoReplicaLeft(*job, lost_rank, reason);
    return false;
  }
  v1::MembershipEvent e;
  e.set_kind("wait");
  e.set_generation(m.generation + 1);
  e.set_world_before(k);
  e.set_world_after(k);
  e.set_worker_id(job->ranks[lost_rank].worker_id);
  e.set_rank(lost_rank);
  e.set_step(-1);
  e.set_unix_s(UnixSeconds(now));
  e.set_reason(reason);
  AddEvent(&m, std::move(e));

  RankRecord& lost = job->ranks[lost_rank];
  lost.worker_id.clear();
  lost.address.clear();
  lost.data_address.clear();
  lost.hostname.clear();
  lost.acknowledged = false;
  lost.last_hash.clear();
  m.vacant.insert(std::upper_bound(m.vacant.begin(), m.vacant.end(), lost_rank), lost_rank);
  if (m.waiting_since == absl::InfinitePast()) {
    m.waiting_since = now;
    m.waiting_for = reason;
  }
  job->reason = WaitingReason(m);
  NewGeneration(job);
  return true;
}

int64_t FinalStep(const JobRecord& job) {
  return job.spec.steps() > 0 ? job.spec.steps() : job.total_steps;
}

bool RegroupAfterRestart(JobRecord* job, absl::Time now, const std::string& reason) {
  if (job->ranks.empty()) return false;
  bool all_done = true;
  for (const RankRecord& r : job->ranks) all_done = all_done && r.done;
  if (all_done) return false;  // the job is at its end: nothing to regroup
  MembershipState& m = job->membership;
  const int world = job->k - static_cast<int>(m.vacant.size());
  v1::MembershipEvent e;
  e.set_kind("restart");
  e.set_generation(m.generation + 1);
  e.set_world_before(world);
  e.set_world_after(world);
  e.set_rank(-1);
  e.set_step(-1);
  e.set_unix_s(UnixSeconds(now));
  e.set_reason(reason);
  AddEvent(&m, std::move(e));
  NewGeneration(job);
  for (size_t r = 0; r < job->ranks.size(); ++r) {
    if (job->ranks[r].done) RecordFinishedRank(job, static_cast<int>(r));
  }
  return true;
}

bool RecordFinishedRank(JobRecord* job, int rank) {
  if (rank < 0 || rank >= static_cast<int>(job->ranks.size()) || !job->ranks[rank].done) {
    return false;
  }
  return RecordHeldStep(job, rank, job->membership.generation, FinalStep(*job));
}

bool OnlyRestartsSince(const JobRecord& job, int64_t generation) {
  const MembershipState& m = job.membership;
  int64_t seen = 0;  // "restart" events of the generations after `generation`
  for (const v1::MembershipEvent& e : m.events) {
    if (e.generation() <= generation) continue;
    if (e.kind() != "restart") return false;
    ++seen;
  }
  return generation >= 0 && seen == m.generation - generation;
}

bool WaitExpired(const JobRecord& job, absl::Time now, std::string* reason) {
  const MembershipState& m = job.membership;
  if (m.vacant.empty() || m.waiting_since == absl::InfinitePast()) return false;
  const absl::Duration timeout = WaitTimeout(job);
  if (now - m.waiting_since <= timeout) return false;
  std::string ranks;
  for (int r : m.vacant) absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
  *reason = absl::StrFormat(
      "no worker replaced rank%s %s within %s (spec.wait_timeout_ms %d); %s",
      m.vacant.size() > 1 ? "s" : "", ranks, absl::FormatDuration(timeout),
      absl::ToInt64Milliseconds(timeout), m.waiting_for);
  return true;
}

int64_t GrowMargin(const JobRecord& job) {
  int64_t margin = 20;
  const int64_t batch = job.spec.global_batch();
  if (batch > 0 && job.examples_per_second > 0) {
    const double steps_per_s = job.examples_per_second / static_cast<double>(batch);
    margin = std::max<int64_t>(margin, static_cast<int64_t>(2.0 * steps_per_s) + 1);
  }
  return margin;
}

int OpenRank(const JobRecord& job) {
  const MembershipState& m = job.membership;
  if (job.ranks.empty()) return -1;
  for (const RankRecord& r : job.ranks) {
    if (r.done) return -1;
  }
  if (!m.vacant.empty()) return m.vacant.front();
  if (!ShrinksOnLoss(job) || job.k >= job.spec.num_workers()) return -1;
  const int64_t total = job.spec.steps() > 0 ? job.spec.steps() : job.total_steps;
  if (total <= 0 || job.steps_done + GrowMargin(job) >= total) return -1;
  return job.k;
}

bool AddRank(JobRecord* job, int rank, RankRecordLite joiner, absl::Time now) {
  if (rank < 0 || rank != OpenRank(*job)) return false;
  MembershipState& m = job->membership;
  const bool replace = rank < job->k;
  v1::MembershipEvent e;
  e.set_kind(replace ? "replace" : "join");
  e.set_generation(m.generation + 1);
  e.set_world_before(replace ? job->k - static_cast<int>(m.vacant.size()) : job->k);
  e.set_worker_id(joiner.worker_id);
  e.set_rank(rank);
  e.set_step(-1);
  e.set_unix_s(UnixSeconds(now));
  RankRecord r;
  r.worker_id = std::move(joiner.worker_id);
  r.address = std::move(joiner.address);
  r.data_address = std::move(joiner.data_address);
  r.hostname = std::move(joiner.hostname);
  r.last_heartbeat = joiner.last_seen;
  r.holds_replica = false;  // until it has trained a step (RankRecord::holds_replica)
  if (replace) {
    e.set_reason(absl::StrCat(r.worker_id, " (", r.address, ") took rank ", rank, " after ",
                              absl::FormatDuration(absl::Trunc(now - m.waiting_since,
                                                               absl::Milliseconds(1))),
                              " of waiting"));
    job->ranks[rank] = std::move(r);
    m.vacant.erase(std::find(m.vacant.begin(), m.vacant.end(), rank));
    if (m.vacant.empty()) {
      m.waiting_since = absl::InfinitePast();
      m.waiting_for.clear();
      job->reason.clear();
    } else {
      job->reason = WaitingReason(m);
    }
  } else {
    e.set_reason(absl::StrCat(r.worker_id, " (", r.address, ") joined as rank ", rank,
                              " (the job asks for ", job->spec.num_workers(), " workers)"));
    job->ranks.push_back(std::move(r));
    job->k = static_cast<int>(job->ranks.size());
  }
  e.set_world_after(job->k - static_cast<int>(m.vacant.size()));
  AddEvent(&m, std::move(e));
  NewGeneration(job);
  return true;
}

void FillMembershipStatus(const JobRecord& job, v1::JobStatus* s) {
  const MembershipState& m = job.membership;
  for (int r : m.vacant) s->add_waiting_for_ranks(r);
  if (!m.vacant.empty() && m.waiting_since != absl::InfinitePast()) {
    s->set_wait_deadline_unix_s(UnixSeconds(m.waiting_since + WaitTimeout(job)));
  }
}

ShrinkResult ShrinkJob(JobRecord* job, int lost_rank, absl::Time now,
                       const std::string& reason) {
  ShrinkResult result;
  const int k = static_cast<int>(job->ranks.size());
  if (k <= 1 || lost_rank < 0 || lost_rank >= k) return result;
  if (AnyDone(*job)) return result;  // the job is at its end: nothing to regroup
  if (!OtherHolderLeft(*job, lost_rank)) {
    result.no_replica = NoReplicaLeft(*job, lost_rank, reason);
    return result;
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
    ForgetGenerationReports(&r);
    result.workers.push_back(r.worker_id);
  }
  result.shrunk = true;
  return result;
}

bool RecordHeldStep(JobRecord* job, int rank, int64_t generation, int64_t held_step) {
  MembershipState& m = job->membership;
  if (!m.regrouping || generation != m.generation || rank < 0 ||
      rank >= static_cast<int>(job->ranks.size()) || held_step < -1 || IsVacant(m, rank)) {
    return false;
  }
  job->ranks[rank].held_generation = generation;
  job->ranks[rank].held_step = held_step;
  if (!m.vacant.empty()) return false;  // waiting for a replacement
  int64_t s = -1;
  int source = -1;
  for (size_t r = 0; r < job->ranks.size(); ++r) {
    const RankRecord& rr = job->ranks[r];
    if (rr.held_generation != m.generation) return false;  // someone has not said yet
    // A rank holding a replica that names no step (-1: its worker got the
    // job first in this generation, e.g. after a restart regroup before
    // it ever ran) has not trained: it holds the initial replica, step 0,
    // which every rank builds from the seed (or the spec's checkpoint).
    const int64_t held = std::max<int64_t>(rr.held_step, 0);
    if (rr.holds_replica && held > s) {
      s = held;
      source = static_cast<int>(r);
    }
  }
  if (s < 0) return false;  // nobody holds a replica (VacateRank and ShrinkJob keep one)
  m.regrouping = false;
  m.start_step = s;
  m.source_rank = source;
  for (RankRecord& rr : job->ranks) rr.last_step = s - 1;
  job->sync.Regroup(job->k);  // nothing of the old generation completes
  job->steps_done = std::max(job->steps_done, s);
  // Every event since the last decided start continues at s (a wait and
  // its replace; a shrink and a join that followed before the start).
  for (auto it = m.events.rbegin(); it != m.events.rend() && it->step() < 0; ++it) {
    it->set_step(s);
  }
  return true;
}

bool NeedsAssignment(const JobRecord& job, int64_t generation, bool holds_state) {
  const MembershipState& m = job.membership;
  if (generation < m.generation) return true;
  return generation == m.generation && holds_state && StartDecided(m);
}

void FillMembership(const JobRecord& job, v1::Assignment* a) {
  const MembershipState& m = job.membership;
  a->set_generation(m.generation);
  if (m.generation > 0 && StartDecided(m)) {
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
