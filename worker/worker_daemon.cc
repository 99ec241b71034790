#include "worker/worker_daemon.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/blas.h"
#include "common/daemon_util.h"
#include "common/collective/chunking.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/grpc_ps_client.h"
#include "common/grpcutil/message_limits.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/train/job_memory.h"
#include "common/train/job_spec_convert.h"
#include "worker/job_data.h"
#include "common/train/replica_state.h"
#include "worker/net/state_service.h"

namespace lockstep {
namespace {

constexpr int64_t kWeightsChunkFloats = 256 * 1024;  // 1 MiB per message

// The key of a job's combines on the wire (Assignment.group_key; an older
// coordinator sends none: the job id).
uint64_t WireKey(const v1::Assignment& a) {
  return a.group_key() != 0 ? a.group_key() : a.job_id();
}

// A combine error that a peer (or the network to it) caused: the peer may
// be lost, which the coordinator decides. (ABORTED is the job's own verdict,
// e.g. a non-finite gradient under on_nonfinite=fail: reported at once.)
bool IsPeerFailure(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// The coordinator is down rather than unreachable: its host refused the
// connection (nothing listens on the port: the process died, e.g. it is
// being restarted) or closed it under a call. A partition shows up as a
// timeout or an unreachable network instead.
bool CoordinatorDown(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable) return false;
  for (absl::string_view sign : {"onnection refused", "Socket closed", "reset by peer",
                                 "Broken pipe", "GOAWAY"}) {
    if (absl::StrContains(s.message(), sign)) return true;
  }
  return false;
}

// Calls `call` until it succeeds, fails other than CoordinatorDown, `stop`
// becomes true or `grace` has passed since the first failure; waits 100 ms
// doubling to 1 s between calls (polling `stop` every 50 ms).
template <typename Call>
absl::Status RetryWhileCoordinatorDown(const Call& call, const std::atomic<bool>* stop,
                                       absl::Duration grace) {
  const absl::Time give_up = absl::Now() + grace;
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    absl::Status s = call();
    if (s.ok() || !CoordinatorDown(s) || (stop != nullptr && stop->load())) return s;
    const absl::Time retry_at = absl::Now() + backoff;
    if (retry_at > give_up) return s;
    while (absl::Now() < retry_at) {
      if (stop != nullptr && stop->load()) return s;
      absl::SleepFor(std::min(absl::Milliseconds(50), retry_at - absl::Now()));
    }
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

// The host:port part of a gRPC target ("dns:///h:1" -> "h:1").
std::string CoordinatorHost(absl::string_view target) {
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&target, scheme)) break;
  }
  return std::string(target);
}

