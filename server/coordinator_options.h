// CoordinatorOptions: what a Coordinator (server/coordinator.h) is built
// with. Plain data; lockstep-coordinator fills it from its flags
// (server/coordinator_main.cc), tests set the fields they need.
#ifndef LOCKSTEP_SERVER_COORDINATOR_OPTIONS_H_
#define LOCKSTEP_SERVER_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/log.h"
#include "server/ps_control.h"

namespace lockstep {

struct CoordinatorOptions {
  // Returned to workers by RegisterWorker (heartbeat_interval_ms).
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  // A worker not heard from for longer than this is LOST (checked by Tick).
  absl::Duration lost_after = absl::Seconds(3);
  // Parameter-server addresses (shard s at index s). Empty: the
  // coordinator's own advertised address is the only one.
  std::vector<std::string> ps_addresses;
  // This coordinator's address as workers reach it (see SetAdvertiseAddress).
  std::string advertise_address;
  // Final weights are kept for at most this many jobs (>= 0).
  int max_jobs_with_weights = 8;
  // Sync checks a running job keeps in full (>= 1; older ones summarised,
  // coordinator.h "Sync history"); counters stay exact beyond it.
  int64_t max_sync_history = 4096;
  // Finished jobs kept in memory (>= 1); older ones are evicted
  // (--max_finished_jobs_in_memory).
  int64_t max_finished_jobs_in_memory = 1000;
  // ListJobs: evicted jobs listed from the state database per page (also
  // at most about kMaxListedEvictedBytes); older ones are a later page
  // (ListRequest.evicted_before).
  int64_t max_listed_evicted_jobs = 1000;
  // SubmitJob refuses a job whose memory need per worker (a lower bound,
  // server/submit_memory.h) exceeds this, or that fewer than min(K, live)
  // live workers can hold by their advertised limits: RESOURCE_EXHAUSTED
  // naming need and limit. <= 0: no limit of its own (--max_job_memory_bytes).
  int64_t max_job_memory_bytes = 0;
  // Watchers (NextJobEvents: WatchJob streams) get at most one progress
  // event per this interval (Clock time); state changes come at once.
  absl::Duration watch_interval = absl::Milliseconds(200);
  // Event lines (component "coordinator"): worker registered/lost/back, job
  // submitted/started/succeeded/failed/cancelled, hash mismatch at step t
  // naming the ranks and workers. Not owned; nullptr = stderr text lines.
  const Logger* logger = nullptr;
  // This coordinator's start, in [1, 2^43): the high bits of every job's
  // group key (Assignment.group_key = incarnation << 20 | (job id mod
  // 2^20)), so the job ids a restarted coordinator hands out again (from 1)
  // never meet the peer streams and ps state workers and ps servers keep of
  // the old jobs. 0 = milliseconds since unix 1.7e9 s on the Clock when
  // constructed (a later start has a larger one; at least 1).
  uint64_t incarnation = 0;
  // The coordinator's own ps shard registry's Forget (server/ps; null:
  // none). Called under the coordinator's lock (it must not call back) with
  // each group key, and its shape-agreement key (bit 63 set), of a job on
  // that shard which no rank uses any more: an older generation's once the
  // new generation's start is decided (every rank stopped and held), every
  // generation's when the job ends. Stale shards are freed at once instead
  // of staying until the registry's idle eviction.
  std::function<void(uint64_t group_key)> forget_ps_group;
  // The ps servers of --ps_addresses (server/ps_control.h; not owned, null:
  // none): each ps job on them gets its group keys' data-plane secrets
  // (when the first assignment of a generation goes out, before its workers
  // can ask the shard) and, like forget_ps_group, the keys nobody uses any
  // more.
  PsControl* ps_control = nullptr;
  // Test fault (--fault_hold_state_from_step; -1 = off): once any job's
  // check of a step >= this is queued for the state database, the database
  // commits nothing more (StateDb::HoldWrites), so a SIGKILL loses the
  // job's last checks and its end as a crash inside the flush interval
  // would. Logged once (WARN).
  int64_t fault_hold_state_from_step = -1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATOR_OPTIONS_H_
