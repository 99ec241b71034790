// WorkerDaemon::RunningJob: one job this worker runs (its generations,
// the stop and regroup hand-offs between the heartbeat thread and the job
// thread). Private to the worker_daemon target (worker_daemon.cc: the
// daemon's lifecycle and heartbeats; worker_daemon_job.cc: RunJob).
#ifndef LOCKSTEP_WORKER_RUNNING_JOB_H_
#define LOCKSTEP_WORKER_RUNNING_JOB_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/collective/peer_wait.h"
#include "worker/worker_daemon.h"

namespace lockstep {

struct WorkerDaemon::RunningJob {
  v1::Assignment assignment;  // the first generation's
  std::atomic<bool> stop{false};
  // Membership (server/membership.h; see "Regroups" in the header): the
  // generation and rank this worker runs as now, and while regrouping the
  // step it holds its replica at (heartbeats carry them).
  std::atomic<int64_t> generation{0};
  std::atomic<int> rank{0};
  std::atomic<bool> holds_state{false};
  std::atomic<int64_t> held_step{-1};
  // The peer (ring) or ps shard the combine waits for (heartbeats report
  // it; the PeerWaitTransport or ShardWaitPsClient of whichever thread runs
  // the combine, one at a time, publishes it).
  PeerWait peer_wait;
  // The newest Assignment of this job a heartbeat brought (a higher
  // generation, or the start of the current one); generation -1 = none.
  v1::Assignment pending ABSL_GUARDED_BY(mu);
  bool has_pending ABSL_GUARDED_BY(mu) = false;
  std::atomic<bool> finished{false};  // ReportDone sent; safe to heartbeat idle
  // Whoever sets this first sends the job's one ReportDone: the job thread
  // when the job ends, or Drain() when the worker shuts down mid-job.
  std::atomic<bool> report_claimed{false};
  absl::Mutex mu;
  std::unique_ptr<JobTransport> transport ABSL_GUARDED_BY(mu);
  std::vector<PsClient*> ps_clients ABSL_GUARDED_BY(mu);  // owned by the job thread
  // Each ps shard's address as this worker dials it (the data address over
  // tcp once known, else the gRPC address), for the coordinator's shards
  // probe (HeartbeatReply.probe).
  std::vector<std::string> shard_addresses ABSL_GUARDED_BY(mu);
  JobRunner* runner ABSL_GUARDED_BY(mu) = nullptr;
  std::thread thread;
  // Notified by the first RequestStop (a held ReportDone waits on it).
  absl::Notification stopped;
  // Transports shut down (one per generation) and the threads running
  // their Shutdown() (ShutdownTransportLocked); joined before the
  // transports are destroyed (ReapJob).
  std::vector<std::unique_ptr<JobTransport>> retired ABSL_GUARDED_BY(mu);
  std::vector<std::thread> stoppers ABSL_GUARDED_BY(mu);
  std::atomic<int> stoppers_running{0};

  // absl::Condition arguments for the regroup waits (RunJob).
  struct RegroupWait {
    RunningJob* job;
    int64_t generation;
  };
  // The job was stopped, or a generation above w->generation is pending.
  static bool StoppedOrSuperseded(RegroupWait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return w->job->stopped.HasBeenNotified() || w->job->SupersededLocked(w->generation);
  }
  // ... or the start of w->generation itself is pending.
  static bool RegroupDecided(RegroupWait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return StoppedOrSuperseded(w) ||
           (w->job->has_pending && w->job->pending.generation() == w->generation &&
            w->job->pending.start_ready());
  }
  // A pending assignment of a generation above `generation`.
  bool SupersededLocked(int64_t gen) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return has_pending && pending.generation() > gen;
  }
  // A regroup (server/membership.h): stops the current generation's runner
  // at its next step boundary and interrupts its combine, WITHOUT stopping
  // the job (no ReportDone follows). Never blocks on the network.
  void StopGenerationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (runner != nullptr) runner->RequestStop();
    for (PsClient* c : ps_clients) c->Cancel();
    ShutdownTransportLocked();
  }

  // Stops the runner at its next step boundary and interrupts a combine
  // that waits on a peer (ring) or a shard (ps). Never blocks on the
  // network: callers hold the daemon's lock (Heartbeat).
  void RequestStop() {
    stop.store(true);
    absl::MutexLock l(&mu);
    if (!stopped.HasBeenNotified()) stopped.Notify();
    if (runner != nullptr) runner->RequestStop();
    for (PsClient* c : ps_clients) c->Cancel();
    ShutdownTransportLocked();
  }
  // A transport's Shutdown wakes every waiting call at once, but then lets
  // its streams drain for up to its close timeout (5 s, and 5 s more for a
  // gRPC stream to a peer that no longer answers): run it on its own
  // thread so that no lock is held and no heartbeat waits meanwhile.
  void ShutdownTransportLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (transport == nullptr) return;
    stoppers_running.fetch_add(1);
    JobTransport* t = transport.get();
    retired.push_back(std::move(transport));
    stoppers.emplace_back([this, t] {
      t->Shutdown();
      stoppers_running.fetch_sub(1);
    });
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_RUNNING_JOB_H_
