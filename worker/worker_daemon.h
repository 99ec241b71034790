// WorkerDaemon: the life of a lockstep worker process.
//
//   register with the coordinator -> heartbeat every interval (carrying the
//   job it runs and its last step) -> when a heartbeat reply carries an
//   Assignment: load the job's dataset from this machine's disk (cached
//   across jobs), open the job's combiner (ring: a peer transport of the
//   job's spec.peer_transport, over the worker's gRPC server or its raw-TCP
//   peer hub; ps: clients of the parameter-server shards), run
//   the JobRunner on a job thread, report done, and go back to idle.
//
// A heartbeat reply with stop_job (the coordinator ended the job) stops the
// runner at its next step boundary and shuts the job's transport down so a
// Combine blocked on a peer returns at once. A worker runs one job at a
// time and sends ReportDone before it heartbeats as idle again.
//
// Lost workers (README "Failure semantics"). The coordinator decides who is
// lost (no heartbeat for its lost_after, told in RegisterWorkerReply
// .lost_after_ms, 3 s by default); a worker only reports what it saw:
//   * a combine that fails on a peer (UNAVAILABLE, DEADLINE_EXCEEDED: a
//     broken stream, a peer that stopped answering) does not end
//     the job from this side at once. The worker keeps heartbeating the job
//     and holds its ReportDone for up to peer_failure_grace() (lost_after +
//     3 heartbeat intervals + 0.5 s): when the peer was killed, frozen or
//     cut off, the coordinator declares it LOST within lost_after and the
//     job's reason names the lost rank and host instead of this survivor;
//     the next heartbeat's stop_job ends the wait. A peer that failed on its
//     own reports first and its reason wins the same way. Only when nothing
//     comes within the grace does this worker report its own error.
//   * a worker whose heartbeats have gone unanswered for lost_after (it is
//     the one cut off) stops its job: the coordinator has declared it lost
//     and its peers have stopped waiting for it. Each heartbeat waits at
//     most heartbeat_deadline() (min(rpc_timeout, max(1 s, 5 intervals))),
//     so the check runs at least that often.
//
// Regroups (JobSpec.on_worker_lost = "shrink"; server/membership.h). A
// heartbeat reply whose Assignment is for the job this worker runs, with a
// higher generation, means a peer was lost and the survivors form a new
// group: the daemon stops the current runner at its step boundary (and
// shuts its transport) WITHOUT ReportDone, encodes its replica at the step
// it holds (JobRunner::next_step), and heartbeats holds_state + held_step
// under the new generation. Under shrink, a runner that failed (anything
// but ABORTED) waits up to peer_failure_grace() for that decision like a
// peer failure does. When the coordinator answers start_ready (start step
// s, source rank): the source publishes its state on the state board
// under the new group key; a rank behind s fetches it from the source's
// peer address (FetchReplicaState); every rank then runs a new JobRunner
// with world = the new group's size, initial_state = that state, reports
// with the new generation. A second loss while regrouping just moves to
// the next generation with the same held state. The wait for the start
// has a deadline (combine_timeout + 2 x peer_failure_grace): then the job
// is reported failed.
//
// Coordinator restarts (README "Coordinator state and restarts"). When the
// coordinator's host refuses the connection (nothing listens on its port:
// the process died and is being restarted, not a network partition) or
// closes it under a call, the worker keeps its job for up to
// options.coordinator_restart_grace (30 s) instead of lost_after: it keeps
// heartbeating, the step reporter retries the unanswered report with
// backoff (100 ms doubling to 1 s) and the job thread blocks once it is 2
// steps ahead of the replies. A coordinator restarted with its --state_dir
// knows this worker's id and job, so the next heartbeat is answered and the
// job goes on; one that does not (reregister) ends the job as before.
// ReportEval, ReportDone and the final weights upload retry the same way.
// A ps job on the coordinator's own shard (Assignment.coordinator_ps_shard)
// loses the shard's sums at a restart: its combine fails at once, the
// worker keeps its replica (as for a regroup) and waits for the restarted
// coordinator's regroup while the coordinator is down. The worker keeps
// its last ReportDone and sends it again when a restarted coordinator asks
// (HeartbeatReply.resend_done_job_id: the first one was not committed).
// Any other failure (a timeout, an unreachable network) keeps the
// lost_after rule above.
//
// gRPC lives here and in the factories passed in; the training logic is in
// JobRunner. Threading: Run() blocks the calling thread until Shutdown()
// is called from another thread (e.g. a signal handler thread).
#ifndef LOCKSTEP_WORKER_WORKER_DAEMON_H_
#define LOCKSTEP_WORKER_WORKER_DAEMON_H_

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/collective/progress_mark.h"
#include "common/collective/transport.h"
#include "common/log.h"
#include "common/net/data_conn.h"
#include "common/train/checkpoint_dirs.h"
#include "common/train/state_board.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/report_replay.h"
#include "worker/job_runner.h"
#include "worker/probe_runner.h"
#include "worker/step_observer.h"