// JobReporter over the coordinator's gRPC service.
class GrpcReporter : public JobReporter {
 public:
  // `on_stop` runs (on the reporter thread) when a ReportStep reply says
  // stop: the job's combine may be waiting on a peer that stopped already.
  // Calls are retried while the coordinator is down (restarting), for up
  // to `restart_grace` or until *stop.
  GrpcReporter(v1::Coordinator::Stub* stub, absl::Duration timeout, std::string worker_id,
               std::function<void()> on_stop, const std::atomic<bool>* stop,
               absl::Duration restart_grace)
      : stub_(stub),
        timeout_(timeout),
        worker_id_(std::move(worker_id)),
        on_stop_(std::move(on_stop)),
        stop_(stop),
        restart_grace_(restart_grace) {}

  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& report) override {
    v1::ReportStepReply reply;
    return ReportStepWithReply(report, &reply);
  }
  absl::StatusOr<bool> ReportStepWithReply(const v1::ReportStepRequest& report,
                                           v1::ReportStepReply* reply) override {
    absl::Status s = RetryWhileCoordinatorDown(
        [&] {
          reply->Clear();
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
          return FromGrpcStatus(stub_->ReportStep(&ctx, report, reply));
        },
        stop_, restart_grace_);
    if (!s.ok()) return Named(s);
    if (reply->stop() && on_stop_) on_stop_();
    return reply->stop();
  }
  // One ReportSteps call for the batch (step_reporter.h, "Batches"); one
  // report, or a coordinator without ReportSteps (UNIMPLEMENTED, or refused
  // by an older call policy), goes report by report.
  absl::StatusOr<bool> ReportStepsWithReply(absl::Span<const v1::ReportStepRequest* const> reports,
                                            v1::ReportStepReply* reply) override {
    if (reports.size() <= 1 || no_batches_) {
      return JobReporter::ReportStepsWithReply(reports, reply);
    }
    // The batch message is reused: copying into its kept elements does not
    // allocate once they have grown.
    auto* out = batch_.mutable_reports();
    while (out->size() > static_cast<int>(reports.size())) out->RemoveLast();
    for (size_t i = 0; i < reports.size(); ++i) {
      if (static_cast<int>(i) == out->size()) out->Add();
      out->Mutable(static_cast<int>(i))->CopyFrom(*reports[i]);
    }
    absl::Status s = RetryWhileCoordinatorDown(
        [&] {
          reply->Clear();
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
          return FromGrpcStatus(stub_->ReportSteps(&ctx, batch_, reply));
        },
        stop_, restart_grace_);
    if (s.code() == absl::StatusCode::kUnimplemented ||
        (s.code() == absl::StatusCode::kPermissionDenied &&
         absl::StrContains(s.message(), "ReportSteps"))) {
      no_batches_ = true;
      return JobReporter::ReportStepsWithReply(reports, reply);
    }
    if (!s.ok()) return Named(s);
    if (reply->stop() && on_stop_) on_stop_();
    return reply->stop();
  }
  absl::Status ReportEval(const v1::ReportEvalRequest& report) override {
    return Named(RetryWhileCoordinatorDown(
        [&] {
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
          v1::ReportEvalReply reply;
          return FromGrpcStatus(stub_->ReportEval(&ctx, report, &reply));
        },
        stop_, restart_grace_));
  }
  absl::Status UploadWeights(uint64_t job, const Replica& replica) override {
    return Named(RetryWhileCoordinatorDown([&] { return UploadOnce(job, replica); }, stop_,
                                           restart_grace_));
  }

 private:
  absl::Status UploadOnce(uint64_t job, const Replica& replica) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + 4 * timeout_));
    v1::UploadWeightsReply reply;
    auto writer = stub_->UploadWeights(&ctx, &reply);
    absl::Span<const float> p = replica.params();
    const int64_t total = static_cast<int64_t>(p.size());
    for (int64_t off = 0; off == 0 || off < total; off += kWeightsChunkFloats) {
      v1::WeightsChunk chunk;
      chunk.set_worker_id(worker_id_);
      chunk.set_job_id(job);
      chunk.set_offset(off);
      chunk.set_total(total);
      const int64_t len = std::min(kWeightsChunkFloats, total - off);
      chunk.set_data(reinterpret_cast<const char*>(p.data() + off), len * sizeof(float));
      if (off == 0) {
        for (const ParamBlock& b : replica.model().layout()) {
          chunk.add_block_names(b.name);
          for (int64_t d : b.shape.dims()) chunk.add_block_shapes(d);
          chunk.add_block_shapes(-1);
        }
      }
      if (!writer->Write(chunk)) break;
      if (total == 0) break;
    }
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  absl::Status Named(const absl::Status& s) const {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("coordinator: ", s.message()));
  }

  v1::Coordinator::Stub* stub_;
  absl::Duration timeout_;
  std::string worker_id_;
  std::function<void()> on_stop_;
  const std::atomic<bool>* stop_;
  absl::Duration restart_grace_;
  // The reporter thread's (ReportStepsWithReply runs on it only).
  v1::StepReports batch_;
  bool no_batches_ = false;  // the coordinator has no ReportSteps
};

}  // namespace

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

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options, std::shared_ptr<grpc::Channel> channel,
                           TransportFactory transports)
    : options_(std::move(options)),
      log_(LoggerOrStderr(options_.logger, "worker")),
      channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)),
      transports_(std::move(transports)) {
  absl::MutexLock l(&mu_);
  lost_after_ = options_.default_lost_after;
}

absl::Duration WorkerDaemon::peer_failure_grace() const {
  absl::MutexLock l(&mu_);
  return lost_after_ + 3 * heartbeat_interval_ + absl::Milliseconds(500);
}

absl::Duration WorkerDaemon::heartbeat_deadline() const {
  absl::MutexLock l(&mu_);
  return std::min(options_.rpc_timeout, std::max(absl::Seconds(1), 5 * heartbeat_interval_));
}

WorkerDaemon::~WorkerDaemon() {
  Shutdown();
  ReapJob(/*wait=*/true);
}

std::string WorkerDaemon::worker_id() const {
  absl::MutexLock l(&mu_);
  return worker_id_;
}

void WorkerDaemon::Shutdown() {
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  absl::MutexLock l(&mu_);
  wake_ = true;
  if (job_ != nullptr) job_->RequestStop();
}

void WorkerDaemon::Drain(const std::string& why) {
  std::string wid;
  v1::ReportDoneRequest done;
  bool report = false;
  {
    absl::MutexLock l(&mu_);
    if (draining_) return;
    draining_ = true;
    leave_reason_ = absl::StrCat("shutting down (", why, ")");
    if (options_.serving_changed) options_.serving_changed(false);
    wid = worker_id_;
    if (job_ != nullptr && !wid.empty() && !job_->report_claimed.exchange(true)) {
      report = true;
      done.set_worker_id(wid);
      done.set_job_id(job_->assignment.job_id());
      done.set_rank(job_->rank.load());
      done.set_generation(job_->generation.load());
      done.set_ok(false);
      done.set_error(absl::StrCat("worker ", wid, " (", options_.hostname, ") ", leave_reason_));
    }
  }
  // Tell the coordinator before stopping the job: stopping first would make
  // the peers' combines fail, and their reports could name them instead.
  if (report) {
    log_.Warn("leaving mid-job, reporting the job failed",
              {{"job", done.job_id()}, {"rank", done.rank()}, {"worker", wid},
               {"error", done.error()}});
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + std::min(options_.rpc_timeout,
                                                               kLeaveRpcTimeout)));
    v1::ReportDoneReply reply;
    absl::Status s = FromGrpcStatus(stub_->ReportDone(&ctx, done, &reply));
    if (!s.ok()) {
      log_.Warn("ReportDone failed", {{"job", done.job_id()}, {"error", s.message()}});
    }
  }
  Shutdown();
}

