// Membership: how a RUNNING job's group changes when one of its workers is
// LOST under JobSpec.on_worker_lost = "shrink" or "wait", and when an idle
// worker joins it (README "Failure semantics"). Plain functions on a JobRecord, called by the Coordinator
// facade under its mutex; no clock reads, no I/O (tests drive them with a
// fake clock's times).
//
// Shrink (ShrinkJob, from Tick when a rank's worker is LOST):
//   * the job's generation goes up by one (a new generation has its own
//     wire key: the facade's AssignmentLocked mixes it in), the lost rank is
//     removed and the survivors are renumbered in their old rank order
//     (rank r > lost becomes r - 1), k = K - 1;
//   * the sync checker forgets its pending steps and checks k ranks from
//     now on (counters and history are kept); the survivors' held steps are
//     reset and regrouping = true;
//   * a MembershipEvent "shrink" is recorded (step -1 until decided).
//   Each survivor's next heartbeat gets the new Assignment (higher
//   generation, start_ready false): its daemon stops the old runner WITHOUT
//   ReportDone, keeps its replica, and heartbeats holds_state + held_step.
// Start (RecordHeldStep, from Heartbeat): once every rank of the current
//   generation holds, start_step s = the LARGEST held step and the source =
//   the lowest rank holding it. Survivors differ by at most one step (the
//   step whose combine the loss interrupted completed on some of them: its
//   combined gradient was complete, so applying it IS the K-worker run's
//   step). Ranks behind copy the source's state at s (weights + optimizer
//   state, common/train/replica_state.h), so after the transfer EVERY
//   replica has applied every step < s and none has applied s: the step is
//   atomic, and nobody needs to keep an older state (rolling back to the
//   minimum would cost a copy of the state on every step). Every rank's
//   last reported step becomes s - 1 (reports of steps < s are then stale),
//   steps_done = s, the event's step = s, regrouping = false. The next
//   heartbeats carry start_ready: each rank continues at s with world k and
//   the same global batch (slices grow).
// Wait (VacateRank, from Tick when a rank's worker is LOST under
// on_worker_lost = "wait"): the lost rank stays in the group as a VACANT
// slot (no worker, no address); generation + 1, k unchanged, regrouping,
// the survivors stop and hold their replicas exactly as under shrink; the
// job stays RUNNING with reason "waiting for a worker to replace rank R
// (lost: ...)", JobStatus.waiting_for_ranks and wait_deadline_unix_s, and a
// "wait" event. No start is decided while a rank is vacant. When no worker
// fills it within WaitTimeout (spec.wait_timeout_ms, 0 = 10 min),
// WaitExpired says so and the facade fails the job naming the rank. A
// second loss while waiting vacates that rank too; losing the last rank
// that holds a replica fails the job at once (nobody to copy from:
// NoReplicaLeft's reason). Only ranks with RankRecord::holds_replica count:
// a joiner holds none until it has received its state (known from its
// first step report of its generation).
// Joiners (AddRank, from the facade's scheduling pass, before PENDING jobs
// start): OpenRank says which rank an idle worker can take now: the lowest
// vacant rank (wait), else rank k when a "shrink" job runs below its
// spec.num_workers and is not near its end (GrowMargin: a rank that has
// finished cannot regroup). AddRank binds the worker there (a "replace" or
// "join" event, world after), generation + 1, regrouping; the joiner
// heartbeats holds_state with held_step -1 (it holds nothing:
// holds_replica false until it reports a step) and the
// start is decided as above from the ranks that hold one: every rank,
// the joiner included, continues at the largest held step s, the joiner
// (and any rank behind) copying the source rank's weights + optimizer
// state first. The event's step is s: the step at which it joined. Under
// "wait" K is unchanged, so the job ends with the hash of an uninterrupted
// run; a late joiner's job ends with the hash of a run that used K until
// the shrink, K-1 until the join step, K after it.
#ifndef LOCKSTEP_SERVER_MEMBERSHIP_H_
#define LOCKSTEP_SERVER_MEMBERSHIP_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

