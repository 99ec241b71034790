// WorkerRegistry: the coordinator's workers, by registration sequence number
// (worker id "w-N", N = 1, 2, 3, ... in registration order; never reused).
//
// Rules it keeps (the Coordinator decides what they mean for jobs):
//   * CheckAddress: an address held by another LIVE worker (not LOST) whose
//     hostname or pid differs is refused with ALREADY_EXISTS naming both: two
//     hosts claiming one address are never silently swapped (a restarted
//     worker is accepted once its old id is LOST). The same process
//     registering again (the Coordinator also asks it for the live
//     registration's worker token: LiveAt), or a new one taking a LOST
//     worker's address, is allowed: RemoveAtAddress then drops the old ids
//     (their heartbeats then find no worker: reregister).
//   * Heartbeat bookkeeping (Seen): refreshes last_seen; a LOST worker that
//     heartbeats again is back: BUSY if still bound to a job, else IDLE.
//   * Lost detection (MarkLost): a worker not heard from for more than
//     lost_after becomes LOST (counted in lost_total; it may be lost again
//     after coming back).
//   * Idle selection: Idle() lists the IDLE workers in id order by number
//     (w-2 < w-10), the order the scheduler takes them in.
//
// Not thread-safe: the Coordinator owns one and calls it under its mutex.
// WorkerRecord pointers stay valid until that worker is removed.
#ifndef LOCKSTEP_SERVER_WORKER_REGISTRY_H_
#define LOCKSTEP_SERVER_WORKER_REGISTRY_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

struct WorkerRecord {
  int64_t seq = 0;  // N of "w-N"
  std::string id, address, hostname;
  std::string data_address;  // raw-TCP peer hub ("" = none)
  int64_t pid = 0;
  int64_t max_job_memory_bytes = 0;  // advertised at registration (0 = none)
  std::string blas_core, blas_advice;  // as registered (not persisted)
  // Hex HMAC of RegisterWorkerRequest.instance_secret under the coordinator's
  // key ("" = none sent); a repeated RegisterWorker of the same process
  // matches it (not persisted: after a restart a repeat is a new one).
  std::string instance_digest;
  // The instance_digest of the LOST registration this one replaced at its
  // address ("" = none): that process may take the address back
  // (Coordinator::RegisterWorker). Not persisted.
  std::string displaced_digest;
  lockstep::v1::WorkerState state = lockstep::v1::IDLE;
  uint64_t job_id = 0;  // bound job (0 = none)
  int rank = -1;
  absl::Time last_seen;
};

// True when `w` was registered by the process `pid` on `hostname` (both
// as the registration or heartbeat names them; 0 / "" compare as values).
inline bool SameProcess(const WorkerRecord& w, const std::string& hostname, int64_t pid) {
  return w.hostname == hostname && w.pid == pid;
}

// How a job's reasons name a worker that holds one of its ranks: "worker
// w-2 (rank 1, host h2, 10.0.0.2:7071)" (no "host ..." when it registered
// none).
std::string WorkerInJob(const WorkerRecord& w);
// The same from a job's rank record (the worker may be gone).
std::string WorkerInJob(const std::string& id, int rank, const std::string& hostname,
                        const std::string& address);

class WorkerRegistry {
 public:
  // nullptr unless `id` is "w-N" of a registered worker.
  WorkerRecord* Find(const std::string& id);

  // OK, or ALREADY_EXISTS when `address` is held by a live worker of
  // another process (hostname or pid differ); `now` for the message.
  absl::Status CheckAddress(const std::string& address, const std::string& hostname,
                            int64_t pid, absl::Time now) const;
  // The next worker's sequence number (consumed).
  int64_t NextSeq() { return next_seq_++; }
  // Without consuming it (persisted across restarts); SetNextSeq never
  // moves it backwards.
  int64_t next_seq() const { return next_seq_; }
  void SetNextSeq(int64_t seq) { next_seq_ = std::max(next_seq_, seq); }
  // The workers at `address` that are not LOST (after CheckAddress passed:
  // registrations of the process now registering again).
  std::vector<const WorkerRecord*> LiveAt(const std::string& address) const;
  // Removes every worker registered at `address` and returns them.
  std::vector<WorkerRecord> RemoveAtAddress(const std::string& address);
  // Adds `w` (w.seq from NextSeq, w.id "w-<seq>").
  WorkerRecord* Add(WorkerRecord w);
  void Remove(int64_t seq) { workers_.erase(seq); }

  // Refreshes w's last_seen; true when w was LOST and is back (then BUSY if
  // bound to a job, else IDLE).
  bool Seen(WorkerRecord* w, absl::Time now);
  // w is IDLE and bound to nothing.
  static void Unbind(WorkerRecord* w);

  struct Lost {
    WorkerRecord* worker;
    absl::Duration silent;  // since last seen
  };
  // Marks every worker not LOST and silent for more than `lost_after` LOST;
  // returns them in id order.
  std::vector<Lost> MarkLost(absl::Time now, absl::Duration lost_after);

  // The IDLE workers, in id order.
  std::vector<WorkerRecord*> Idle();
  bool AnyBusy() const;
  // Every worker, by sequence number (registration order).
  const std::map<int64_t, WorkerRecord>& all() const { return workers_; }
  // Transitions to LOST since start.
  int64_t lost_total() const { return lost_total_; }

 private:
  int64_t next_seq_ = 1;
  int64_t lost_total_ = 0;
  std::map<int64_t, WorkerRecord> workers_;  // by seq
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_WORKER_REGISTRY_H_
