// lockstep-worker: a worker daemon. Parses flags and wires objects: the two
// peer data planes (one gRPC server with the PeerService, one raw-TCP
// TcpPeerHub on the same host; a ring job uses the one its
// spec.peer_transport names), the coordinator channel, and the WorkerDaemon
// loop. SIGINT/SIGTERM shut it down cleanly (exit 0).
//
// Exit codes: 0 after a signal, 1 when it cannot listen, 2 for bad flag
// values. --help lists every flag and exits 0 (common/flags_usage.h). Log
// lines: common/log.h (--log_format=text|json, --log_level), component
// "worker"; only a bad logging flag itself is a plain "lockstep-worker: ..."
// line.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_util.h"
#include "common/flags_usage.h"
#include "common/log.h"
#include "common/log_budget.h"
#include "common/log_flags.h"
#include "common/grpcutil/refusal_log.h"
#include "common/grpcutil/health_service.h"
#include "common/grpcutil/server_reflection.h"
#include "common/grpcutil/tls.h"
#include "common/process_tuning.h"
#include "common/train/job_memory.h"
#include "common/shutdown_signal.h"
#include "worker/net/grpc_transport.h"
#include "worker/net/peer_service.h"
#include "worker/net/state_service.h"
#include "worker/net/shm_transport.h"
#include "worker/net/tcp_transport.h"
#include "worker/fault_ps_client.h"
#include "worker/worker_daemon.h"
#include "common/grpcutil/message_limits.h"
#include "common/grpcutil/rpc_errors.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_server.h"
#include "common/net/data_tls_flag.h"
#include "worker/worker_metrics.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address host:port");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "Address of this worker's peer service (port 0 = chosen by the OS)");
ABSL_FLAG(std::string, advertise, "",
          "Address peers use to reach this worker: HOST (the bound port is added) or "
          "HOST:PORT. Default: the --listen host; for a wildcard --listen host (0.0.0.0, [::]) "
          "the IP address the coordinator sees this worker's calls come from");
ABSL_FLAG(int32_t, data_port, 0,
          "Port of this worker's raw-TCP peer data plane (ring jobs with "
          "--peer_transport=tcp), on the --listen host; 0 = chosen by the OS. Advertised "
          "with the host of --advertise (or its default)");
ABSL_FLAG(std::string, port_file, "", "Write the bound port here once listening");
ABSL_FLAG(std::string, metrics_host, "",
          "Host of the HTTP server for Prometheus (GET /metrics, /healthz); default: the "
          "--listen host");
ABSL_FLAG(int32_t, metrics_port, 9171,
          "Port of the metrics HTTP server: -1 = off, 0 = chosen by the OS. When the default "
          "9171 is taken (a second worker on this host) an OS-chosen port is used and logged; "
          "an explicitly given port that is taken is an error");
ABSL_FLAG(std::string, metrics_port_file, "", "Write the metrics server's bound port here");
ABSL_FLAG(std::string, hostname, "", "Name shown in status (default: gethostname)");
ABSL_FLAG(int32_t, blas_threads, 1, "OpenBLAS threads per worker");
ABSL_FLAG(int64_t, max_job_memory_bytes, -1,
          "Refuse a job whose memory need on this worker (parameters, gradient, optimizer "
          "state, combine buffer, activations) exceeds this many bytes, with "
          "RESOURCE_EXHAUSTED naming both; -1 = 3/4 of physical memory, 0 = no limit");
ABSL_FLAG(int64_t, fault_perturb_step, -1,
          "Testing only: after this step of every job, nudge this replica's first weight by "
          "one ulp so the coordinator's hash check catches the drift (-1 = off)");
ABSL_FLAG(int64_t, fault_flip_step, -1,
          "Testing only: after this step of every job, flip one bit (the lowest) of one value "
          "of this replica (--fault_flip_target, --fault_flip_index), so the coordinator's "
          "check finds it and --on_divergence applies (-1 = off)");
ABSL_FLAG(std::string, fault_flip_target, "weights",
          "Testing only: what --fault_flip_step flips: weights or optimizer (its state slots)");
ABSL_FLAG(int64_t, fault_flip_index, 0,
          "Testing only: which parameter (or optimizer slot) --fault_flip_step flips");