struct JobRecord;

// A worker joining a job (AddRank).
struct RankRecordLite {
  std::string worker_id, address, data_address, hostname;
  absl::Time last_seen;
};

// A job's membership state (JobRecord::membership).
struct MembershipState {
  int64_t generation = 0;
  bool regrouping = false;        // waiting for every rank's held step
  int64_t start_step = -1;        // the current generation's start (decided)
  int source_rank = -1;           // the rank whose state the others copy
  std::deque<lockstep::v1::MembershipEvent> events;  // oldest first, bounded
  // on_worker_lost = "wait": the vacant ranks (ascending), since when the
  // job waits (InfinitePast = not waiting) and the first loss's reason.
  std::vector<int> vacant;
  absl::Time waiting_since = absl::InfinitePast();
  std::string waiting_for;
  // Workers dropped from this job because its other ranks could not reach
  // them (RankToDropWhenStuck): never given one of its ranks again (oldest
  // first, at most kMaxDroppedWorkers; kept in memory only).
  std::deque<std::string> dropped_workers;
  // The worker kept at rank 0 when a K = 2 job last dropped its rank 1: if
  // it is stuck again with its next peer, it is the one cut off.
  std::string kept_at_last_drop;
  // A stuck ring job's reachability probe (RankToDropWhenStuck named no
  // rank; Coordinator::ProbeStuckLocked): id 0 = none. Started with the
  // generation it probes; answered[r] once rank r said which ranks it
  // connected to (reachable[r]). Dropped as soon as the job is not stuck.
  struct ReachProbe {
    uint64_t id = 0;
    int64_t generation = -1;
    // A ps job's probe: reachable[r][s] = rank r reached shard s (width S);
    // else reachable[r][q] = rank r reached rank q (width K).
    bool shards = false;
    int width = 0;
    // A ring of 2 (either could be the one cut off): idle workers probed as
    // witnesses, columns K.. of reachable; the rank that reaches fewer of
    // them is dropped.
    std::vector<std::string> witnesses;
    absl::Time started = absl::InfinitePast();
    std::vector<bool> answered;
    std::vector<std::vector<bool>> reachable;
  };
  ReachProbe probe;
  uint64_t probes_started = 0;  // probes of this job started by this coordinator run
};
// The current generation's start is decided (start_step: every rank said
// which step it holds).
inline bool StartDecided(const MembershipState& m) { return !m.regrouping && m.start_step >= 0; }
// In the reason of a membership event that dropped a rank its peers could
// not reach ("rank 1 (w-2, host h2) dropped: its peers cannot reach it
// (...)"): how RestoreDroppedWorkers finds them after a restart.
inline constexpr char kDroppedUnreachable[] = "dropped: its peers cannot reach it";
// The same for a ps job's rank that could not reach a shard the others did.
inline constexpr char kDroppedNoShard[] = "dropped: it cannot reach a parameter-server shard";
inline constexpr size_t kMaxMembershipEvents = 64;
inline constexpr size_t kMaxDroppedWorkers = 64;

