// WorkerDaemon::RunJob: the job thread of one assignment and its regroups
// (see worker_daemon.h); the daemon's lifecycle is in worker_daemon.cc.
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
#include "common/grpcutil/worker_token.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/train/job_memory.h"
#include "common/train/job_spec_convert.h"
#include "worker/coordinator_reporter.h"
#include "worker/job_data.h"
#include "worker/running_job.h"
#include "common/train/replica_state.h"
#include "worker/net/state_service.h"

namespace lockstep {
namespace {

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

// The host:port part of a gRPC target ("dns:///h:1" -> "h:1").
std::string CoordinatorHost(absl::string_view target) {
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&target, scheme)) break;
  }
  return std::string(target);
}

}  // namespace

void WorkerDaemon::RunJob(RunningJob* job) {
  // The current generation's assignment (server/membership.h): the first
  // one, then each regroup's.
  v1::Assignment a = job->assignment;
  job->rank.store(a.rank());
  job->generation.store(a.generation());
  // This registration's id and token (sent with every call naming it).
  const std::pair<std::string, std::string> identity_now = identity();
  const std::string wid = identity_now.first;
  const std::string token = identity_now.second;
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
                                     : a.spec().peer_transport() == v1::SHM ? "ring/shm"
                                                                    : "ring/grpc"},
                            {"model", a.spec().model()},
                            {"group", static_cast<int64_t>(WireKey(a))}});
  SetBlasThreads(options_.blas_threads);
  // Step reports are pipelined (worker/step_reporter.h): a reply that says
  // stop arrives while the job thread may already be in the next combine,
  // so it stops the job as a heartbeat's stop_job does.
  // It keeps the newest answered reports for a restarted coordinator
  // (worker/report_replay.h).
  GrpcReporter reporter(stub_.get(), options_.rpc_timeout, wid, token,
                        [job] { job->RequestStop(); },
                        &job->stop, options_.coordinator_restart_grace, kReplayReports, &log_);

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
    // Declared before the combiner that uses it (destroyed after it).
    std::unique_ptr<PeerWaitTransport> waited;
    std::unique_ptr<GradientCombiner> combiner;
    // gRPC clients of the shards, and (ps_transport TCP) their raw-TCP
    // data-plane clients, which the combine then uses.
    std::vector<std::unique_ptr<GrpcPsClient>> ps_clients;
    std::vector<std::unique_ptr<PsTcpClient>> ps_tcp_clients;
    std::vector<PsClient*> ps_ptrs;
    std::vector<std::unique_ptr<PsClient>> ps_wrapped;  // options_.wrap_ps_client's
    std::vector<std::unique_ptr<ShardWaitPsClient>> ps_waited;  // outermost: the shard waits
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
            ps_waited.clear();  // before the clients they wrap
            ps_wrapped.clear();
            ps_tcp_clients.clear();
            ps_clients.clear();
            // ":port" is the coordinator's own shard when it listens on a
            // wildcard address: dial it at the host we reach it at.
            std::vector<std::string> dial;
            for (int s = 0; s < shards; ++s) {
              dial.push_back(absl::StartsWith(a.ps_addresses(s), ":")
                                 ? absl::StrCat(HostOfAddress(CoordinatorHost(options_.coordinator)),
                                                a.ps_addresses(s))
                                 : a.ps_addresses(s));
            }
            {
              // Every shard's gRPC address at once (a probe never sees a
              // partial list); its data address replaces it when known.
              absl::MutexLock l(&job->mu);
              job->shard_addresses = dial;
            }
            for (int s = 0; s < shards; ++s) {
              auto [b, e] = ShardBounds(n, shards, s);
              const std::string& addr = dial[static_cast<size_t>(s)];
              // Receives one shard per Pull reply (message_limits.h).
              ps_clients.push_back(std::make_unique<GrpcPsClient>(
                  CreateLimitedChannel(addr, PsMaxMessageBytes(e - b), PsChannelCredentials(a.coordinator_ps_shard())),
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
                {
                  absl::MutexLock l(&job->mu);
                  job->shard_addresses[static_cast<size_t>(s)] = *data;
                }
                PsTcpClientOptions tcp_options;
                tcp_options.secret = a.data_plane_secret();
                tcp_options.progress = job->peer_wait.progress();
                tcp_options.tls = a.coordinator_ps_shard() ? options_.coordinator_ps_data_tls
                                                          : options_.ps_data_tls;
                ps_tcp_clients.push_back(
                    std::make_unique<PsTcpClient>(*data, s, k, e - b, tcp_options));
                ps_ptrs.back() = ps_tcp_clients.back().get();
              }
              if (options_.wrap_ps_client) {
                ps_wrapped.push_back(options_.wrap_ps_client(ps_ptrs.back()));
                ps_ptrs.back() = ps_wrapped.back().get();
              }
              ps_waited.push_back(
                  std::make_unique<ShardWaitPsClient>(ps_ptrs.back(), s, &job->peer_wait));
              ps_ptrs.back() = ps_waited.back().get();
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
                                   a.data_plane_secret(), job->peer_wait.shared_progress());
      if (!transport.ok()) return transport.status();
      // Validated at submit (spec.ring_algorithm); "" = auto.
      auto algorithm = ParseAllReduceAlgorithm(a.spec().ring_algorithm());
      if (!algorithm.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("spec.ring_algorithm: ", algorithm.status().message()));
      }
      waited = std::make_unique<PeerWaitTransport>((*transport)->transport(), &job->peer_wait);
      combiner = std::make_unique<RingCombiner>(waited.get(), *algorithm);
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
    o.nan_value = options_.nan_value;
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
    // Rank 0 writes the job's checkpoints: this worker serves them from
    // now on (a later resume may fetch them while it is busy).
    if (a.rank() == 0 && !a.spec().checkpoint_dir().empty() &&
        options_.checkpoint_dirs != nullptr) {
      options_.checkpoint_dirs->Add(a.spec().checkpoint_dir());
    }
    if (!a.checkpoint_source().empty()) {
      o.fetch_checkpoint = [source = a.checkpoint_source(), ref = a.spec().resume_from(), wid,
                            credentials = ChannelCredentials()](
                               uint64_t max_bytes, absl::Time deadline)
          -> absl::StatusOr<std::pair<int64_t, std::string>> {
        FetchCheckpointOptions f;
        f.checkpoint_dir = ref.checkpoint_dir();
        f.job_id = ref.job_id();
        f.step = ref.step();
        f.max_bytes = static_cast<int64_t>(max_bytes);
        f.deadline = deadline;
        f.requester = wid;
        f.credentials = credentials;
        // The writer serves two transfers at once: wait for a turn.
        auto got = FetchCheckpointFileInTurn(source, f);
        if (!got.ok()) return got.status();
        return std::make_pair(got->step, std::move(got->bytes));
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
    // A job the coordinator ended (cancelled, failed elsewhere, drained) is
    // stopped whatever error its last combine saw: a peer that stopped
    // first leaves this rank an UNAVAILABLE, not a failure of this job.
    const bool stopped =
        out.status().code() == absl::StatusCode::kCancelled || job->stop.load();
    log_.Log(stopped ? LogLevel::kInfo : LogLevel::kError, stopped ? "job stopped" : "job failed",
             {{"job", a.job_id()},
              {"rank", a.rank()},
              {"worker", wid},
              {"code", absl::StatusCodeToString(out.status().code())},
              {"error", out.status().message()}});
  }
  // No StepReporter uses the reporter any more (the runs are over).
  auto reports = std::make_shared<const ReportReplayLog>(reporter.TakeReplay());
  {
    absl::MutexLock l(&mu_);
    last_done_ = done;  // sent again if a restarted coordinator asks
    last_done_token_ = token;
    last_done_reports_ = reports;
  }
  if (!job->report_claimed.exchange(true)) {  // else Drain() reported it failed
    bool retried = false;
    absl::Status s = RetryWhileCoordinatorDown(
        [&] {
          if (retried) {
            // The coordinator was down: a restarted one may lack the
            // checks of the last steps. Their reports go first (tried
            // again while it is down; any other error leaves them: the
            // ReportDone matters more).
            int sent = 0;
            absl::Status r =
                ResendReports(stub_.get(), token, *reports, options_.rpc_timeout, 0, &sent);
            if (CoordinatorDown(r)) return r;
            log_.Log(r.ok() ? LogLevel::kInfo : LogLevel::kWarn,
                     "step reports sent again before ReportDone (the coordinator was down)",
                     {{"job", a.job_id()},
                      {"reports", static_cast<int64_t>(sent)},
                      {"kept", static_cast<int64_t>(reports->size())},
                      {"error", r.ok() ? "" : r.message()}});
          }
          retried = true;
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
          AttachWorkerToken(&ctx, token);
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
