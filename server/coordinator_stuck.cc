// Coordinator facade: ring and ps jobs whose every rank waits for a peer or
// a shard while every worker heartbeats (a link is down, no worker lost):
// failed naming the waits, or under on_worker_lost "shrink" or "wait" the
// rank(s) the others cannot reach dropped, found from the waits
// (RankToDropWhenStuck) or by a reachability probe (LargestMutuallyReachable).
// Contracts: coordinator.h ("FailStuckCombineLocked"); the rules are in
// server/membership.h.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/daemon_util.h"
#include "server/coordinator.h"
#include "server/membership.h"

namespace lockstep {

namespace {

// How long a worker's probe may wait for each connection to be accepted.
constexpr absl::Duration kProbeConnectTimeout = absl::Seconds(1);

// A job that is not stuck (any more) has no probe.
bool NotStuck(JobRecord* job) {
  if (job->membership.probe.id != 0) job->membership.probe = MembershipState::ReachProbe();
  return false;
}

// How many of the probe's witnesses rank r reached.
int WitnessesReached(const MembershipState::ReachProbe& p, size_t r) {
  const size_t k = p.reachable.size();
  int n = 0;
  for (size_t q = k; q < p.reachable[r].size(); ++q) n += p.reachable[r][q] ? 1 : 0;
  return n;
}

// "rank 0 reached 1, 2; rank 2 reached none", or for shards "rank 0
// reached shard 0, 1; ...", with witnesses "rank 0 reached none and 0 of 1
// idle workers; ...".
std::string ProbeSummary(const MembershipState::ReachProbe& p) {
  std::vector<std::string> parts;
  const size_t k = p.reachable.size();
  for (size_t r = 0; r < k; ++r) {
    std::vector<int> peers;
    for (size_t q = 0; q < p.reachable[r].size() && (p.shards || q < k); ++q) {
      if ((p.shards || q != r) && p.reachable[r][q]) peers.push_back(static_cast<int>(q));
    }
    std::string part = absl::StrCat("rank ", r, " reached ",
                                    peers.empty() ? "none"
                                    : p.shards    ? absl::StrCat("shard ", absl::StrJoin(peers, ", "))
                                                  : absl::StrJoin(peers, ", "));
    if (!p.witnesses.empty()) {
      absl::StrAppend(&part, " and ", WitnessesReached(p, r), " of ", p.witnesses.size(),
                      " idle workers");
    }
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "; ");
}

// The address a probe connects to for `w` in a job over `tcp`: its data
// port, else its gRPC port ("" when a tcp job's worker has no data port).
std::string ProbeAddress(bool tcp, const std::string& address, const std::string& data_address) {
  if (!tcp) return address;
  return data_address;
}

}  // namespace

bool Coordinator::FailStuckCombineLocked(Job* job, absl::Time now) {
  const bool ps = job->spec.sync_mode() == v1::PS;
  // A ring of one waits for nobody; a ps job of one waits for its shards.
  if ((!ps && job->k < 2) || job->membership.regrouping ||
      static_cast<int>(job->ranks.size()) != job->k) {
    return NotStuck(job);
  }
  // A report counts only while fresh (a few heartbeat intervals): an old
  // one says nothing about now (its worker may be computing, or dead: the
  // lost-worker path's case).
  const absl::Duration fresh = 3 * options_.heartbeat_interval + absl::Seconds(1);
  const int shards = static_cast<int>(job->ps_addresses.size());
  // The job's own bound (spec.stall_timeout_ms), else lost_after.
  const absl::Duration stall = job->spec.stall_timeout_ms() > 0
                                   ? absl::Milliseconds(job->spec.stall_timeout_ms())
                                   : options_.lost_after;
  std::vector<std::string> waits;
  for (int r = 0; r < job->k; ++r) {
    const Rank& rank = job->ranks[r];
    // Every rank's latest report, fresh, says its combine has waited for a
    // peer (ring) or a shard (ps) for at least the stall bound: nothing
    // moves, and no worker is lost.
    const int target = ps ? rank.waiting_for_shard : rank.waiting_for;
    if (rank.worker_id.empty() || target < 0 || target >= (ps ? shards : job->k) ||
        rank.waited < stall || now - rank.waiting_reported > fresh) {
      return NotStuck(job);
    }
    if (ps) {
      waits.push_back(absl::StrFormat("rank %d (%s, host %s) for shard %d (%s) %.1fs", r,
                                      rank.worker_id, rank.hostname, target,
                                      job->ps_addresses[target],
                                      absl::ToDoubleSeconds(rank.waited)));
      continue;
    }
    const Rank& peer = job->ranks[target];
    waits.push_back(absl::StrFormat("rank %d (%s, host %s) for rank %d (%s, host %s) %.1fs", r,
                                    rank.worker_id, rank.hostname, target, peer.worker_id,
                                    peer.hostname, absl::ToDoubleSeconds(rank.waited)));
  }
  std::string why =
      ps ? absl::StrCat("every rank waits for a parameter-server shard while every "
                        "worker heartbeats: a shard is out of the workers' reach "
                        "or stuck (",
                        absl::StrJoin(waits, "; "), ")")
         : absl::StrCat("every rank waits for a peer while every worker "
                        "heartbeats: a link between workers is down (",
                        absl::StrJoin(waits, "; "), ")");
  // Under shrink or wait a ring job drops the rank its peers cannot reach
  // when the waits name one (membership.h RankToDropWhenStuck), or else the
  // ranks a reachability probe finds cut off from the largest group; a ps
  // job the ranks a probe finds cut off from a shard the others reach.
  if (ShrinksOnLoss(*job) || WaitsOnLoss(*job)) {
    bool probe = ps;
    const MembershipState::ReachProbe& p = job->membership.probe;
    const bool probing = p.id != 0 && p.generation == job->membership.generation;
    // K = 2: each waits for the other and either could be the one cut off;
    // idle workers, probed as witnesses, tell which (ProbeStuckLocked).
    if (!ps && job->k == 2 && (probing || !WitnessesLocked(*job).empty())) probe = true;
    if (!ps && !probe) {
      std::vector<int> waiting_for;
      for (const Rank& rank : job->ranks) waiting_for.push_back(rank.waiting_for);
      int drop = RankToDropWhenStuck(waiting_for);
      // K = 2 cannot tell which of the two is cut off: rank 1 first; if the
      // worker kept at rank 0 then is stuck again with its next peer, it is.
      if (job->k == 2 && drop == 1 &&
          job->ranks[0].worker_id == job->membership.kept_at_last_drop) {
        drop = 0;
      }
      if (drop >= 0 && DropUnreachableRankLocked(job, drop, why)) return true;
      // No single rank stands out (a cycle, a partition into groups): ask
      // the ranks which peers they reach.
      probe = drop < 0;
    }
    if (probe) {
      switch (ProbeStuckLocked(job, now, &why)) {
        case ProbeOutcome::kPending:
          return false;
        case ProbeOutcome::kDropped:
          return true;
        case ProbeOutcome::kNone:
          break;
      }
    }
  }
  FailJobLocked(job, why);
  return true;
}

bool Coordinator::DropUnreachableRankLocked(Job* job, int rank, const std::string& stuck) {
  const Rank& r = job->ranks[rank];
  const std::string worker_id = r.worker_id;
  const bool ps = job->spec.sync_mode() == v1::PS;
  const std::string why =
      absl::StrFormat("rank %d (%s, host %s) %s (%s)", rank, r.worker_id, r.hostname,
                      ps ? kDroppedNoShard : kDroppedUnreachable, stuck);
  const std::string kept = job->k == 2 ? job->ranks[1 - rank].worker_id : std::string();
  std::string no_replica;
  if (ShrinksOnLoss(*job)) {
    ShrinkResult shrunk = ShrinkJob(job, rank, clock_->Now(), why);
    no_replica = std::move(shrunk.no_replica);
    if (shrunk.shrunk) RenumberLocked(shrunk);
    if (!shrunk.shrunk && no_replica.empty()) return false;
  } else if (!VacateRank(job, rank, clock_->Now(), why, &no_replica) && no_replica.empty()) {
    return false;
  }
  if (!no_replica.empty()) {
    FailJobLocked(job, std::move(no_replica));  // nobody left to copy from
    return true;
  }
  job->membership.kept_at_last_drop = kept;
  // The dropped worker is alive: IDLE (its next heartbeat is told to stop
  // the job), never again a rank of this job.
  if (Worker* w = workers_.Find(worker_id); w != nullptr) WorkerRegistry::Unbind(w);
  RecordDroppedWorker(job, worker_id);
  LogLocked(LogLevel::kWarn, ShrinksOnLoss(*job) ? "job shrinking" : "job waiting for a worker",
            {{"job", job->id},
             {"generation", job->membership.generation},
             {"world", job->k},
             {"dropped", why}});
  StateChangedLocked(job);
  return true;
}

Coordinator::ProbeOutcome Coordinator::ProbeStuckLocked(Job* job, absl::Time now,
                                                       std::string* why) {
  MembershipState& m = job->membership;
  MembershipState::ReachProbe& p = m.probe;
  const int k = job->k;
  const bool ps = job->spec.sync_mode() == v1::PS;
  const int shards = static_cast<int>(job->ps_addresses.size());
  // A job of 1 has nobody to keep.
  if (k < 2) return ProbeOutcome::kNone;
  if (k > kMaxProbedRanks) {
    absl::StrAppend(why, "; no reachability probe: K = ", k, " is over ", kMaxProbedRanks);
    return ProbeOutcome::kNone;
  }
  if (p.id == 0 || p.generation != m.generation) {
    p = MembershipState::ReachProbe();
    // Unique across coordinator runs (a ring job keeps its generation over
    // a restart, and a worker answers an id it has probed once): the
    // start's Unix milliseconds, and a counter for probes within one.
    p.id = (static_cast<uint64_t>(absl::ToUnixMillis(now)) << 12) |
           (++m.probes_started & 0xfff);
    p.generation = m.generation;
    p.started = now;
    p.shards = ps;
    if (!ps && k == 2) p.witnesses = WitnessesLocked(*job);
    p.width = ps ? shards : k + static_cast<int>(p.witnesses.size());
    p.answered.assign(static_cast<size_t>(k), false);
    p.reachable.assign(static_cast<size_t>(k), {});
    LogLocked(LogLevel::kWarn, "job stuck, probing which ranks reach which",
              {{"job", job->id}, {"generation", m.generation}, {"probe", p.id}, {"stuck", *why}});
    return ProbeOutcome::kPending;
  }
  std::vector<int> silent;
  for (int r = 0; r < k; ++r) {
    if (!p.answered[static_cast<size_t>(r)]) silent.push_back(r);
  }
  if (!silent.empty()) {
    // The answers come within a connect timeout and a few heartbeats.
    if (now - p.started <= kProbeConnectTimeout + 3 * options_.heartbeat_interval +
                               absl::Seconds(1)) {
      return ProbeOutcome::kPending;
    }
    if (!p.shards && k == 2) {
      // Witnesses cannot tell: the rule without them (rank 1, or rank 0
      // when its worker was kept at the last drop).
      absl::StrAppend(why, "; a reachability probe got no answer from rank(s) ",
                      absl::StrJoin(silent, ", "));
      const int drop = job->ranks[0].worker_id == m.kept_at_last_drop ? 0 : 1;
      return DropUnreachableRankLocked(job, drop, *why) ? ProbeOutcome::kDropped
                                                        : ProbeOutcome::kNone;
    }
    absl::StrAppend(why, "; a reachability probe got no answer from rank(s) ",
                    absl::StrJoin(silent, ", "));
    return ProbeOutcome::kNone;
  }
  absl::StrAppend(why, "; a reachability probe found: ", ProbeSummary(p));
  std::vector<int> keep;
  if (!p.shards && k == 2) {
    // The rank that reached fewer witnesses is the one cut off; a tie
    // (no witness tells them apart) drops rank 1, or rank 0 when its worker
    // was kept at the last drop (as without a probe).
    const int w0 = WitnessesReached(p, 0), w1 = WitnessesReached(p, 1);
    const int drop = w0 < w1   ? 0
                     : w1 < w0 ? 1
                     : job->ranks[0].worker_id == m.kept_at_last_drop ? 0
                                                                      : 1;
    return DropUnreachableRankLocked(job, drop, *why) ? ProbeOutcome::kDropped
                                                      : ProbeOutcome::kNone;
  }
  if (p.shards) {
    // The ranks that reach every shard go on; none, or all (a shard is
    // stuck, not cut off), leaves nothing to decide.
    keep = RanksReachingEveryShard(p.reachable, p.width);
    if (keep.empty()) {
      absl::StrAppend(why, " (no rank reaches every shard)");
      return ProbeOutcome::kNone;
    }
    if (static_cast<int>(keep.size()) == k) {
      absl::StrAppend(why, " (every rank reaches every shard: no link is down, a shard is stuck)");
      return ProbeOutcome::kNone;
    }
  } else {
    keep = LargestMutuallyReachable(p.reachable);
    if (keep.empty()) {
      absl::StrAppend(why, " (too many groups to compare: none is kept)");
      return ProbeOutcome::kNone;
    }
    if (static_cast<int>(keep.size()) == k) {
      absl::StrAppend(why, " (every rank reaches every other: no link is down, a peer is stuck)");
      return ProbeOutcome::kNone;
    }
    if (keep.size() < 2) {
      absl::StrAppend(why, " (no two ranks reach each other)");
      return ProbeOutcome::kNone;
    }
  }
  // Drop from the highest rank down: a shrink renumbers only the ranks
  // above the one it drops, so the lower ranks' indices stay valid.
  bool dropped = false;
  for (int r = k - 1; r >= 0; --r) {
    if (std::find(keep.begin(), keep.end(), r) != keep.end()) continue;
    if (!DropUnreachableRankLocked(job, r, *why)) break;
    dropped = true;
    if (job->state != v1::RUNNING) break;  // failed: nobody left to copy from
  }
  return dropped ? ProbeOutcome::kDropped : ProbeOutcome::kNone;
}

void Coordinator::FillProbeLocked(const Job& job, int rank, v1::HeartbeatReply* reply) const {
  const MembershipState::ReachProbe& p = job.membership.probe;
  if (p.id == 0 || p.generation != job.membership.generation || rank < 0 ||
      rank >= static_cast<int>(p.answered.size()) || p.answered[static_cast<size_t>(rank)] ||
      static_cast<int>(job.ranks.size()) != static_cast<int>(p.answered.size())) {
    return;
  }
  v1::PeerProbe* probe = reply->mutable_probe();
  probe->set_id(p.id);
  probe->set_job_id(job.id);
  probe->set_generation(p.generation);
  probe->set_timeout_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(kProbeConnectTimeout)));
  if (p.shards) {
    probe->set_shards(true);  // the worker probes its shards as it dials them
    return;
  }
  // The path the ring uses: the data port over tcp, else the gRPC port.
  const bool tcp = job.spec.peer_transport() == v1::TCP;
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    const Rank& peer = job.ranks[static_cast<size_t>(r)];
    probe->add_addresses(r == rank ? std::string()
                         : tcp && !peer.data_address.empty() ? peer.data_address
                                                             : peer.address);
  }
  for (const std::string& w : p.witnesses) probe->add_addresses(w);
}

std::vector<std::string> Coordinator::WitnessesLocked(const Job& job) {
  std::vector<std::string> out;
  const bool tcp = job.spec.peer_transport() == v1::TCP;
  for (const Worker* w : workers_.Idle()) {
    if (static_cast<int>(out.size()) >= kMaxWitnesses) break;
    if (WasDropped(job, w->id)) continue;  // it may be the one cut off
    const std::string a = ProbeAddress(tcp, w->address, w->data_address);
    // A witness at a rank's network address (the same host part: e.g.
    // another worker of that host) is reached from there even when the host
    // is cut off from the others: it tells nothing.
    const bool beside = std::any_of(job.ranks.begin(), job.ranks.end(), [&](const Rank& r) {
      return HostOfAddress(a) == HostOfAddress(ProbeAddress(tcp, r.address, r.data_address));
    });
    if (!a.empty() && !beside) out.push_back(a);
  }
  return out;
}

}  // namespace lockstep