// A ring job whose every rank's combine waits for a peer while every
// worker heartbeats (no worker is lost: a link between workers is down):
// the rank to drop under on_worker_lost = "shrink" or "wait", from the peer
// each rank waits for (waiting_for[r], a rank). The one rank that more
// ranks wait for than for any other; with K = 2 (each waits for the other)
// rank 1, so rank 0 (the checkpoints' writer) stays. -1 when no single rank
// stands out (a ring's waits form a cycle: every rank waited for once), or
// an entry is out of range.
int RankToDropWhenStuck(const std::vector<int>& waiting_for);
// The ranks to keep of a stuck ring job after its reachability probe:
// the largest set of ranks every two of which reached each other, both
// ways (reach[i][j]: rank i connected to rank j; a rank always reaches
// itself), in ascending order. Among sets of that size the one whose
// sorted ranks come first (so among the largest groups, one with rank 0
// when there is one). K at most kMaxProbedRanks; the search takes at most
// kMaxCliqueSteps steps (it runs under the coordinator's lock). Empty when
// K is out of range or the search ran out of steps (too many groups to
// compare).
inline constexpr int kMaxProbedRanks = 64;
// Idle workers a ring of 2 probes as witnesses (ReachProbe::witnesses).
inline constexpr int kMaxWitnesses = 4;
inline constexpr int64_t kMaxCliqueSteps = int64_t{1} << 20;
std::vector<int> LargestMutuallyReachable(const std::vector<std::vector<bool>>& reach);
// The ranks to keep of a stuck ps job after its probe: those that reached
// every shard (reach[r][s]), ascending.
std::vector<int> RanksReachingEveryShard(const std::vector<std::vector<bool>>& reach, int shards);
// Records rank `rank`'s answer to probe `id` of the job's current probe
// (ranks, or for a shards probe shards, it reached, from the network: only
// those of the job count, each once). False (ignored) when it is not the
// current probe's or the rank is out of range.
bool RecordProbeAnswer(JobRecord* job, int rank, uint64_t id,
                       const google::protobuf::RepeatedField<int32_t>& reachable);

// Records `worker_id` in job->membership.dropped_workers (bounded).
void RecordDroppedWorker(JobRecord* job, const std::string& worker_id);
// Whether `worker_id` was dropped from `job` (it never takes a rank of it).
bool WasDropped(const JobRecord& job, const std::string& worker_id);
// After a restart: the dropped workers again, from the job's membership
// events (the newest kMaxMembershipEvents are kept, so older drops are not).
void RestoreDroppedWorkers(JobRecord* job);

// spec.on_worker_lost is "shrink".
bool ShrinksOnLoss(const JobRecord& job);
// spec.on_worker_lost is "wait".
bool WaitsOnLoss(const JobRecord& job);
// spec.wait_timeout_ms, 0 -> 10 minutes (common/train/job_spec_convert.h
// WorkerLostWaitTimeout).
absl::Duration WaitTimeout(const JobRecord& job);

// Vacates `lost_rank` (see the top of this file). False (nothing changed)
// when a rank already finished (the job fails as under "fail") or when no
// other rank would be left holding a replica: then *no_replica (if not
// null) gets NoReplicaLeft's reason and the job must fail with it at once.
bool VacateRank(JobRecord* job, int lost_rank, absl::Time now, const std::string& reason,
                std::string* no_replica = nullptr);

// Non-empty when losing `lost_rank` (whose loss `reason` describes) leaves
// other ranks but none of them holding a replica (vacant ranks, joiners
// that have not received their state): "no rank holding a replica is left
// at step S: <reason>; rank 1 vacant (...); rank 2 (w-5) joined and has not
// received its state yet". Empty when some other rank holds one, or when
// `lost_rank` is the only rank.
std::string NoReplicaLeft(const JobRecord& job, int lost_rank, const std::string& reason);

// True when the job has waited longer than WaitTimeout for a vacant rank at
// `now`; then *reason says which rank, since when and why it was lost.
bool WaitExpired(const JobRecord& job, absl::Time now, std::string* reason);

// Steps before the end within which a shrunk job does not grow:
// max(20, 2 s of steps at the job's current rate: 10 heartbeat intervals),
// so no rank can have finished (and sent ReportDone for the old
// generation, which would be dropped) by the time the regroup reaches it.
int64_t GrowMargin(const JobRecord& job);
// The rank an idle worker can take in `job` now (see the top of this
// file), or -1. The job must be RUNNING.
int OpenRank(const JobRecord& job);
// Binds the worker described by `joiner` (worker_id, address,
// data_address, hostname, last_heartbeat) as rank `rank` (OpenRank's).
// Returns false when `rank` is not open.
bool AddRank(JobRecord* job, int rank, RankRecordLite joiner, absl::Time now);