void WorkerDaemon::Deregister(const std::string& worker_id) {
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(worker_id);
  {
    absl::MutexLock l(&mu_);
    req.set_reason(leave_reason_);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + std::min(options_.rpc_timeout, kLeaveRpcTimeout)));
  v1::DeregisterWorkerReply reply;
  absl::Status s = FromGrpcStatus(stub_->DeregisterWorker(&ctx, req, &reply));
  if (!s.ok()) {
    log_.Warn("DeregisterWorker failed", {{"worker", worker_id}, {"error", s.message()}});
  } else {
    log_.Info("deregistered", {{"worker", worker_id}, {"coordinator", options_.coordinator}});
  }
}

absl::Status WorkerDaemon::Register() {
  v1::RegisterWorkerRequest req;
  req.set_address(options_.advertise_address);
  req.set_data_address(options_.data_address);
  req.set_hostname(options_.hostname);
  req.set_pid(getpid());
  req.set_max_job_memory_bytes(options_.max_job_memory_bytes);
  v1::RegisterWorkerReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  absl::Status s = FromGrpcStatus(stub_->RegisterWorker(&ctx, req, &reply));
  if (!s.ok()) return s;
  DeferredLog later(&log_);  // written after mu_ is released
  absl::MutexLock l(&mu_);
  worker_id_ = reply.worker_id();
  if (options_.serving_changed && !draining_) options_.serving_changed(true);
  if (reply.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(reply.heartbeat_interval_ms());
  }
  if (reply.lost_after_ms() > 0) lost_after_ = absl::Milliseconds(reply.lost_after_ms());
  last_answer_ = absl::Now();
  later.Add(LogLevel::kInfo, "registered",
            {{"worker", worker_id_},
             {"coordinator", options_.coordinator},
             {"address", reply.address().empty() ? options_.advertise_address : reply.address()},
             {"data_address", reply.data_address()}});
  return absl::OkStatus();
}

absl::Status WorkerDaemon::Run() {
  absl::Duration retry = absl::Milliseconds(100);
  absl::Status last;
  while (!shutdown_.HasBeenNotified()) {
    if (worker_id().empty()) {
      last = Register();
      if (!last.ok()) {
        log_.Warn("cannot register, retrying",
                  {{"coordinator", options_.coordinator},
                   {"error", last.message()},
                   {"retry_ms", absl::ToInt64Milliseconds(retry)}});
        shutdown_.WaitForNotificationWithTimeout(retry);
        retry = std::min(retry * 2, absl::Seconds(2));
        continue;
      }
      retry = absl::Milliseconds(100);
    }
    Heartbeat();
    ReapJob(/*wait=*/false);
    // Sleep one heartbeat interval, or less when woken.
    absl::MutexLock l(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&wake_), heartbeat_interval_);
    wake_ = false;
  }
  {
    absl::MutexLock l(&mu_);
    if (job_ != nullptr) job_->RequestStop();
  }
  ReapJob(/*wait=*/true);
  std::string leaving;  // the worker id to deregister after a Drain()
  {
    absl::MutexLock l(&mu_);
    if (draining_) leaving = worker_id_;
  }
  if (!leaving.empty()) Deregister(leaving);
  return absl::OkStatus();
}