ABSL_FLAG(int64_t, fault_hold_pull_step, -1,
          "Testing only: hold this worker's ps pull of this step (its push goes out) until "
          "--fault_hold_pull_file exists");
ABSL_FLAG(std::string, fault_hold_pull_file, "",
          "Testing only: the file --fault_hold_pull_step waits for");
ABSL_FLAG(int64_t, fault_nan_step, -1,
          "Testing only: at this step of every job, put a NaN in this worker's local gradient "
          "before the non-finite check, so the job's --on_nonfinite policy applies (-1 = off)");
ABSL_FLAG(double, fault_nan_value, std::numeric_limits<double>::quiet_NaN(),
          "Testing only: the value --fault_nan_step puts in the gradient (default NaN; a large "
          "finite one such as 3e38 on two workers makes the combined SUM overflow instead)");
ABSL_FLAG(bool, fault_lose_register_reply, false,
          "Testing only: treat the first RegisterWorker reply as lost in transit (the call "
          "fails DEADLINE_EXCEEDED after the coordinator answered), so the worker repeats it");
ABSL_FLAG(std::string, data_dir, "",
          "Relative dataset paths in jobs resolve against this directory (this machine's data)");
ABSL_FLAG(int32_t, rpc_timeout_ms, 5000, "Deadline of each coordinator RPC");
ABSL_FLAG(int64_t, coordinator_restart_grace_ms, 30000,
          "How long a running job waits for a coordinator that refuses connections (it is "
          "restarting with its --state_dir): reports are retried with backoff meanwhile, ms (> 0)");
ABSL_FLAG(int32_t, combine_timeout_ms, 30000,
          "Deadline of one gradient combine (a silent peer fails the job after this)");

namespace {

// A job's GrpcTransport or TcpTransport (both have Shutdown()).
template <typename T>
class JobTransportOf : public lockstep::JobTransport {
 public:
  // With `metrics`, the job's collective sees a decorator that counts the
  // payload bytes under transport="<name>".
  JobTransportOf(std::unique_ptr<T> t, lockstep::WorkerMetrics* metrics, const char* name)
      : t_(std::move(t)),
        counted_(metrics != nullptr ? metrics->CountTransport(t_.get(), name) : nullptr) {}
  lockstep::Transport* transport() override {
    return counted_ != nullptr ? counted_.get() : t_.get();
  }
  void Shutdown() override { t_->Shutdown(); }

 private:
  std::unique_ptr<T> t_;
  std::unique_ptr<lockstep::Transport> counted_;  // wraps t_
};

template <typename T>
absl::StatusOr<std::unique_ptr<lockstep::JobTransport>> Wrap(
    absl::StatusOr<std::unique_ptr<T>> t, lockstep::WorkerMetrics* metrics, const char* name) {
  if (!t.ok()) return t.status();
  return std::unique_ptr<lockstep::JobTransport>(
      new JobTransportOf<T>(*std::move(t), metrics, name));
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::ConfigureFlagsUsage(
      "lockstep worker daemon.\n"
      "  lockstep-worker --coordinator=HOST:PORT [--listen=HOST:PORT] [--data_port=P] "
      "[--port_file=F] [--log_format=text|json]");
  lockstep::ParseFlagsOrExit(argc, argv);
  absl::StatusOr<lockstep::LogOptions> log_options = lockstep::LogOptionsFromFlags();
  if (!log_options.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n",
                 std::string(log_options.status().message()).c_str());
    return 2;
  }
  const lockstep::Logger logger = lockstep::Logger::Stderr(*log_options).WithComponent("worker");
  lockstep::TuneProcessForThroughput();

  if (absl::Status s = lockstep::InstallShutdownSignalHandlers(); !s.ok()) {
    logger.Error(s.message());
    return 1;
  }