namespace lockstep {

// A job's ring transport; Shutdown() unblocks any waiting Send/Recv.
class JobTransport {
 public:
  virtual ~JobTransport() = default;
  virtual Transport* transport() = 0;
  virtual void Shutdown() = 0;
};

// Creates the ring transport of kind `kind` for `job` and `rank` among
// `peers` (address of rank r at index r: the assignment's peer_addresses for
// GRPC, its data_addresses for TCP). `secret`: the assignment's
// data_plane_secret (TCP connections prove it; common/net/data_auth.h).
// `progress`: the job's PeerWait progress, which every transport touches as
// bytes move (TCP and shm per system call or copy, gRPC per message); shared
// because gRPC's reactors may run after the transport is gone.
using TransportFactory = std::function<absl::StatusOr<std::unique_ptr<JobTransport>>(
    v1::PeerTransport kind, uint64_t job, int rank, const std::vector<std::string>& peers,
    const std::string& secret, std::shared_ptr<ProgressMark> progress)>;

// Deadline of each coordinator call made while draining (ReportDone of the
// abandoned job, DeregisterWorker), so an unreachable coordinator delays a
// SIGTERM exit by at most about twice this.
constexpr absl::Duration kLeaveRpcTimeout = absl::Seconds(1);

struct WorkerDaemonOptions {
  std::string coordinator;        // host:port
  std::string advertise_address;  // host:port of this worker's peer service
  // host:port of this worker's raw-TCP peer hub (TCP ring jobs); "" = none.
  std::string data_address;
  std::string hostname;
  absl::Duration rpc_timeout = absl::Seconds(5);
  absl::Duration combine_timeout = absl::Seconds(30);
  // The coordinator's lost_after when its RegisterWorkerReply does not say
  // (an older coordinator).
  absl::Duration default_lost_after = absl::Seconds(3);
  // How long a job survives a coordinator that refuses connections (it is
  // restarting; see "Coordinator restarts" above).
  absl::Duration coordinator_restart_grace = absl::Seconds(30);
  int blas_threads = 1;
  // A job whose memory need on this worker (common/train/job_memory.h)
  // exceeds this is refused (RESOURCE_EXHAUSTED naming need and limit);
  // 0 = no limit.
  int64_t max_job_memory_bytes = 0;
  // Fault injection for tests (see JobRunnerOptions::perturb_at_step).
  int64_t perturb_at_step = -1;
  // Fault injection for tests: the first RegisterWorker reply is dropped
  // as if lost in transit (Register returns DEADLINE_EXCEEDED), so the
  // daemon repeats the call (RegisterWorkerRequest.instance_secret).
  bool lose_first_register_reply = false;
  // Fault injection for tests (see JobRunnerOptions::flip_at_step).
  int64_t flip_at_step = -1;
  bool flip_optimizer = false;
  int64_t flip_index = 0;
  // Fault injection for tests (see JobRunnerOptions::nan_at_step).
  int64_t nan_at_step = -1;
  float nan_value = std::numeric_limits<float>::quiet_NaN();  // JobRunnerOptions::nan_value
  // The states this worker offers its peers (served by worker/net/
  // state_service.h on the same gRPC server as the peer service); jobs
  // publish to it and fetch from peers' (divergence repair). Not owned;
  // nullptr = this worker neither offers nor fetches states.
  StateBoard* state_board = nullptr;
  // The checkpoint directories this process wrote to (rank 0 of a job with
  // spec.checkpoint_dir records it), which its ReplicaState service serves
  // checkpoint files from (not owned; null: none recorded).
  CheckpointDirs* checkpoint_dirs = nullptr;
  // Log lines (component "worker"): registered, job started/done/failed/
  // stopped, the job's training lines (JobRunnerOptions::logger), RPC
  // failures. Not owned; nullptr = stderr text lines.
  const Logger* logger = nullptr;
  // Told whether this worker takes work (the daemon's health status):
  // true once registered, false when the coordinator asks it to register
  // again and when it drains. Called with the daemon's lock held: must not
  // call back into the daemon. May be empty.
  std::function<void(bool serving)> serving_changed;
  // Told every step's timing and every job's end (the worker's metrics).
  // Not owned; nullptr = none.
  StepObserver* step_observer = nullptr;
  // Wraps each ps shard client (the worker's metrics count its bytes); the
  // wrapper must forward every call. Empty = the clients are used as they are.
  std::function<std::unique_ptr<PsClient>(PsClient* inner)> wrap_ps_client;
  // Credentials of the channels to peers' ReplicaState (they expect a
  // worker's certificate) and to ps shards: a lockstep-server shard must
  // hold a server certificate, the coordinator's own shard (the job's
  // Assignment.coordinator_ps_shard) a coordinator certificate, so a stolen
  // coordinator key cannot pose as a ps server nor a server key as the
  // coordinator's shard (common/grpcutil/tls.h); nullptr = plain text. (The
  // coordinator channel and the peer transports get theirs from the caller.)
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  std::shared_ptr<grpc::ChannelCredentials> ps_channel_credentials;
  std::shared_ptr<grpc::ChannelCredentials> coordinator_ps_channel_credentials;
  // --data_plane_tls: the TLS context of --ps_transport=tcp connections, for
  // a lockstep-server shard (server certificate) and for the coordinator's
  // shard (coordinator certificate); nullptr = plain.
  std::shared_ptr<const dataconn::DataTls> ps_data_tls;
  std::shared_ptr<const dataconn::DataTls> coordinator_ps_data_tls;
};

class WorkerDaemon {
 public:
  WorkerDaemon(WorkerDaemonOptions options, std::shared_ptr<grpc::Channel> coordinator,
               TransportFactory transports);
  ~WorkerDaemon();

