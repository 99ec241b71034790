// Scheduler: which PENDING job starts on which workers, and the checks a job
// must pass to start. The loop (ScheduleLocked) is in the Coordinator; the
// decisions are here, as functions of their inputs.
//
// Rules:
//   * Strict FIFO (no back-filling): only the head of the PENDING queue
//     (JobStore::pending) may start; a job waits behind an earlier PENDING
//     job even if it would fit. The head starts when at least K workers are
//     IDLE, on the K idle workers with the lowest ids (WorkerRegistry::Idle
//     order); rank r = the r-th of them; ring order = rank order.
//   * PS mode: the job uses the first S = PsShards(spec) of the available
//     parameter-server addresses (options.ps_addresses, or else the
//     coordinator's advertised address: PsAddresses); fewer than S -> the
//     job FAILS ("spec.ps_shards: ..."), and at submit FAILED_PRECONDITION.
//   * Ring over TCP (spec.peer_transport TCP): every chosen worker needs a
//     data address; otherwise the job FAILS naming the workers without one.
//   * Ring over shared memory (spec.peer_transport SHM): every rank on one
//     host. PreferOneHost moves the first hostname (in id order) with K idle
//     workers to the front; when no host has K idle workers the job FAILS
//     naming the idle workers per host (it does not wait for busy ones).
//     A vacant or joined rank of a RUNNING job goes only to a worker its
//     ring can reach (CanTakeRank).
//   * A resumed job (spec.resume_from): its rank 0 alone reads the
//     checkpoint (worker/job_runner.h ResumeFromRankZero), so the worker
//     that was rank 0 of the job it resumes (the one that wrote it), when
//     idle, goes first (PreferAsRankZero); the others keep their order.
//   * no_wait submit: RESOURCE_EXHAUSTED naming the idle workers when the
//     job cannot start at once (too few idle, or earlier jobs pending).
//
// Not thread-safe: plain functions; the Coordinator calls them under its
// mutex with its own records.
#ifndef LOCKSTEP_SERVER_SCHEDULER_H_
#define LOCKSTEP_SERVER_SCHEDULER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "server/job_store.h"
#include "server/worker_registry.h"

namespace lockstep {

// The parameter-server addresses a job may use: `configured` if any, else
// {advertise} (empty when advertise is "").
std::vector<std::string> PsAddresses(const std::vector<std::string>& configured,
                                     const std::string& advertise);

// At submit: FAILED_PRECONDITION when a PS job needs more shards than
// `ps` has addresses; OK otherwise (and for ring jobs).
absl::Status CheckPsShardsAtSubmit(const lockstep::v1::JobSpec& spec,
                                   const std::vector<std::string>& ps);
// At a no_wait submit: RESOURCE_EXHAUSTED unless `k` workers are idle and
// no earlier job is pending.
absl::Status CheckCanStartNow(int k, const std::vector<WorkerRecord*>& idle,
                              size_t pending_jobs);

// What to do with the head PENDING job.
struct StartPlan {
  enum Kind { kWait, kFail, kStart };
  Kind kind = kWait;
  std::string fail_reason;                // kFail
  std::vector<std::string> ps_addresses;  // kStart, PS jobs: the S used
};
// kWait while fewer than job.k workers are idle; kFail when a precondition
// above does not hold; else kStart on idle[0..k).
StartPlan PlanStart(const JobRecord& job, const std::vector<WorkerRecord*>& idle,
                    const std::vector<std::string>& ps);

// Moves the idle worker with id `writer` (if any; "" = none) to idle[0],
// keeping the others' order: it becomes rank 0 of the job started on
// idle[0..k).
void PreferAsRankZero(const std::string& writer, std::vector<WorkerRecord*>* idle);

// SHM jobs: stably moves the idle workers of the first hostname (in idle
// order) that has at least k of them to the front; no change when none has.
void PreferOneHost(int k, std::vector<WorkerRecord*>* idle);

// Whether idle worker `w` may take an open rank of RUNNING `job` (a vacant
// rank or a join, server/membership.h OpenRank): a ring over TCP needs its
// data address; a ring over shared memory needs it on the host of the
// job's bound ranks (the hostname they registered; any host when none is
// bound). ps jobs and gRPC rings take any worker.
bool CanTakeRank(const JobRecord& job, const WorkerRecord& w);

// Binds idle[r] as rank r (r < job->k): the worker is BUSY with the job, the
// rank records its addresses; the job is RUNNING since `now` with
// `ps_addresses`. Precondition: PlanStart said kStart.
void BindRanks(JobRecord* job, const std::vector<WorkerRecord*>& idle,
               std::vector<std::string> ps_addresses, absl::Time now);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_SCHEDULER_H_