  // Mutual TLS with roles (common/grpcutil/tls.h) on the worker's server
  // (peers, replica state) and on every channel it opens (coordinator, peers,
  // ps shards, peers' replica state).
  absl::StatusOr<lockstep::GrpcSecurity> security = lockstep::GrpcSecurity::FromFlags();
  if (!security.ok()) {
    logger.Error(security.status().message());
    return 2;
  }
  const absl::StatusOr<std::string> http_token = lockstep::HttpTokenFromFlag();
  if (!http_token.ok()) {
    logger.Error(http_token.status().message());  // before anything serves
    return 2;
  }
  if (security->explicitly_insecure()) {
    logger.Warn("--insecure: gRPC in plain text; anyone who reaches the port can feed this "
                "worker's all-reduce and read its replica state");
  }
  // --data_plane_tls (common/net/data_tls_flag.h): the raw-TCP ring accepts
  // and dials workers only; ps connections reach a ps server or the
  // coordinator's shard.
  const lockstep::TlsFiles tls_files = lockstep::TlsFilesFromFlags();
  auto ring_tls = lockstep::DataPlaneTlsFromFlag(tls_files.cert, tls_files.key, tls_files.ca,
                                                 {"worker"});
  auto ps_data_tls = lockstep::DataPlaneTlsFromFlag(tls_files.cert, tls_files.key, tls_files.ca,
                                                    {"server"});
  auto coordinator_ps_data_tls = lockstep::DataPlaneTlsFromFlag(
      tls_files.cert, tls_files.key, tls_files.ca, {"coordinator"});
  // --http_tls: the metrics pages over HTTPS with this worker's certificate.
  auto http_tls = lockstep::HttpTlsFromFlag(tls_files.cert, tls_files.key, tls_files.ca);
  for (const auto* t : {&ring_tls, &ps_data_tls, &coordinator_ps_data_tls, &http_tls}) {
    if (!t->ok()) {
      logger.Error(t->status().message());
      return 2;
    }
  }
  // Each channel checks the role of the server it means to reach
  // (common/grpcutil/tls.h): the coordinator, a ps shard (a lockstep-server's
  // or, when the job says so, the coordinator's own), a peer worker.
  const std::shared_ptr<grpc::ChannelCredentials> coordinator_credentials =
      security->ChannelCredentials(lockstep::RoleBit(lockstep::PeerRole::kCoordinator));
  const std::shared_ptr<grpc::ChannelCredentials> peer_credentials =
      security->ChannelCredentials(lockstep::RoleBit(lockstep::PeerRole::kWorker));
  const std::shared_ptr<grpc::ChannelCredentials> ps_credentials =
      security->ChannelCredentials(lockstep::RoleBit(lockstep::PeerRole::kServer));

