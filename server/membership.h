// Membership: how a RUNNING job's group changes when one of its workers is
// LOST under JobSpec.on_worker_lost = "shrink" (README "Failure
// semantics"). Plain functions on a JobRecord, called by the Coordinator
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
// Not here (yet): "wait" and late joiners (a worker added to a job below
// its spec.num_workers): the Assignment and heartbeat fields support a rank
// that holds no state (it would fetch from the source), but the
// coordinator never adds one; ValidateJobSpec refuses "wait".
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

// A job's membership state (JobRecord::membership).
struct MembershipState {
  int64_t generation = 0;
  bool regrouping = false;        // waiting for every rank's held step
  int64_t start_step = -1;        // the current generation's start (decided)
  int source_rank = -1;           // the rank whose state the others copy
  std::deque<lockstep::v1::MembershipEvent> events;  // oldest first, bounded
};
inline constexpr size_t kMaxMembershipEvents = 64;

// spec.on_worker_lost is "shrink".
bool ShrinksOnLoss(const JobRecord& job);

// What ShrinkJob did: the survivors' worker ids by their new rank.
struct ShrinkResult {
  bool shrunk = false;   // false: nothing left to shrink to (or finished ranks): fail
  std::vector<std::string> workers;  // index = new rank
};

// Removes `lost_rank` (see the top of this file). Does nothing and returns
// shrunk = false when it is the last rank or when some rank already
// finished (ReportDone ok: the job is at its end, nothing to regroup).
ShrinkResult ShrinkJob(JobRecord* job, int lost_rank, absl::Time now, const std::string& reason);

// Rank `rank` holds its replica at `held_step` for `generation`. Ignored
// unless generation is the job's and it is regrouping. Returns true when
// this decided the start (every rank holds).
bool RecordHeldStep(JobRecord* job, int rank, int64_t generation, int64_t held_step);

// The heartbeat reply of a worker at `rank` of `job` that said
// (generation, holds_state): whether it needs the Assignment again (a newer
// generation, or the start it waits for is decided).
bool NeedsAssignment(const JobRecord& job, int64_t generation, bool holds_state);

// Fills the Assignment's membership fields for the job's current state.
void FillMembership(const JobRecord& job, lockstep::v1::Assignment* a);

// The job's wire key for its current generation: `base` (incarnation and
// job id, bit 63 clear) for generation 0, else base mixed with the
// generation (xor with generation * the 64-bit golden ratio, bit 63
// cleared): a fresh key for each regroup, so the new group never meets
// the old group's peer streams or ps shard state.
uint64_t GenerationKey(uint64_t base, int64_t generation);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_MEMBERSHIP_H_
