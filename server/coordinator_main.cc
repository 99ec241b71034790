// lockstep-coordinator: serves lockstep.v1.Coordinator. Flags and wiring
// only; the logic lives in server/coordinator.h.
//
// Exit codes: 0 after SIGTERM/SIGINT (graceful shutdown: health goes
// NOT_SERVING, new jobs and registrations are refused UNAVAILABLE, every
// PENDING/RUNNING job FAILS "coordinator shut down (SIGTERM)", workers are
// told to stop in their next heartbeat reply and given --drain_timeout_ms to
// go idle, Watch streams end, in-flight calls get up to 2 s), 1 when the
// listen address cannot be bound,
// 2 for bad flags or arguments. --help prints the flags and exits 0
// (common/flags_usage.h).
//
// Log lines (common/log.h; --log_format=text|json, --log_level): component
// "coordinator", the events of server/coordinator.h plus start-up and
// shutdown. Only errors in the flags that pick the log format, unknown flags
// and positional arguments are plain "lockstep-coordinator: ..." lines.
//
// gRPC keepalive (server side; a client helper must match): the server
// pings an idle connection every 60 s and drops it after 20 s without an
// answer (detects dead watchers), and it accepts client keepalive pings as
// often as every 10 s, with or without calls in flight. Clients that enable
// keepalive must use keepalive_time_ms >= 10000. SO_REUSEPORT is off, so
// two coordinators cannot silently share a port.
#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/daemon_util.h"
#include "common/flags_usage.h"
#include "common/grpcutil/health_service.h"
#include "common/grpcutil/server_reflection.h"
#include "common/grpcutil/tls.h"
#include "common/http/http_server.h"
#include "common/log.h"
#include "common/log_budget.h"
#include "common/log_flags.h"
#include "common/shutdown_signal.h"
#include "server/coordinator.h"
#include "server/grpc_ps_control.h"
#include "server/coordinator_service.h"
#include "common/grpcutil/message_limits.h"
#include "common/grpcutil/refusal_log.h"
#include "common/grpcutil/rpc_errors.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_server.h"
#include "server/coordinator_metrics.h"
#include "server/ps/ps_metrics.h"
#include "server/status_page.h"
#include "server/ps/ps_service.h"
#include "common/process_tuning.h"
#include "common/psnet/ps_tcp_server.h"
#include "common/net/data_tls_flag.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to listen on; port 0 lets the OS choose");
ABSL_FLAG(std::string, advertise, "",
          "HOST (the bound port is added) or HOST:PORT at which workers reach this "
          "coordinator's parameter-server shard (used when --ps_addresses is empty). "
          "Default: the --listen host; for a wildcard --listen host (0.0.0.0, [::]) the host "
          "each worker dials the coordinator at");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound port is written to this file (atomically) once listening");
ABSL_FLAG(int64_t, heartbeat_ms, 200, "heartbeat interval told to workers, ms (> 0)");
ABSL_FLAG(int64_t, lost_after_ms, 3000,
          "a worker without a heartbeat for longer than this is LOST and its job fails, "
          "ms (> 0)");
ABSL_FLAG(std::vector<std::string>, ps_addresses, {},
          "comma-separated parameter-server addresses, shard s at index s (default: "
          "the advertised address)");
ABSL_FLAG(int32_t, ps_data_port, 0,
          "port of the raw-TCP data plane of the coordinator's parameter-server shard (jobs "
          "with --ps_transport=tcp), on the --listen host: 0 = chosen by the OS (workers learn "
          "it over gRPC), -1 = off");
ABSL_FLAG(int32_t, max_weights_jobs, 8, "keep the final weights of this many jobs (>= 0)");
ABSL_FLAG(int64_t, max_finished_jobs_in_memory, 1000,
          "finished jobs kept in memory (>= 1); older ones are evicted: with --state_dir "
          "status and sync still read them from the database, without it they are forgotten");
ABSL_FLAG(int64_t, max_listed_evicted_jobs, 1000,
          "ListJobs (lockstep jobs): evicted jobs listed from the --state_dir database per page "
          "(>= 1; older ones are later pages: lockstep jobs --all)");