void WorkerDaemon::Heartbeat() {
  v1::HeartbeatRequest req;
  {
    absl::MutexLock l(&mu_);
    req.set_worker_id(worker_id_);
    if (job_ != nullptr && !job_->finished.load()) {
      req.set_job_id(job_->assignment.job_id());
      req.set_generation(job_->generation.load());
      if (job_->holds_state.load()) {
        req.set_holds_state(true);
        req.set_held_step(job_->held_step.load());
      }
    }
  }
  v1::HeartbeatReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + heartbeat_deadline()));
  absl::Status s = FromGrpcStatus(stub_->Heartbeat(&ctx, req, &reply));
  if (!s.ok()) {
    log_.Warn("heartbeat failed", {{"coordinator", options_.coordinator}, {"error", s.message()}});
    // Cut off for lost_after: the coordinator has declared this worker
    // lost and its job's other ranks have stopped waiting for it. A
    // coordinator that is down (restarting) decides nothing meanwhile: the
    // job waits for it up to coordinator_restart_grace.
    DeferredLog later(&log_);
    absl::MutexLock l(&mu_);
    if (!CoordinatorDown(s)) {
      coordinator_down_only_ = false;
    } else {
      coordinator_down_at_ = absl::Now();
    }
    const absl::Duration silent = absl::Now() - last_answer_;
    const absl::Duration bound =
        coordinator_down_only_ ? std::max(lost_after_, options_.coordinator_restart_grace)
                               : lost_after_;
    if (job_ != nullptr && !job_->stop.load() && silent > bound) {
      later.Add(LogLevel::kWarn,
                "no heartbeat answered for longer than the coordinator's lost_after: this worker "
                "is lost to its job, stopping it",
                {{"job", job_->assignment.job_id()},
                 {"worker", worker_id_},
                 {"silent_s", absl::ToDoubleSeconds(silent)},
                 {"lost_after_s", absl::ToDoubleSeconds(lost_after_)}});
      job_->RequestStop();
    }
    return;
  }
  if (reply.resend_done_job_id() != 0) ResendDone(reply.resend_done_job_id());
  DeferredLog later(&log_);  // written after mu_ is released
  absl::MutexLock l(&mu_);
  last_answer_ = absl::Now();
  coordinator_down_only_ = true;
  if (reply.reregister()) {
    later.Add(LogLevel::kWarn, "unknown to the coordinator, registering again",
              {{"worker", worker_id_}});
    worker_id_.clear();
    if (options_.serving_changed) options_.serving_changed(false);
    if (job_ != nullptr) job_->RequestStop();
    return;
  }
  if (reply.stop_job() && job_ != nullptr) {
    later.Add(LogLevel::kInfo, "job ended by the coordinator, stopping",
              {{"job", job_->assignment.job_id()}, {"worker", worker_id_}});
    job_->RequestStop();
  }
  if (reply.has_assignment() && job_ != nullptr && !job_->finished.load() &&
      reply.assignment().job_id() == job_->assignment.job_id()) {
    // A regroup of the job this worker runs (see "Regroups" in the header).
    const v1::Assignment& a = reply.assignment();
    absl::MutexLock jl(&job_->mu);
    const int64_t newest = job_->has_pending ? job_->pending.generation() : -1;
    if (a.generation() > newest || (a.generation() == newest && a.start_ready() &&
                                    !job_->pending.start_ready())) {
      if (a.generation() > job_->generation.load() && a.generation() > newest) {
        later.Add(LogLevel::kWarn, "job regrouping: a worker of the job was lost",
                  {{"job", a.job_id()},
                   {"generation", a.generation()},
                   {"rank", a.rank()},
                   {"world", a.peer_addresses_size()},
                   {"worker", worker_id_}});
        job_->StopGenerationLocked();
      }
      job_->pending = a;
      job_->has_pending = true;
    }
    return;
  }
  if (reply.has_assignment() && job_ == nullptr && !draining_) {
    auto job = std::make_unique<RunningJob>();
    job->assignment = reply.assignment();
    RunningJob* raw = job.get();
    job_ = std::move(job);
    raw->thread = std::thread([this, raw] { RunJob(raw); });
  }
}

void WorkerDaemon::ResendDone(uint64_t job_id) {
  v1::ReportDoneRequest done;
  {
    absl::MutexLock l(&mu_);
    if (last_done_.job_id() == job_id) {
      done = last_done_;
    } else {
      // Nothing to resend (this process never finished that job): say so,
      // so the job fails naming this worker instead of waiting (rank -1:
      // unknown here; the coordinator takes the rank this worker holds).
      done.set_worker_id(worker_id_);
      done.set_job_id(job_id);
      done.set_rank(job_ != nullptr && job_->assignment.job_id() == job_id ? job_->rank.load()
                                                                           : -1);
      done.set_ok(false);
      done.set_error(absl::StrCat("worker ", worker_id_, " (", options_.advertise_address,
                                  ") has no record of finishing job ", job_id,
                                  " (the coordinator restarted and asked for its ReportDone)"));
    }
  }
  if (done.worker_id().empty()) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::ReportDoneReply reply;
  absl::Status s = FromGrpcStatus(stub_->ReportDone(&ctx, done, &reply));
  log_.Log(s.ok() ? LogLevel::kInfo : LogLevel::kWarn,
           "ReportDone sent again (the coordinator restarted)",
           {{"job", job_id}, {"ok", done.ok()}, {"error", s.ok() ? "" : s.message()}});
}

bool WorkerDaemon::AwaitDecision(RunningJob* job, int64_t generation, absl::Duration grace) {
  const absl::Time start = absl::Now();
  const absl::Time latest = start + options_.coordinator_restart_grace + grace;
  absl::Time until = start + grace;
  RunningJob::RegroupWait w{job, generation};
  for (;;) {
    {
      absl::MutexLock l(&job->mu);
      job->mu.AwaitWithDeadline(absl::Condition(&RunningJob::StoppedOrSuperseded, &w), until);
      if (job->stop.load() || job->SupersededLocked(generation)) {
        return job->SupersededLocked(generation);
      }
    }
    absl::Time down_at;
    {
      absl::MutexLock l(&mu_);
      down_at = coordinator_down_at_;
    }
    // A coordinator that is down (restarting) decides nothing meanwhile:
    // wait for it, `grace` past its last down heartbeat.
    const absl::Time extended = std::min(latest, down_at + grace);
    if (down_at < start - grace || extended <= absl::Now()) return false;
    until = extended;
  }
}

void WorkerDaemon::ReapJob(bool wait) {
  std::unique_ptr<RunningJob> done;
  {
    absl::MutexLock l(&mu_);
    // A transport still draining (its stopper thread) is reaped later.
    if (job_ == nullptr ||
        (!wait && (!job_->finished.load() || job_->stoppers_running.load() != 0))) {
      return;
    }
    done = std::move(job_);
  }
  if (done->thread.joinable()) done->thread.join();
  std::vector<std::thread> stoppers;
  {
    absl::MutexLock l(&done->mu);
    stoppers.swap(done->stoppers);
  }
  for (std::thread& t : stoppers) t.join();
}