  // Registers, heartbeats and runs assigned jobs until Shutdown(). Returns
  // OK after a clean shutdown.
  absl::Status Run();
  // Stops a running job and makes Run() return. Any thread.
  void Shutdown();
  // Graceful shutdown (SIGTERM; `why` = "SIGTERM"): reports NOT serving,
  // takes no new assignment, tells the coordinator that the job it runs
  // failed (ReportDone ok=false, "worker w-2 (host) shutting down
  // (SIGTERM)") before stopping it, so the job's reason names this worker;
  // a job whose on_worker_lost is "shrink" or "wait" goes on without it:
  // the worker deregisters (DeregisterWorker) instead, before stopping, and
  // the coordinator regroups the others at once; then Shutdown(): the job stops at its next step boundary and a combine
  // waiting on a peer returns at once. Run() then deregisters
  // (DeregisterWorker) before it returns. Each coordinator call here waits
  // at most kLeaveRpcTimeout. Any thread; blocks for that one RPC.
  void Drain(const std::string& why);

  // The id the coordinator gave this worker ("" before registration).
  std::string worker_id() const;
  // worker_id() and its token, read together.
  std::pair<std::string, std::string> identity() const;

  // See "Lost workers" above (from the coordinator's registration reply).
  absl::Duration peer_failure_grace() const;
  absl::Duration heartbeat_deadline() const;

 private:
  struct RunningJob;

  // options_.channel_credentials, or plain text when it is null.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const {
    return options_.channel_credentials != nullptr ? options_.channel_credentials
                                                   : grpc::InsecureChannelCredentials();
  }
  // The credentials of a ps shard's channel: options_.coordinator_ps_channel_
  // credentials for the coordinator's own shard, else options_.ps_channel_
  // credentials; plain text when the one picked is null.
  std::shared_ptr<grpc::ChannelCredentials> PsChannelCredentials(bool coordinator_shard) const {
    const auto& c = coordinator_shard ? options_.coordinator_ps_channel_credentials
                                      : options_.ps_channel_credentials;
    return c != nullptr ? c : grpc::InsecureChannelCredentials();
  }