ABSL_FLAG(std::string, metrics_host, "",
          "host of the HTTP server for Prometheus (GET /metrics, /healthz) and the status page "
          "(GET /, /api/...); default: the --listen host");
ABSL_FLAG(int32_t, metrics_port, 9170,
          "port of the metrics HTTP server: -1 = off, 0 = chosen by the OS. When the default "
          "9170 is taken an OS-chosen port is used and logged; an explicitly given port that "
          "is taken is an error");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, the metrics server's bound port is written to this file once listening");
ABSL_FLAG(std::string, state_dir, "",
          "directory of the coordinator's SQLite state (DIR/coordinator.db: workers, jobs, sync "
          "history, id counters); a coordinator restarted with the same directory (and port) "
          "keeps every job and its running jobs continue. \"\" = in memory only");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token that SubmitJob and CancelJob need (authorization: "
          "Bearer <token>); required with --tls_* (deploy/certs.sh writes one)");
ABSL_FLAG(int64_t, max_job_memory_bytes, 0,
          "SubmitJob refuses, with RESOURCE_EXHAUSTED naming need and limit, a job whose memory "
          "need per worker (parameters, gradient, optimizer state, combine buffer, activations; "
          "counted with the smallest data shape) exceeds this, bytes; 0 = no limit of the "
          "coordinator's own (the default: this host's memory says nothing about the workers'). "
          "Jobs that fewer than K live workers can hold by their own --max_job_memory_bytes are "
          "refused either way");
ABSL_FLAG(int64_t, drain_timeout_ms, 3000,
          "on SIGTERM/SIGINT, wait at most this long for the workers of the failed jobs to "
          "stop before exiting, ms (>= 0)");
ABSL_FLAG(int64_t, fault_hold_state_from_step, -1,
          "test only: once any job's check of a step >= this is queued, the --state_dir "
          "database commits nothing more until exit (a SIGKILL then loses that job's last "
          "checks and its end); -1 = off");

namespace lockstep {
namespace {

constexpr char kProg[] = "lockstep-coordinator";
constexpr int kExitBadFlags = 2;
constexpr int kExitBindFailed = 1;

bool IsHelpFlag(absl::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort" ||
         name == "helppackage" || name == "version" || name == "only_check_args" ||
         name == "helpon" || name == "helpmatch";
}

// Checks every --flag before absl::ParseCommandLine (which exits 1 on an
// error) so bad flags exit 2. Sets nothing the real parse does not set again.
bool PrevalidateFlags(int argc, char** argv, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.empty() || arg[0] != '-') continue;  // positional: checked later
    arg.remove_prefix(arg.size() > 1 && arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const absl::string_view name = has_value ? arg.substr(0, eq) : arg;
    absl::string_view value = has_value ? arg.substr(eq + 1) : absl::string_view();
    if (IsHelpFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && name.size() > 2 && name.substr(0, 2) == "no") {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) {
      *error = absl::StrCat("unknown flag --", name, " (see --help)");
      return false;
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) {
        *error = absl::StrCat("flag --", name, " is missing its value");
        return false;
      }
      value = argv[++i];
    }
    std::string why;
    if (!flag->ParseFrom(value, &why)) {
      *error = absl::StrCat("invalid value \"", value, "\" for --", name, ": ", why);
      return false;
    }
  }
  return true;
}

// Splits "host:port" / "[v6]:port" into host (brackets kept) and port.
bool SplitHostPort(const std::string& addr, std::string* host, int* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size()) return false;
  *host = addr.substr(0, colon);
  return absl::SimpleAtoi(absl::string_view(addr).substr(colon + 1), port) && *port >= 0 &&
         *port <= 65535;
}