void WorkerDaemon::RunJob(RunningJob* job) {
  // The current generation's assignment (server/membership.h): the first
  // one, then each regroup's.
  v1::Assignment a = job->assignment;
  job->rank.store(a.rank());
  job->generation.store(a.generation());
  const std::string wid = worker_id();
  const bool tcp = a.spec().peer_transport() == v1::TCP;
  // Policies whose answer to a lost peer is a regroup (membership.h):
  // shrink (and its late joiners) and wait (a replacement).
  // And a ps job on the coordinator's own shard: a coordinator restart
  // regroups it (its sums are lost; README "Coordinator state and restarts").
  const bool regroups = a.spec().on_worker_lost() == "shrink" ||
                        a.spec().on_worker_lost() == "wait" || a.coordinator_ps_shard();
  log_.Info("job started", {{"job", a.job_id()},
                            {"rank", a.rank()},
                            {"world", a.peer_addresses_size()},
                            {"worker", wid},
                            {"mode", a.spec().sync_mode() == v1::PS
                                         ? (a.spec().ps_transport() == v1::TCP ? "ps/tcp" : "ps")
                                     : tcp                          ? "ring/tcp"
                                                                    : "ring/grpc"},
                            {"model", a.spec().model()},
                            {"group", static_cast<int64_t>(WireKey(a))}});
  SetBlasThreads(options_.blas_threads);
  // Step reports are pipelined (worker/step_reporter.h): a reply that says
  // stop arrives while the job thread may already be in the next combine,
  // so it stops the job as a heartbeat's stop_job does.
  GrpcReporter reporter(stub_.get(), options_.rpc_timeout, wid, [job] { job->RequestStop(); },
                        &job->stop, options_.coordinator_restart_grace);

  // The replica state this worker holds for a regroup (EncodeReplicaState
  // bytes, "" = the initial replica) and its step.
  std::string held;
  int64_t held_step = 0;
  // A joiner (a replacement or a late joiner: its first assignment has a
  // generation above 0) holds nothing: its runner fetches rank join_source's
  // state at join_step before it trains.
  int join_source = -1;
  int64_t join_step = -1;
  auto run = [&]() -> absl::StatusOr<JobOutcome> {
    const int k = a.peer_addresses_size();
    // Dataset from this machine's disk, cached across jobs.
    std::shared_ptr<const TrainTest> data;
    const std::string key = a.spec().data().SerializeAsString();
    {
      absl::MutexLock l(&mu_);
      if (data_ != nullptr && data_key_ == key) data = data_;
    }
    if (data == nullptr) {
      auto loaded = LoadJobData(a.spec().data());
      if (!loaded.ok()) return loaded.status();
      data = std::make_shared<const TrainTest>(*std::move(loaded));
      absl::MutexLock l(&mu_);
      data_key_ = key;
      data_ = data;
    }
    // A job that cannot fit is refused before anything is allocated for it
    // (common/train/job_memory.h): the job fails with RESOURCE_EXHAUSTED
    // naming the need and the limit, and this worker keeps serving.
    if (options_.max_job_memory_bytes > 0) {
      auto train_spec = ToTrainSpec(a.spec());
      if (!train_spec.ok()) return train_spec.status();
      auto need = ComputeJobMemoryNeed(*train_spec, data->train.dim, data->train.num_classes, k);
      if (!need.ok()) return need.status();
      if (absl::Status s =
              CheckJobMemory(*need, options_.max_job_memory_bytes,
                             absl::StrCat("worker ", wid, " (", options_.hostname, ")"),
                             "its --max_job_memory_bytes");
          !s.ok()) {
        return s;
      }
    }
    std::unique_ptr<GradientCombiner> combiner;
    // gRPC clients of the shards, and (ps_transport TCP) their raw-TCP
    // data-plane clients, which the combine then uses.
    std::vector<std::unique_ptr<GrpcPsClient>> ps_clients;
    std::vector<std::unique_ptr<PsTcpClient>> ps_tcp_clients;
    std::vector<PsClient*> ps_ptrs;
    std::vector<std::unique_ptr<PsClient>> ps_wrapped;  // options_.wrap_ps_client's
    // The ps clients are replaced when the buffer length changes; the job's
    // stop hook must never see a destroyed one.
    auto publish_ps = [&] {
      absl::MutexLock l(&job->mu);
      job->ps_clients.clear();
      for (auto& c : ps_clients) job->ps_clients.push_back(c.get());
      for (auto& c : ps_tcp_clients) job->ps_clients.push_back(c.get());
      if (job->stop.load()) {
        for (PsClient* c : job->ps_clients) c->Cancel();
      }
    };
    if (a.spec().sync_mode() == v1::PS) {
      const int shards = a.ps_addresses_size();
      const bool ps_tcp = a.spec().ps_transport() == v1::TCP;
      if (shards < 1) return absl::FailedPreconditionError("assignment has no ps_addresses");
      combiner = std::make_unique<PsCombiner>(
          [&, shards, ps_tcp](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
            {
              absl::MutexLock l(&job->mu);
              job->ps_clients.clear();
            }
            ps_ptrs.clear();
            ps_wrapped.clear();  // before the clients they wrap
            ps_tcp_clients.clear();
            ps_clients.clear();
            for (int s = 0; s < shards; ++s) {
              auto [b, e] = ShardBounds(n, shards, s);
              // ":port" is the coordinator's own shard when it listens on a
              // wildcard address: dial it at the host we reach it at.
              const std::string addr = absl::StartsWith(a.ps_addresses(s), ":")
                                           ? absl::StrCat(HostOfAddress(CoordinatorHost(
                                                              options_.coordinator)),
                                                          a.ps_addresses(s))
                                           : a.ps_addresses(s);
              // Receives one shard per Pull reply (message_limits.h).
              ps_clients.push_back(std::make_unique<GrpcPsClient>(
                  CreateLimitedChannel(addr, PsMaxMessageBytes(e - b), PsChannelCredentials()),
                  addr, s, k, e - b));
              ps_ptrs.push_back(ps_clients.back().get());
              if (ps_tcp) {
                // The shard's raw-TCP data plane, at the port its gRPC
                // server names (and the host we dial it at).
                publish_ps();  // a stop while asking must cancel the RPC
                // Registers the job's data-plane secret for both of its keys
                // (steps and the shape round) with the shard's TCP plane.
                auto data = ps_clients.back()->DataAddress(absl::Now() + options_.rpc_timeout,
                                                           WireKey(a), a.data_plane_secret());
                if (!data.ok()) return data.status();
                if (absl::Status r = ps_clients.back()
                                         ->DataAddress(absl::Now() + options_.rpc_timeout,
                                                       ShapeAgreementJob(WireKey(a)),
                                                       a.data_plane_secret())
                                         .status();
                    !r.ok()) {
                  return r;
                }
                PsTcpClientOptions tcp_options;
                tcp_options.secret = a.data_plane_secret();
                tcp_options.tls = options_.ps_data_tls;
                ps_tcp_clients.push_back(
                    std::make_unique<PsTcpClient>(*data, s, k, e - b, tcp_options));
                ps_ptrs.back() = ps_tcp_clients.back().get();
              }
              if (options_.wrap_ps_client) {
                ps_wrapped.push_back(options_.wrap_ps_client(ps_ptrs.back()));
                ps_ptrs.back() = ps_wrapped.back().get();
              }
            }
            publish_ps();
            return ps_ptrs;
          },
          a.rank());
    } else {
      std::vector<std::string> peers(a.peer_addresses().begin(), a.peer_addresses().end());
      if (tcp) {
        // The coordinator fills one data address per rank; an older one
        // sends none, and a worker without a hub registered "".
        if (a.data_addresses_size() != k) {
          return absl::FailedPreconditionError(absl::StrCat(
              "spec.peer_transport: TCP job ", a.job_id(), " came with ",
              a.data_addresses_size(), " data addresses for ", k,
              " ranks (a coordinator without TCP support?)"));
        }
        for (int r = 0; r < k; ++r) {
          if (r != a.rank() && a.data_addresses(r).empty()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "spec.peer_transport: TCP: peer rank ", r, " (", a.peer_addresses(r),
                ") has no data address"));
          }
        }
        peers.assign(a.data_addresses().begin(), a.data_addresses().end());
      }
      auto transport = transports_(a.spec().peer_transport(), WireKey(a), a.rank(), peers,
                                   a.data_plane_secret());
      if (!transport.ok()) return transport.status();
      combiner = std::make_unique<RingCombiner>((*transport)->transport());
      absl::MutexLock l(&job->mu);
      job->transport = *std::move(transport);
    }
    JobRunnerOptions o;
    o.job_id = a.job_id();
    o.group_key = WireKey(a);
    o.spec = a.spec();
    o.rank = a.rank();
    o.world = k;
    o.worker_id = wid;
    o.peer_names.assign(a.peer_addresses().begin(), a.peer_addresses().end());
    o.combine_timeout = options_.combine_timeout;
    o.perturb_at_step = options_.perturb_at_step;
    o.flip_at_step = options_.flip_at_step;
    o.flip_optimizer = options_.flip_optimizer;
    o.flip_index = options_.flip_index;
    o.nan_at_step = options_.nan_at_step;
    o.generation = a.generation();
    if (a.generation() > 0) o.initial_state = held;
    o.initial_state_is_final = a.generation() > 0 && a.state_source_group_key() != 0;
    if (held.empty() && join_source >= 0) {
      o.initial_state_source = join_source;
      o.initial_state_step = join_step;
    }
    o.state_board = options_.state_board;
    if (options_.state_board != nullptr) {
      // A new job starts: the previous job's final state is no longer
      // offered (at most one finished job's state is held).
      uint64_t stale_final = 0;
      {
        absl::MutexLock l(&mu_);
        stale_final = offered_final_key_;
        offered_final_key_ = 0;
      }
      if (stale_final != 0) options_.state_board->Remove(stale_final);
    }
    if (options_.state_board != nullptr) {
      // Peers' states come from their gRPC servers (the peer addresses).
      // A rank that copies a finished rank's final state fetches it under
      // the generation it is offered under (Assignment.state_source_group_key).
      const uint64_t fetch_group =
          o.initial_state_is_final ? a.state_source_group_key() : o.group_key;
      o.fetch_state = [peers = o.peer_names, group = fetch_group, wid,
                       credentials = ChannelCredentials()](
                          int peer, int64_t step, int64_t expected_bytes,
                          absl::Time deadline) -> absl::StatusOr<std::string> {
        FetchStateOptions f;
        f.credentials = credentials;
        f.group = group;
        f.step = step;
        f.expected_bytes = expected_bytes;
        f.deadline = deadline;
        f.requester = wid;
        return FetchReplicaState(peers.at(static_cast<size_t>(peer)), f);
      };
    }
    o.observer = options_.step_observer;
    o.logger = &log_;
    JobRunner runner(o, data.get(), combiner.get(), &reporter);
    {
      absl::MutexLock l(&job->mu);
      job->runner = &runner;
      // A regroup announced while this generation was being set up.
      if (job->SupersededLocked(a.generation())) job->StopGenerationLocked();
    }
    if (job->stop.load()) runner.RequestStop();
    auto out = runner.Run();
    if (out.ok() && a.coordinator_ps_shard() && options_.state_board != nullptr &&
        runner.replica() != nullptr) {
      // Offered until the job ends: if the coordinator (its shard) restarts
      // now, a rank still pulling the last sum copies this final state
      // (server/membership.h RegroupAfterRestart). One copy per job.
      options_.state_board->Publish(WireKey(a), runner.next_step(),
                                    EncodeReplicaState(*runner.replica(), runner.next_step()));
      absl::MutexLock l(&mu_);
      offered_final_key_ = WireKey(a);
    }
    if (!out.ok() && regroups && runner.replica() != nullptr) {
      // Kept for a regroup (a lost peer): the replica at its step boundary.
      held_step = runner.next_step();
      held = EncodeReplicaState(*runner.replica(), held_step);
    }
    absl::MutexLock l(&job->mu);
    job->runner = nullptr;
    job->ps_clients.clear();
    job->ShutdownTransportLocked();  // drains on its own thread
    return out;
  };
  // A regroup (server/membership.h; "Regroups" in the header): takes the
  // newest generation's assignment, heartbeats the held step until the
  // coordinator says where the new group starts, then copies the source
  // rank's state if this replica is behind it.
  auto regroup = [&]() -> absl::Status {
    const absl::Time t0 = absl::Now();
    // Under wait the coordinator may take up to the job's wait timeout to
    // find a replacement.
    const absl::Time deadline =
        t0 + options_.combine_timeout + 2 * peer_failure_grace() +
        (a.spec().on_worker_lost() == "wait" ? WorkerLostWaitTimeout(a.spec())
                                             : absl::ZeroDuration());
    for (;;) {
      {
        absl::MutexLock l(&job->mu);
        a = job->pending;
      }
      job->rank.store(a.rank());
      job->generation.store(a.generation());
      job->held_step.store(held_step);
      job->holds_state.store(true);
      log_.Info("regroup: holding the replica for the new group",
                {{"job", a.job_id()},
                 {"generation", a.generation()},
                 {"rank", a.rank()},
                 {"world", a.peer_addresses_size()},
                 {"held_step", held_step}});
      {
        absl::MutexLock l(&mu_);
        wake_ = true;  // heartbeat the held step at once
      }
      RunningJob::RegroupWait w{job, a.generation()};
      bool decided;
      {
        absl::MutexLock l(&job->mu);
        decided = job->mu.AwaitWithDeadline(absl::Condition(&RunningJob::RegroupDecided, &w), deadline);
        if (decided && !job->SupersededLocked(a.generation())) a = job->pending;
      }
      if (job->stop.load()) {
        job->holds_state.store(false);
        return absl::CancelledError(absl::StrCat("job ", a.job_id(), " stopped while regrouping"));
      }
      if (!decided) {
        job->holds_state.store(false);
        return absl::DeadlineExceededError(absl::StrCat(
            "regroup of job ", a.job_id(), " (generation ", a.generation(),
            "): the coordinator did not say where the new group starts within ",
            absl::FormatDuration(deadline - t0)));
      }
      if (a.start_ready() && a.generation() == job->generation.load()) break;
    }
    job->holds_state.store(false);
    const int64_t s = a.start_step();
    const int source = a.state_source_rank();
    if (s == 0 && held.empty()) {
      // Nobody trained a step (server/membership.h RecordHeldStep): the
      // runner builds the initial replica as at the job's start; no copy.
      held_step = 0;
      join_source = -1;
    }
    if (held_step > s || source < 0 || source >= a.peer_addresses_size()) {
      return absl::InternalError(absl::StrCat("regroup of job ", a.job_id(), ": start step ", s,
                                              " from rank ", source, ", this rank holds step ",
                                              held_step));
    }
    bool fetched = false;
    if (a.rank() == source && options_.state_board != nullptr && !held.empty()) {
      options_.state_board->Publish(WireKey(a), s, held);
    }
    if (held_step < s && held.empty() && options_.state_board != nullptr) {
      // A joiner: its runner fetches the source's state (sized for the
      // job's model, which only the runner builds) before it trains.
      join_source = source;
      join_step = s;
    } else if (held_step < s) {
      if (options_.state_board == nullptr || held.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "regroup of job ", a.job_id(), ": this rank is at step ", held_step,
            " and cannot copy rank ", source, "'s state at step ", s));
      }
      FetchStateOptions f;
      f.credentials = ChannelCredentials();
      // A source that finished offers its final state under its own
      // generation's key (Assignment.state_source_group_key).
      f.group = a.state_source_group_key() != 0 ? a.state_source_group_key() : WireKey(a);
      f.step = s;
      f.expected_bytes = static_cast<int64_t>(held.size());
      f.deadline = absl::Now() + options_.combine_timeout;
      f.requester = wid;
      auto bytes = FetchReplicaState(a.peer_addresses(source), f);
      if (!bytes.ok()) {
        return absl::Status(bytes.status().code(),
                            absl::StrCat("regroup of job ", a.job_id(), ": state of rank ", source,
                                         " (", a.peer_addresses(source), ") at step ", s, ": ",
                                         bytes.status().message()));
      }
      held = *std::move(bytes);
      held_step = s;
      fetched = true;
    }
    log_.Warn("regroup: continuing in the new group",
              {{"job", a.job_id()},
               {"generation", a.generation()},
               {"rank", a.rank()},
               {"world", a.peer_addresses_size()},
               {"start_step", s},
               {"state_from_rank", fetched || join_source >= 0 ? source : a.rank()},
               {"seconds", absl::ToDoubleSeconds(absl::Now() - t0)}});
    return absl::OkStatus();
  };

  absl::StatusOr<JobOutcome> out = absl::UnknownError("not run");
  if (a.generation() > 0) {
    // Joining a running job (membership.h): wait for the start like a
    // survivor of a regroup, holding nothing (held_step -1).
    held_step = -1;
    {
      absl::MutexLock l(&job->mu);
      if (!job->has_pending || job->pending.generation() < a.generation()) {
        job->pending = a;
        job->has_pending = true;
      }
    }
    absl::Status s = regroup();
    out = s.ok() ? run() : absl::StatusOr<JobOutcome>(s);
  } else {
    out = run();
  }
  while (!out.ok() && !job->stop.load()) {
    bool superseded;
    {
      absl::MutexLock l(&job->mu);
      superseded = job->SupersededLocked(a.generation());
    }
    // A combine that failed on a peer: let the coordinator say who was lost
    // (see "Lost workers" in the header) before reporting this side's
    // error. Under on_worker_lost=shrink or wait its answer may be a regroup.
    const bool may_regroup = regroups && out.status().code() != absl::StatusCode::kAborted;
    if (!superseded && (IsPeerFailure(out.status()) || may_regroup)) {
      const absl::Duration grace = peer_failure_grace();
      log_.Warn("combine failed on a peer; waiting for the coordinator's decision before "
                "reporting",
                {{"job", a.job_id()},
                 {"rank", a.rank()},
                 {"worker", wid},
                 {"grace_s", absl::ToDoubleSeconds(grace)},
                 {"error", out.status().message()}});
      const absl::Time start = absl::Now();
      superseded = AwaitDecision(job, a.generation(), grace);
      log_.Info(superseded       ? "the coordinator regrouped the job"
                : job->stop.load() ? "the coordinator ended the job"
                                   : "no decision within the grace, reporting",
                {{"job", a.job_id()},
                 {"worker", wid},
                 {"waited_s", absl::ToDoubleSeconds(absl::Now() - start)}});
    }
    if (!superseded || job->stop.load()) break;
    if (absl::Status s = regroup(); !s.ok()) {
      out = s;
      break;
    }
    out = run();
  }
  if (options_.step_observer != nullptr) options_.step_observer->OnJobEnd(a.job_id());

  v1::ReportDoneRequest done;
  done.set_worker_id(wid);
  done.set_job_id(a.job_id());
  done.set_rank(a.rank());
  done.set_generation(a.generation());
  done.set_ok(out.ok());
  if (out.ok()) {
    done.set_steps(out->steps);
    done.set_test_accuracy(out->test_accuracy);
    done.set_test_loss(out->test_loss);
    done.set_weights_hash(out->weights_hash);
    log_.Info("job done", {{"job", a.job_id()},
                           {"rank", a.rank()},
                           {"worker", wid},
                           {"steps", out->steps},
                           {"weights_hash", out->weights_hash}});
  } else {
    done.set_error(std::string(out.status().message()));
    const bool stopped = out.status().code() == absl::StatusCode::kCancelled;
    log_.Log(stopped ? LogLevel::kInfo : LogLevel::kError, stopped ? "job stopped" : "job failed",
             {{"job", a.job_id()},
              {"rank", a.rank()},
              {"worker", wid},
              {"code", absl::StatusCodeToString(out.status().code())},
              {"error", out.status().message()}});
  }
  {
    absl::MutexLock l(&mu_);
    last_done_ = done;  // sent again if a restarted coordinator asks
  }
  if (!job->report_claimed.exchange(true)) {  // else Drain() reported it failed
    absl::Status s = RetryWhileCoordinatorDown(
        [&] {
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
          v1::ReportDoneReply reply;
          return FromGrpcStatus(stub_->ReportDone(&ctx, done, &reply));
        },
        /*stop=*/nullptr, options_.coordinator_restart_grace);
    if (!s.ok()) {
      log_.Warn("ReportDone failed", {{"job", a.job_id()}, {"error", s.message()}});
    }
  }
  job->finished.store(true);
  absl::MutexLock l(&mu_);
  wake_ = true;  // heartbeat as idle now

}

}  // namespace lockstep