  absl::Status Register();
  // DeregisterWorker with the drain reason (Run(), after a Drain(); or
  // Drain() itself, leaving a shrink or wait job). True when it got through.
  bool Deregister(const std::string& worker_id);
  void Heartbeat();
  // Answers HeartbeatReply.resend_done_job_id (no lock held): the kept step
  // reports from reports_from_step (HeartbeatReply.resend_reports_from_step,
  // ReportSteps calls of 8), then the ReportDone.
  void ResendDone(uint64_t job_id, int64_t reports_from_step);
  // After a combine failed: waits until the job is stopped or superseded
  // (a regroup) for `grace` from now, extended while the coordinator is
  // down (restarting) to `grace` after its last down heartbeat, at most
  // coordinator_restart_grace + grace in all. True if superseded.
  bool AwaitDecision(RunningJob* job, int64_t generation, absl::Duration grace);
  void StartJob(const v1::Assignment& a);
  void RunJob(RunningJob* job);
  // Joins a job thread that has finished (or all, when `wait`).
  void ReapJob(bool wait);

  const WorkerDaemonOptions options_;
  const Logger log_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  TransportFactory transports_;
  absl::Notification shutdown_;
  // The coordinator's reachability probes (HeartbeatReply.probe): the
  // heartbeat thread (Run) only.
  ProbeRunner probes_;
  // Set (under mu_) when the main loop should heartbeat at once: shutdown,
  // or a job finished (so the worker shows IDLE without waiting a period).
  bool wake_ ABSL_GUARDED_BY(mu_) = false;

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // worker_id_'s token (RegisterWorkerReply.worker_token), sent with every
  // call naming it (common/grpcutil/worker_token.h).
  std::string worker_token_ ABSL_GUARDED_BY(mu_);
  // The token of this process's last registration, kept when the
  // coordinator asks it to register again: sent with RegisterWorker, it
  // lets the new registration replace the old one at once while that one is
  // still live (Coordinator::RegisterWorker).
  std::string previous_token_ ABSL_GUARDED_BY(mu_);
  // Drawn once (dataauth::RandomSecret) and sent with every RegisterWorker
  // (RegisterWorkerRequest.instance_secret): a repeat whose first reply was
  // lost gets the same registration back. Never logged.
  const std::string instance_secret_;
  bool register_reply_lost_ ABSL_GUARDED_BY(mu_) = false;  // lose_first_register_reply done
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(200);
  absl::Duration lost_after_ ABSL_GUARDED_BY(mu_);  // the coordinator's
  // When a heartbeat last got an answer (registration counts as one).
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Every heartbeat failure since the last answer said the coordinator is
  // down (CoordinatorDown in worker_daemon.cc), not unreachable.
  bool coordinator_down_only_ ABSL_GUARDED_BY(mu_) = true;
  // When a heartbeat last found the coordinator down (InfinitePast: never).
  absl::Time coordinator_down_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The last job's ReportDone (job_id 0: none yet), sent again when a
  // restarted coordinator asks (HeartbeatReply.resend_done_job_id).
  v1::ReportDoneRequest last_done_ ABSL_GUARDED_BY(mu_);
  std::string last_done_token_ ABSL_GUARDED_BY(mu_);  // its worker's token
  // That job's newest answered step reports (worker/report_replay.h), sent
  // again before its ReportDone when that goes again: the restarted
  // coordinator may lack the checks of the job's last steps.
  std::shared_ptr<const ReportReplayLog> last_done_reports_ ABSL_GUARDED_BY(mu_);
  // The state-board key of the last job's final state, offered for a
  // restarted coordinator's regroup (0: none). Removed when the next job
  // starts, so an idle worker holds at most one finished job's state.
  uint64_t offered_final_key_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<RunningJob> job_ ABSL_GUARDED_BY(mu_);
  // Drain() was called: no new assignments, deregister before Run() returns.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Drain() deregistered already (leaving a shrink or wait job).
  bool left_ ABSL_GUARDED_BY(mu_) = false;
  std::string leave_reason_ ABSL_GUARDED_BY(mu_);  // "shutting down (SIGTERM)"
  // Dataset cache: the last DataSpec loaded and its data.
  std::string data_key_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const TrainTest> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_WORKER_DAEMON_H_