int Run(int argc, char** argv) {
  ConfigureFlagsUsage(
      "serves lockstep.v1.Coordinator (worker registry, jobs, "
      "replica hash checks).\nUsage: lockstep-coordinator [--listen=HOST:PORT] "
      "[--advertise=HOST:PORT] [--port_file=PATH] [--heartbeat_ms=N] "
      "[--lost_after_ms=N] [--ps_addresses=A,B,...] [--log_format=text|json]");
  std::string error;
  if (!PrevalidateFlags(argc, argv, &error)) {
    std::fprintf(stderr, "%s: %s\n", kProg, error.c_str());
    return kExitBadFlags;
  }
  std::vector<char*> rest = ParseFlagsOrExit(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument \"%s\" (all options are --flags)\n", kProg,
                 rest[1]);
    return kExitBadFlags;
  }
  absl::StatusOr<LogOptions> log_options = LogOptionsFromFlags();
  if (!log_options.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(log_options.status().message()).c_str());
    return kExitBadFlags;
  }
  const Logger logger = Logger::Stderr(*log_options).WithComponent("coordinator");
  // glibc malloc keeps freed memory; no Abseil deadlock detection. The
  // hosted ps shard receives and sends a model-sized message per worker and
  // step: with fresh pages for each (10-20 us per 4 KiB page here), a K=2
  // ps step of the main job took 13-25 ms instead of about 4 (issue 9).
  TuneProcessForThroughput();
  const std::string listen = absl::GetFlag(FLAGS_listen);
  std::string listen_host;
  int listen_port = 0;
  if (!SplitHostPort(listen, &listen_host, &listen_port)) {
    logger.Error(absl::StrCat("--listen: expected HOST:PORT with PORT in [0, 65535], got \"",
                              listen, "\""));
    return kExitBadFlags;
  }
  const int64_t heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  const int64_t lost_after_ms = absl::GetFlag(FLAGS_lost_after_ms);
  if (heartbeat_ms <= 0 || lost_after_ms <= 0) {
    logger.Error(absl::StrCat("--heartbeat_ms and --lost_after_ms: expected > 0, got ",
                              heartbeat_ms, " and ", lost_after_ms));
    return kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_max_weights_jobs) < 0) {
    logger.Error(absl::StrCat("--max_weights_jobs: expected >= 0, got ",
                              absl::GetFlag(FLAGS_max_weights_jobs)));
    return kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_ps_data_port) < -1 || absl::GetFlag(FLAGS_ps_data_port) > 65535) {
    logger.Error(absl::StrCat("--ps_data_port: expected -1 (off), 0 (OS-chosen) or a port, got ",
                              absl::GetFlag(FLAGS_ps_data_port)));
    return kExitBadFlags;
  }
  for (const std::string& ps : absl::GetFlag(FLAGS_ps_addresses)) {
    std::string h;
    int p = 0;
    if (!SplitHostPort(ps, &h, &p) || p == 0) {
      logger.Error(absl::StrCat("--ps_addresses: expected HOST:PORT entries, got \"", ps, "\""));
      return kExitBadFlags;
    }
  }

  // Transport security (common/grpcutil/tls.h): mutual TLS with roles, and
  // the bearer token of SubmitJob/CancelJob.
  absl::StatusOr<GrpcSecurity> security = GrpcSecurity::FromFlags();
  if (!security.ok()) {
    logger.Error(security.status().message());
    return kExitBadFlags;
  }
  const absl::StatusOr<std::string> http_token = HttpTokenFromFlag();
  if (!http_token.ok()) {
    logger.Error(http_token.status().message());  // before anything serves
    return kExitBadFlags;
  }
  // --data_plane_tls: the ps shard's raw-TCP plane takes workers only.
  const TlsFiles data_tls_files = TlsFilesFromFlags();
  auto data_tls = DataPlaneTlsFromFlag(data_tls_files.cert, data_tls_files.key,
                                       data_tls_files.ca, {"worker"});
  if (!data_tls.ok()) {
    logger.Error(data_tls.status().message());
    return kExitBadFlags;
  }
  // --http_tls: the metrics pages and the status page over HTTPS with the
  // coordinator's certificate.
  const auto http_tls = HttpTlsFromFlag(data_tls_files.cert, data_tls_files.key, data_tls_files.ca);
  if (!http_tls.ok()) {
    logger.Error(http_tls.status().message());
    return kExitBadFlags;
  }
  std::string token;
  if (const std::string token_file = absl::GetFlag(FLAGS_token_file); !token_file.empty()) {
    if (!security->tls()) {
      logger.Error("--token_file: needs mutual TLS (--tls_cert, --tls_key, --tls_ca); a token "
                   "sent in plain text protects nothing");
      return kExitBadFlags;
    }
    absl::StatusOr<std::string> read = ReadTokenFile("--token_file", token_file);
    if (!read.ok()) {
      logger.Error(read.status().message());
      return kExitBadFlags;
    }
    token = *std::move(read);
  } else if (security->tls()) {
    logger.Error("--token_file: missing; with --tls_* job submission and cancellation need a "
                 "bearer token file (deploy/certs.sh writes DIR/token)");
    return kExitBadFlags;
  }
  if (security->explicitly_insecure()) {
    logger.Warn("--insecure: gRPC in plain text; anyone who reaches the port can submit and "
                "cancel jobs, register workers and read weights");
  }

  // Shutdown signals go through a self-pipe (common/shutdown_signal.h).
  if (absl::Status s = InstallShutdownSignalHandlers(); !s.ok()) {
    logger.Error(s.message());
    return kExitBindFailed;
  }

  if (absl::GetFlag(FLAGS_max_finished_jobs_in_memory) < 1) {
    logger.Error(absl::StrCat("--max_finished_jobs_in_memory: expected >= 1, got ",
                              absl::GetFlag(FLAGS_max_finished_jobs_in_memory)));
    return kExitBadFlags;
  }

  RealClock clock;
  CoordinatorOptions options;
  options.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  options.lost_after = absl::Milliseconds(lost_after_ms);
  options.ps_addresses = absl::GetFlag(FLAGS_ps_addresses);
  options.max_jobs_with_weights = absl::GetFlag(FLAGS_max_weights_jobs);
  options.max_finished_jobs_in_memory = absl::GetFlag(FLAGS_max_finished_jobs_in_memory);
  if (absl::GetFlag(FLAGS_max_listed_evicted_jobs) < 1) {
    logger.Error(absl::StrCat("--max_listed_evicted_jobs: expected >= 1, got ",
                              absl::GetFlag(FLAGS_max_listed_evicted_jobs)));
    return 2;
  }
  options.max_listed_evicted_jobs = absl::GetFlag(FLAGS_max_listed_evicted_jobs);
  if (absl::GetFlag(FLAGS_max_job_memory_bytes) < 0) {
    logger.Error(absl::StrCat("--max_job_memory_bytes: expected >= 0 bytes (0 = no limit), got ",
                              absl::GetFlag(FLAGS_max_job_memory_bytes)));
    return 2;
  }
  options.max_job_memory_bytes = absl::GetFlag(FLAGS_max_job_memory_bytes);
  options.fault_hold_state_from_step = absl::GetFlag(FLAGS_fault_hold_state_from_step);
  options.logger = &logger;
  std::unique_ptr<StateDb> state_db;  // outlives the coordinator
  if (const std::string dir = absl::GetFlag(FLAGS_state_dir); !dir.empty()) {
    StateDbOptions db_options;
    db_options.dir = dir;
    absl::StatusOr<std::unique_ptr<StateDb>> db = StateDb::Open(db_options);
    if (!db.ok()) {
      logger.Error(db.status().message());
      return kExitBadFlags;
    }
    state_db = *std::move(db);
  }
  // The coordinator's own ps shards (declared first: they outlive it); it
  // forgets the groups of its jobs nobody uses any more, and they hold only
  // the keys of its running jobs, with their K and S (asked once per key;
  // `shard_owner` is set before any server starts).
  const Coordinator* shard_owner = nullptr;
  PsRegistryLimits ps_limits;
  ps_limits.key_shape = [&shard_owner](uint64_t key, absl::Time) -> absl::StatusOr<PsKeyShape> {
    if (shard_owner == nullptr) return absl::UnavailableError("the coordinator is starting");
    return shard_owner->PsKeyShapeOf(key);
  };
  PsShardRegistry ps_registry(ps_limits);
  options.forget_ps_group = [&ps_registry](uint64_t group) { ps_registry.Forget(group); };
  // --ps_addresses shards get each ps job's data-plane secrets and the keys
  // nobody uses any more from the coordinator (server/ps_control.h), over
  // the coordinator's certificate to a ps-server one.
  // Also without --ps_addresses: a job restored from the state database
  // keeps the shards it started on.
  GrpcPsControl ps_control(
      [creds = security->ChannelCredentials(RoleBit(PeerRole::kServer))](
          const std::string& address) { return CreateLimitedChannel(address, 1 << 20, creds); },
      &logger);
  options.ps_control = &ps_control;
  Coordinator coordinator(options, &clock);
  shard_owner = &coordinator;
  if (state_db != nullptr) {
    if (absl::Status s = coordinator.AttachStateDb(state_db.get()); !s.ok()) {
      logger.Error(s.message());
      return kExitBadFlags;
    }
  }
  CoordinatorService service(&coordinator);
  // The coordinator also hosts a parameter-server shard: ps-mode jobs use it
  // when no --ps_addresses are given. One registry behind its gRPC service
  // and its raw-TCP data plane (started below, once listening).
  PsService ps_service(&ps_registry);

  // Health: NOT_SERVING until listening with the address known, and again
  // from the shutdown signal on. Reflection for grpcurl & co.
  HealthService health({v1::Coordinator::service_full_name(),
                        v1::ParameterServer::service_full_name()});
  EnableServerReflection();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, security->ServerCredentials(token), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  // It hosts a ps shard: one shard per Push request / Pull reply
  // (common/grpcutil/message_limits.h).
  SetServerMessageLimits(&builder, PsMaxMessageBytes(ps_registry.max_shard_floats()));
  builder.RegisterService(&service);
  builder.RegisterService(&ps_service);
  builder.RegisterService(&health);
  // Metrics (server/coordinator_metrics.h, server/ps/ps_metrics.h) and
  // failed RPCs by method and code, counted by a server interceptor.
  MetricsRegistry metrics_registry;
  RegisterCoordinatorMetrics(&coordinator, &metrics_registry);
  RegisterPsMetrics(&ps_service, &metrics_registry);
  Family<Counter>* rpc_errors = metrics_registry.AddCounterFamily(
      "lockstep_rpc_errors_total", "Failed RPCs served, by method and status code.",
      {"method", "code"});
  auto interceptors =
      RpcErrorServerInterceptors([rpc_errors](absl::string_view method, absl::string_view code) {
        rpc_errors->WithLabels({std::string(method), std::string(code)})->Increment();
      });
  // Refused requests are logged naming the peer, bounded (refusal_log.h).
  RefusalLog refusals(&logger, &clock);
  interceptors.push_back(refusals.InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    logger.Error("cannot listen: the address is in use or not available", {{"listen", listen}});
    if (server != nullptr) server->Shutdown();
    return kExitBindFailed;
  }

  RefusedConnectionLog data_refusals(&logger, &clock, "ps data plane connection refused");
  std::unique_ptr<PsTcpServer> ps_data_plane;
  if (absl::GetFlag(FLAGS_ps_data_port) >= 0) {
    PsTcpServerOptions ps_tcp_options;
    ps_tcp_options.tls = *data_tls;
    // A refused data-plane connection is logged naming its address and why,
    // within a line budget (common/log_budget.h).
    ps_tcp_options.on_reject = [&data_refusals](const std::string& why) {
      data_refusals.Refused(why);
    };
    auto started = PsTcpServer::Start(&ps_registry, listen_host,
                                      absl::GetFlag(FLAGS_ps_data_port), ps_tcp_options);
    if (!started.ok()) {
      logger.Error(absl::StrCat("--ps_data_port: ", started.status().message()));
      server->Shutdown();
      return kExitBindFailed;
    }
    ps_data_plane = *std::move(started);
    // The coordinator's own shard checks a worker's secret against the one
    // it derives for the job key, so a worker certificate cannot claim
    // another job's key here. No Control: it needs none.
    PsService::SecretHooks hooks;
    hooks.register_secret = [&coordinator, plane = ps_data_plane.get()](
                                uint64_t job, const std::string& secret, absl::Time deadline) {
      if (!coordinator.IsDataPlaneSecret(job, secret)) {
        return absl::PermissionDeniedError(absl::StrCat(
            "ps data plane: job ", job,
            ": not the data-plane secret this coordinator gave the job"));
      }
      return plane->RegisterSecret(job, secret, deadline);
    };
    ps_service.SetSecretHooks(std::move(hooks));
    ps_service.SetDataAddress(ps_data_plane->port());
  }

  // A wildcard listen host gives ":port": workers then dial the coordinator's
  // ps shard at the host they reach the coordinator at.
  absl::StatusOr<std::string> advertised =
      AdvertisedAddress("--advertise", absl::GetFlag(FLAGS_advertise), listen_host, port);
  if (!advertised.ok()) {
    logger.Error(advertised.status().message());
    server->Shutdown();
    return kExitBadFlags;
  }
  const std::string advertise = *advertised;
  coordinator.SetAdvertiseAddress(advertise);

  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, port); !s.ok()) {
      logger.Error(absl::StrCat("--port_file: ", s.message()));
      server->Shutdown();
      return kExitBadFlags;
    }
  }
  StatusPage status_page(&coordinator);
  // The metrics server (on by default) also serves the status page.
  const MetricsServerConfig metrics_config = MetricsServerConfigFromFlags(
      argc, argv, listen_host, absl::GetFlag(FLAGS_metrics_host),
      absl::GetFlag(FLAGS_metrics_port), absl::GetFlag(FLAGS_metrics_port_file), *http_token,
      *http_tls);
  std::string metrics_note;
  absl::StatusOr<std::unique_ptr<HttpServer>> metrics_http =
      StartMetricsServer(metrics_config, &metrics_registry, &metrics_note);
  if (!metrics_http.ok()) {
    logger.Error(metrics_http.status().message());
    server->Shutdown();
    return metrics_http.status().code() == absl::StatusCode::kInvalidArgument ? kExitBadFlags
                                                                             : kExitBindFailed;
  }
  logger.Info(metrics_note);
  if (*metrics_http != nullptr) {
    for (const std::string& path : StatusPage::Paths()) {
      (*metrics_http)->Handle(
          path, [&status_page](const HttpRequest& r) { return status_page.Handle(r); });
    }
    logger.Info("status page",
                {{"url", absl::StrCat(metrics_config.tls != nullptr ? "https://" : "http://",
                                      JoinHostPort(metrics_config.host, (*metrics_http)->port()),
                                      "/")}});
  }
  // advertise ":port" (wildcard --listen, no --advertise): each worker
  // dials the ps shard at the host it reaches the coordinator at.
  logger.Info("listening", {{"address", JoinHostPort(listen_host, port)},
                            {"port", port},
                            {"advertise", advertise[0] == ':'
                                              ? absl::StrCat("<the host each worker dials>",
                                                             advertise)
                                              : advertise},
                            {"grpc_security", security->Describe()}});

  health.SetAllServing(true);
  absl::Notification stop_ticking;
  std::thread ticker([&coordinator, &stop_ticking] {
    while (!stop_ticking.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      coordinator.Tick();
    }
  });

  const int sig = WaitForShutdownSignal();
  logger.Info("shutting down", {{"signal", ShutdownSignalName(sig)}});
  health.SetAllNotServing();
  const std::string drain_reason =
      absl::StrCat("coordinator shut down (", ShutdownSignalName(sig), ")");
  // Each job it fails is logged by the coordinator ("job failed").
  const std::vector<uint64_t> failed = coordinator.BeginDrain(drain_reason);
  const int64_t drain_ms = std::max<int64_t>(0, absl::GetFlag(FLAGS_drain_timeout_ms));
  const absl::Time drain_start = absl::Now();
  if (!coordinator.WaitForWorkersIdle(drain_start + absl::Milliseconds(drain_ms))) {
    logger.Warn("drain: some workers were still busy at --drain_timeout_ms",
                {{"failed_jobs", static_cast<int64_t>(failed.size())},
                 {"drain_timeout_ms", drain_ms}});
  } else {
    logger.Info("drain: every worker idle",
                {{"failed_jobs", static_cast<int64_t>(failed.size())},
                 {"seconds", absl::ToDoubleSeconds(absl::Now() - drain_start)}});
  }
  health.Shutdown();
  if (*metrics_http != nullptr) (*metrics_http)->Shutdown();
  service.BeginShutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (ps_data_plane != nullptr) ps_data_plane->Shutdown();
  stop_ticking.Notify();
  ticker.join();
  server->Wait();
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Run(argc, argv); }
