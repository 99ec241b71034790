#include "worker/worker_daemon.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/blas.h"
#include "common/blas_core.h"
#include "common/daemon_util.h"
#include "common/collective/chunking.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/grpc_ps_client.h"
#include "common/grpcutil/message_limits.h"
#include "common/grpcutil/worker_token.h"
#include "common/net/data_auth.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/train/job_memory.h"
#include "common/train/job_spec_convert.h"
#include "worker/coordinator_reporter.h"
#include "worker/job_data.h"
#include "worker/running_job.h"
#include "common/train/replica_state.h"
#include "worker/net/state_service.h"

namespace lockstep {

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options, std::shared_ptr<grpc::Channel> channel,
                           TransportFactory transports)
    : options_(std::move(options)),
      log_(LoggerOrStderr(options_.logger, "worker")),
      channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)),
      transports_(std::move(transports)),
      instance_secret_(dataauth::RandomSecret()) {
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

std::pair<std::string, std::string> WorkerDaemon::identity() const {
  absl::MutexLock l(&mu_);
  return {worker_id_, worker_token_};
}

void WorkerDaemon::Shutdown() {
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  absl::MutexLock l(&mu_);
  wake_ = true;
  if (job_ != nullptr) job_->RequestStop();
}

void WorkerDaemon::Drain(const std::string& why) {
  std::string wid, token;
  v1::ReportDoneRequest done;
  bool report = false;
  bool claimed = false;      // this call reports for the running job
  bool leave_first = false;  // ... by leaving it (shrink, wait)
  std::string policy;
  uint64_t job_id = 0;
  {
    absl::MutexLock l(&mu_);
    if (draining_) return;
    draining_ = true;
    leave_reason_ = absl::StrCat("shutting down (", why, ")");
    if (options_.serving_changed) options_.serving_changed(false);
    wid = worker_id_;
    token = worker_token_;
    if (job_ != nullptr && !wid.empty() && !job_->report_claimed.exchange(true)) {
      claimed = true;
      policy = job_->assignment.spec().on_worker_lost();
      job_id = job_->assignment.job_id();
      // Under shrink or wait the job goes on without this worker: leave
      // (DeregisterWorker) before stopping, so the coordinator regroups the
      // others at once instead of after lost_after.
      leave_first = policy == "shrink" || policy == "wait";
    }
    if (claimed && !leave_first) {
      report = true;
      done.set_worker_id(wid);
      done.set_job_id(job_->assignment.job_id());
      done.set_rank(job_->rank.load());
      done.set_generation(job_->generation.load());
      done.set_ok(false);
      done.set_error(absl::StrCat("worker ", wid, " (", options_.hostname, ") ", leave_reason_));
    }
  }
  if (leave_first) {
    log_.Warn("leaving mid-job, the job goes on without this worker",
              {{"job", job_id}, {"on_worker_lost", policy}, {"worker", wid}});
    if (Deregister(wid)) {
      absl::MutexLock l(&mu_);
      left_ = true;
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
    AttachWorkerToken(&ctx, token);
    v1::ReportDoneReply reply;
    absl::Status s = FromGrpcStatus(stub_->ReportDone(&ctx, done, &reply));
    if (!s.ok()) {
      log_.Warn("ReportDone failed", {{"job", done.job_id()}, {"error", s.message()}});
    }
  }
  Shutdown();
}

bool WorkerDaemon::Deregister(const std::string& worker_id) {
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(worker_id);
  std::string token;
  {
    absl::MutexLock l(&mu_);
    req.set_reason(leave_reason_);
    if (worker_id == worker_id_) token = worker_token_;
  }
  grpc::ClientContext ctx;
  AttachWorkerToken(&ctx, token);
  ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + std::min(options_.rpc_timeout, kLeaveRpcTimeout)));
  v1::DeregisterWorkerReply reply;
  absl::Status s = FromGrpcStatus(stub_->DeregisterWorker(&ctx, req, &reply));
  if (!s.ok()) {
    log_.Warn("DeregisterWorker failed", {{"worker", worker_id}, {"error", s.message()}});
    return false;
  }
  log_.Info("deregistered", {{"worker", worker_id}, {"coordinator", options_.coordinator}});
  return true;
}

absl::Status WorkerDaemon::Register() {
  v1::RegisterWorkerRequest req;
  req.set_address(options_.advertise_address);
  req.set_data_address(options_.data_address);
  req.set_hostname(options_.hostname);
  req.set_pid(getpid());
  req.set_instance_secret(instance_secret_);
  req.set_max_job_memory_bytes(options_.max_job_memory_bytes);
  req.set_blas_core(BlasCoreName());
  req.set_blas_advice(BlasCoreAdvice(BlasCoreName(), ThisCpu()));
  v1::RegisterWorkerReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  {
    absl::MutexLock l(&mu_);
    AttachWorkerToken(&ctx, previous_token_);
  }
  absl::Status s = FromGrpcStatus(stub_->RegisterWorker(&ctx, req, &reply));
  if (!s.ok()) return s;
  DeferredLog later(&log_);  // written after mu_ is released
  absl::MutexLock l(&mu_);
  if (options_.lose_first_register_reply && !register_reply_lost_) {
    register_reply_lost_ = true;
    return absl::DeadlineExceededError(
        "RegisterWorker's reply was dropped as if lost in transit (--fault_lose_register_reply)");
  }
  worker_id_ = reply.worker_id();
  worker_token_ = reply.worker_token();
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
             {"data_address", reply.data_address()},
             {"blas_core", req.blas_core()}});
  if (!req.blas_advice().empty()) {
    later.Add(LogLevel::kWarn, "slow BLAS kernels", {{"advice", req.blas_advice()}});
  }
  return absl::OkStatus();
}