  const int data_port = absl::GetFlag(FLAGS_data_port);
  if (data_port < 0 || data_port > 65535) {
    logger.Error(absl::StrCat("--data_port: expected 0..65535, got ", data_port));
    return 2;
  }
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (!data_dir.empty() && chdir(data_dir.c_str()) != 0) {
    logger.Error(absl::StrCat("--data_dir: cannot enter ", data_dir));
    return 2;
  }
  lockstep::PeerServiceImpl peers(lockstep::PeerKeepalive(), &logger);
  // Replica states this worker offers its peers (divergence repair, late
  // joiners), served on the same server as the peer service.
  lockstep::StateBoard state_board;
  lockstep::CheckpointDirs checkpoint_dirs;  // what FetchCheckpoint may serve
  lockstep::StateServiceImpl state_service(&state_board, &logger, &checkpoint_dirs);
  // Health: NOT_SERVING until registered with the coordinator and again
  // while draining (the daemon flips it); reflection for grpcurl & co.
  lockstep::HealthService health({lockstep::v1::PeerService::service_full_name()});
  lockstep::EnableServerReflection();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string listen_host = lockstep::HostOfAddress(listen);  // brackets kept
  builder.AddListeningPort(listen, security->ServerCredentials(), &port);
  // No SO_REUSEPORT (gRPC's default is on): a second worker given the same
  // --listen fails to start instead of silently sharing the port (one
  // address, one process: the coordinator's registration rules rely on it).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  peers.RegisterOn(builder);
  builder.RegisterService(&health);
  builder.RegisterService(&state_service);
  // Refused requests are logged naming the peer, bounded (refusal_log.h).
  lockstep::RealClock refusal_clock;
  lockstep::RefusalLog refusals(&logger, &refusal_clock);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(refusals.InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(f));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    logger.Error("cannot listen: the address is in use or not available", {{"listen", listen}});
    return 1;
  }
  // A wildcard listen address is no address for peers: without --advertise
  // the worker registers ":port" and the coordinator fills in the IP address
  // it sees this worker's call come from (common/daemon_util.h).
  absl::StatusOr<std::string> advertised = lockstep::AdvertisedAddress(
      "--advertise", absl::GetFlag(FLAGS_advertise), listen_host, port);
  if (!advertised.ok()) {
    logger.Error(advertised.status().message());
    server->Shutdown();
    return 2;
  }
  const std::string advertise = *advertised;
  // The raw-TCP data plane listens on the same host; peers reach it at the
  // advertised host.
  lockstep::TcpHubOptions hub_options;
  hub_options.tls = *ring_tls;
  // A refused data-plane connection (a stranger, a forged or replayed hello)
  // is logged naming its address and what was wrong, within the same line
  // budget as refused gRPC requests (common/log_budget.h).
  lockstep::RefusedConnectionLog data_refusals(&logger, &refusal_clock,
                                               "data plane connection refused");
  hub_options.on_reject = [&data_refusals](const std::string& why) {
    data_refusals.Refused(why);
  };
  auto hub = lockstep::TcpPeerHub::Start(listen_host, data_port, hub_options);
  if (!hub.ok()) {
    logger.Error(absl::StrCat("--data_port: ", hub.status().message()));
    server->Shutdown();
    return 1;
  }
  const std::string data_address =
      lockstep::JoinHostPort(lockstep::HostOfAddress(advertise), (*hub)->port());
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = lockstep::WritePortFile(absl::GetFlag(FLAGS_port_file), port); !s.ok()) {
      logger.Error(absl::StrCat("--port_file: ", s.message()));
      server->Shutdown();
      return 2;
    }
  }
  // Prometheus metrics over HTTP (common/metrics/metrics_server.h).
  lockstep::MetricsRegistry metrics_registry;
  lockstep::WorkerMetrics worker_metrics(&metrics_registry);
  const lockstep::MetricsServerConfig metrics_config = lockstep::MetricsServerConfigFromFlags(
      argc, argv, listen_host, absl::GetFlag(FLAGS_metrics_host),
      absl::GetFlag(FLAGS_metrics_port), absl::GetFlag(FLAGS_metrics_port_file), *http_token,
      *http_tls);
  std::string metrics_note;
  auto metrics_http =
      lockstep::StartMetricsServer(metrics_config, &metrics_registry, &metrics_note);
  if (!metrics_http.ok()) {
    logger.Error(metrics_http.status().message());
    server->Shutdown();
    return metrics_http.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!metrics_note.empty()) logger.Info(metrics_note);
  std::string hostname = absl::GetFlag(FLAGS_hostname);
  if (hostname.empty()) {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    hostname = buf;
  }
  logger.Info("listening",
              {{"address", lockstep::JoinHostPort(listen_host, port)},
               {"port", port},
               {"advertise", advertise},
               {"data_address", data_address},
               {"coordinator", absl::GetFlag(FLAGS_coordinator)},
               {"grpc_security", security->Describe()}});

  lockstep::WorkerDaemonOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.advertise_address = advertise;
  options.data_address = data_address;
  options.hostname = hostname;
  options.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  options.max_job_memory_bytes = absl::GetFlag(FLAGS_max_job_memory_bytes) < 0
                                     ? lockstep::DefaultMaxJobMemoryBytes()
                                     : absl::GetFlag(FLAGS_max_job_memory_bytes);
  options.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
  options.coordinator_restart_grace =
      absl::Milliseconds(std::max<int64_t>(1, absl::GetFlag(FLAGS_coordinator_restart_grace_ms)));
  options.combine_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_combine_timeout_ms));
  options.perturb_at_step = absl::GetFlag(FLAGS_fault_perturb_step);
  options.flip_at_step = absl::GetFlag(FLAGS_fault_flip_step);
  options.flip_index = absl::GetFlag(FLAGS_fault_flip_index);
  {
    const std::string target = absl::GetFlag(FLAGS_fault_flip_target);
    if (target != "weights" && target != "optimizer") {
      logger.Error(absl::StrCat("--fault_flip_target: expected weights or optimizer, got \"",
                                target, "\""));
      return 2;
    }
    options.flip_optimizer = target == "optimizer";
  }
  options.nan_at_step = absl::GetFlag(FLAGS_fault_nan_step);
  options.nan_value = static_cast<float>(absl::GetFlag(FLAGS_fault_nan_value));
  options.lose_first_register_reply = absl::GetFlag(FLAGS_fault_lose_register_reply);
  options.channel_credentials = peer_credentials;
  options.ps_channel_credentials = ps_credentials;
  options.coordinator_ps_channel_credentials = coordinator_credentials;
  options.ps_data_tls = *ps_data_tls;
  options.coordinator_ps_data_tls = *coordinator_ps_data_tls;
  options.state_board = &state_board;
  options.checkpoint_dirs = &checkpoint_dirs;
  options.logger = &logger;
  options.serving_changed = [&health](bool serving) { health.SetAllServing(serving); };
  options.step_observer = &worker_metrics;
  options.wrap_ps_client = [&worker_metrics, hold_step = absl::GetFlag(FLAGS_fault_hold_pull_step),
                            hold_file = absl::GetFlag(FLAGS_fault_hold_pull_file)](
                               lockstep::PsClient* inner) -> std::unique_ptr<lockstep::PsClient> {
    std::unique_ptr<lockstep::PsClient> counted = worker_metrics.CountPs(inner);
    if (hold_step < 0) return counted;
    return std::make_unique<lockstep::HoldPullPsClient>(std::move(counted), hold_step, hold_file);
  };
  // A restarted coordinator is found within a second: gRPC's reconnect
  // backoff would otherwise grow to minutes while it is down.
  grpc::ChannelArguments coordinator_args;
  coordinator_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  coordinator_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  coordinator_args.SetMaxReceiveMessageSize(lockstep::kControlMaxMessageBytes);
  coordinator_args.SetMaxSendMessageSize(lockstep::kControlMaxMessageBytes);
  auto channel = lockstep::CreateChannelCountingErrors(
      options.coordinator, coordinator_credentials,
      [&worker_metrics](absl::string_view method, absl::string_view code) {
        worker_metrics.RpcError(method, code);
      },
      coordinator_args);
  lockstep::WorkerDaemon daemon(
      options, channel,
      [&peers, &worker_metrics, tcp_hub = hub->get(), peer_credentials](
          lockstep::v1::PeerTransport kind, uint64_t job, int rank,
          const std::vector<std::string>& addresses, const std::string& secret,
          std::shared_ptr<lockstep::ProgressMark> progress)
          -> absl::StatusOr<std::unique_ptr<lockstep::JobTransport>> {
        // Every transport touches the job's progress mark as bytes move: a
        // wait counts from the last byte (common/collective/peer_wait.h).
        if (kind == lockstep::v1::SHM) {
          lockstep::ShmTransportOptions shm_options;
          shm_options.secret = secret;  // names the job's /dev/shm segments
          shm_options.progress = progress.get();
          return Wrap(lockstep::ShmTransport::Create(job, rank, addresses, shm_options),
                      &worker_metrics, "shm");
        }
        if (kind == lockstep::v1::TCP) {
          lockstep::TcpTransportOptions tcp_options;
          tcp_options.secret = secret;  // Assignment.data_plane_secret
          tcp_options.progress = progress.get();
          return Wrap(lockstep::TcpTransport::Create(tcp_hub, job, rank, addresses, tcp_options),
                      &worker_metrics, "tcp");
        }
        lockstep::GrpcTransportOptions grpc_options;
        grpc_options.credentials = peer_credentials;
        grpc_options.progress = std::move(progress);
        return Wrap(lockstep::GrpcTransport::Create(&peers, job, rank, addresses, grpc_options),
                    &worker_metrics, "grpc");
      });

  std::thread signal_thread([&] {
    const int sig = lockstep::WaitForShutdownSignal();
    logger.Info("shutting down", {{"signal", lockstep::ShutdownSignalName(sig)}});
    // Graceful: NOT_SERVING, the running job reported failed naming this
    // worker, stopped at its step boundary, then deregistered; exit 0.
    daemon.Drain(lockstep::ShutdownSignalName(sig));
  });
  absl::Status s = daemon.Run();
  health.Shutdown();  // ends health Watch streams before the server waits for calls
  peers.Shutdown();   // and the peers' long-lived streams (the job has ended)
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Run() returns after a signal: Drain() (on the signal thread) makes it
  // leave its loop and then calls Shutdown(); the join below waits for both.
  signal_thread.join();
  if (!s.ok()) {
    logger.Error(s.message());
    return 1;
  }
  return 0;
}