// A coordinator restart lost the in-flight sums of a ps job on the
// coordinator's own shard (JobRecord::coordinator_ps_shard): a new
// generation of the same group (K, ranks and vacant ranks unchanged, a
// fresh group key, so a fresh shard), regrouping, and a "restart" event
// naming `reason`. The ranks stop, hold their replicas and the start is
// decided as after a shrink: some ranks may have pulled the interrupted
// step's sum and applied it, others not; they continue at the largest held
// step, the others copying that rank's state. A rank that had finished
// (its ReportDone counted) holds the job's final state (RecordFinishedRank):
// a rank that was still pulling the last sum, lost with the shard, copies
// it at the final step and finishes with the same hash (its worker offers
// it under the group key of the generation it finished in:
// Assignment.state_source_group_key). False (nothing changed) when every
// rank had finished (nothing to regroup).
bool RegroupAfterRestart(JobRecord* job, absl::Time now, const std::string& reason);
// The job's last step + 1 (spec.steps, else the total the ranks reported).
int64_t FinalStep(const JobRecord& job);
// While regrouping: rank `rank`, which finished the job (done), holds the
// final state at FinalStep (RecordHeldStep; true when that decided the
// start). For the finished ranks of a restart regroup, and for a done
// report that comes in while it regroups (sent again after the restart).
bool RecordFinishedRank(JobRecord* job, int rank);
// True when every generation after `generation` came from
// RegroupAfterRestart (same group, same ranks): a rank that finished in
// `generation` finished the job itself, so its ReportDone still counts.
bool OnlyRestartsSince(const JobRecord& job, int64_t generation);

// What ShrinkJob did: the survivors' worker ids by their new rank.
struct ShrinkResult {
  bool shrunk = false;   // false: nothing left to shrink to (or finished ranks): fail
  std::vector<std::string> workers;  // index = new rank
  std::string no_replica;  // not shrunk because no survivor holds a replica: the reason
};

// Removes `lost_rank` (see the top of this file). Does nothing and returns
// shrunk = false when it is the last rank, when some rank already
// finished (ReportDone ok: the job is at its end, nothing to regroup), or
// when no survivor holds a replica (only joiners without their state are
// left: no_replica says so, NoReplicaLeft).
ShrinkResult ShrinkJob(JobRecord* job, int lost_rank, absl::Time now, const std::string& reason);

// Rank `rank` holds its replica at `held_step` for `generation` (-1: it
// holds none, a joiner). Ignored unless generation is the job's and it is
// regrouping. Only ranks with holds_replica count for the start step and
// the source (a joiner that never trained claims nothing). Such a rank
// saying -1 never ran a step (its worker got the job first in this
// generation: a restart regroup before any step): it counts as holding
// step 0, the initial replica every rank builds itself (seed or the spec's
// checkpoint), so a group nobody trained in starts at step 0 with no copy. Returns true when this decided the start (every rank said,
// no rank is vacant, and some rank holds a replica).
bool RecordHeldStep(JobRecord* job, int rank, int64_t generation, int64_t held_step);

// The heartbeat reply of a worker at `rank` of `job` that said
// (generation, holds_state): whether it needs the Assignment again (a newer
// generation, or the start it waits for is decided).
bool NeedsAssignment(const JobRecord& job, int64_t generation, bool holds_state);

// Fills the Assignment's membership fields for the job's current state.
void FillMembership(const JobRecord& job, lockstep::v1::Assignment* a);

// JobStatus.waiting_for_ranks and wait_deadline_unix_s.
void FillMembershipStatus(const JobRecord& job, lockstep::v1::JobStatus* s);

// The job's wire key for its current generation: `base` (incarnation and
// job id, bit 63 clear) for generation 0, else base mixed with the
// generation (xor with generation * the 64-bit golden ratio, bit 63
// cleared): a fresh key for each regroup, so the new group never meets
// the old group's peer streams or ps shard state.
uint64_t GenerationKey(uint64_t base, int64_t generation);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_MEMBERSHIP_H_