absl::Status WorkerDaemon::Run() {
  absl::Duration retry = absl::Milliseconds(100);
  absl::Status last;
  while (!shutdown_.HasBeenNotified()) {
    if (worker_id().empty()) {
      {
        // A draining worker never registers again (Drain() may have left
        // already: the coordinator then answers reregister).
        absl::MutexLock l(&mu_);
        if (draining_) break;
      }
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
    if (draining_ && !left_) leaving = worker_id_;
  }
  if (!leaving.empty()) Deregister(leaving);
  return absl::OkStatus();
}

void WorkerDaemon::Heartbeat() {
  v1::HeartbeatRequest req;
  req.set_pid(getpid());
  req.set_hostname(options_.hostname);
  std::string token;
  {
    absl::MutexLock l(&mu_);
    req.set_worker_id(worker_id_);
    token = worker_token_;
    if (job_ != nullptr && !job_->finished.load()) {
      req.set_job_id(job_->assignment.job_id());
      req.set_generation(job_->generation.load());
      if (job_->holds_state.load()) {
        req.set_holds_state(true);
        req.set_held_step(job_->held_step.load());
      }
      probes_.Fill(job_->assignment.job_id(), job_->generation.load(), &req);
      const PeerWait::Waiting w = job_->peer_wait.Current();
      if (w.peer >= 0 || w.shard >= 0) {
        req.set_waiting_for_peer(w.peer + 1);
        req.set_waiting_for_shard(w.shard + 1);
        req.set_waiting_ms(absl::ToInt64Milliseconds(w.waited));
      }
    }
  }
  v1::HeartbeatReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + heartbeat_deadline()));
  AttachWorkerToken(&ctx, token);
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
  if (reply.has_probe()) {
    v1::PeerProbe probe = reply.probe();
    bool known = true;
    if (probe.shards()) {  // the shards as this worker dials them
      probe.clear_addresses();
      absl::MutexLock l(&mu_);
      if (job_ != nullptr && job_->assignment.job_id() == probe.job_id()) {
        absl::MutexLock jl(&job_->mu);
        for (const std::string& a : job_->shard_addresses) probe.add_addresses(a);
      }
      // No shard dialled yet (or another job): no answer, rather than
      // "reached none" (the coordinator's probe deadline decides).
      known = probe.addresses_size() > 0 &&
              std::none_of(probe.addresses().begin(), probe.addresses().end(),
                           [](const std::string& a) { return a.empty(); });
    }
    if (known) probes_.Start(probe);  // this thread, no lock
  }
  if (reply.resend_done_job_id() != 0) {
    ResendDone(reply.resend_done_job_id(), reply.resend_reports_from_step());
  }
  DeferredLog later(&log_);  // written after mu_ is released
  absl::MutexLock l(&mu_);
  last_answer_ = absl::Now();
  coordinator_down_only_ = true;
  if (reply.reregister()) {
    later.Add(LogLevel::kWarn, "unknown to the coordinator, registering again",
              {{"worker", worker_id_}});
    worker_id_.clear();
    previous_token_ = worker_token_;
    worker_token_.clear();
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

void WorkerDaemon::ResendDone(uint64_t job_id, int64_t reports_from_step) {
  v1::ReportDoneRequest done;
  std::string token;
  std::shared_ptr<const ReportReplayLog> reports;
  {
    absl::MutexLock l(&mu_);
    if (last_done_.job_id() == job_id) {
      done = last_done_;
      token = last_done_token_;
      reports = last_done_reports_;
    } else {
      token = worker_token_;
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
  if (reports != nullptr) {
    // The restarted coordinator lost what it had not committed: the checks
    // of the job's last steps may be among it. Only the reports from the
    // first step it lacks go (few: this runs on the heartbeat thread).
    int sent = 0;
    absl::Status s = ResendReports(stub_.get(), token, *reports, options_.rpc_timeout,
                                   reports_from_step, &sent);
    log_.Log(s.ok() ? LogLevel::kInfo : LogLevel::kWarn,
             "step reports sent again before ReportDone (the coordinator restarted)",
             {{"job", job_id},
              {"reports", static_cast<int64_t>(sent)},
              {"from_step", reports_from_step},
              {"kept", static_cast<int64_t>(reports->size())},
              {"error", s.ok() ? "" : s.message()}});
  }
  grpc::ClientContext ctx;
  AttachWorkerToken(&ctx, token);
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
}  // namespace lockstep
