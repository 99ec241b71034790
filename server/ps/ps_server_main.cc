// lockstep-server --role=ps: a parameter-server shard process. Flags and
// wiring only; the logic is PsService / PsShard. SIGINT/SIGTERM: exit 0.
#include <cstdio>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_util.h"
#include "common/flags_usage.h"
#include "common/grpcutil/refusal_log.h"
#include "common/grpcutil/health_service.h"
#include "common/grpcutil/server_reflection.h"
#include "common/grpcutil/tls.h"
#include "common/log.h"
#include "common/log_budget.h"
#include "common/log_flags.h"
#include "common/process_tuning.h"
#include "common/shutdown_signal.h"
#include "common/psnet/ps_tcp_server.h"
#include "common/net/data_tls_flag.h"
#include "server/ps/ps_service.h"
#include "common/grpcutil/message_limits.h"
#include "common/grpcutil/rpc_errors.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_server.h"
#include "server/ps/ps_metrics.h"

ABSL_FLAG(std::string, role, "ps", "Server role; only \"ps\" (parameter-server shard) exists");
ABSL_FLAG(std::string, listen, "127.0.0.1:7080", "Address to serve on (port 0 = OS-chosen)");
ABSL_FLAG(std::string, port_file, "", "Write the bound port here once listening");
ABSL_FLAG(int32_t, max_jobs, 64,
          "Job keys whose shards are held at once (a held job's shape round's key "
          "rides on it); beyond it the key idle longest (10 min or more) is dropped, "
          "else a new job is refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(bool, keys_from_coordinator, true,
          "Create a job key's shards only once the coordinator named the key (its Control "
          "message, sent when a ps job starts or regroups on its --ps_addresses), with the "
          "job's K and shard count; a request for any other key waits up to 10 s, then is "
          "NOT_FOUND. false: a key's first request fixes its K (a shard without a "
          "coordinator, or one older than 2026-12-05)");
ABSL_FLAG(int32_t, data_port, 0,
          "Port of the raw-TCP ps data plane (jobs with --ps_transport=tcp), on the --listen "
          "host: 0 = chosen by the OS (workers learn it over gRPC), -1 = off");
ABSL_FLAG(std::string, metrics_host, "",
          "Host of the HTTP server for Prometheus (GET /metrics, /healthz); default: the "
          "--listen host");
ABSL_FLAG(int32_t, metrics_port, 9172,
          "Port of the metrics HTTP server: -1 = off, 0 = chosen by the OS. When the default "
          "9172 is taken (a second shard on this host) an OS-chosen port is used and logged; "
          "an explicitly given port that is taken is an error");
ABSL_FLAG(std::string, metrics_port_file, "", "Write the metrics server's bound port here");

int main(int argc, char** argv) {
  lockstep::ConfigureFlagsUsage(
      "lockstep parameter-server shard.\n"
      "  lockstep-server --role=ps --listen=HOST:PORT [--data_port=P] [--port_file=F] "
      "[--log_format=text|json]");
  lockstep::ParseFlagsOrExit(argc, argv);
  // Log lines from here on (common/log.h); only a bad logging flag itself
  // is reported as a plain line.
  absl::StatusOr<lockstep::LogOptions> log_options = lockstep::LogOptionsFromFlags();
  if (!log_options.ok()) {
    std::fprintf(stderr, "lockstep-server: %s\n",
                 std::string(log_options.status().message()).c_str());
    return 2;
  }
  const lockstep::Logger log = lockstep::Logger::Stderr(*log_options).WithComponent("ps");
  lockstep::TuneProcessForThroughput();
  if (absl::GetFlag(FLAGS_role) != "ps") {
    log.Error(absl::StrCat("--role: expected ps, got \"", absl::GetFlag(FLAGS_role), "\""));
    return 2;
  }
  if (absl::GetFlag(FLAGS_max_jobs) < 1) {
    log.Error(absl::StrCat("--max_jobs: expected >= 1, got ", absl::GetFlag(FLAGS_max_jobs)));
    return 2;
  }
  // Mutual TLS with roles (common/grpcutil/tls.h): only worker certificates
  // may Push/Pull.
  absl::StatusOr<lockstep::GrpcSecurity> security = lockstep::GrpcSecurity::FromFlags();
  if (!security.ok()) {
    log.Error(security.status().message());
    return 2;
  }
  const absl::StatusOr<std::string> http_token = lockstep::HttpTokenFromFlag();
  if (!http_token.ok()) {
    log.Error(http_token.status().message());  // before anything serves
    return 2;
  }
  // --data_plane_tls: the raw-TCP plane takes workers only.
  const lockstep::TlsFiles data_tls_files = lockstep::TlsFilesFromFlags();
  auto data_tls = lockstep::DataPlaneTlsFromFlag(data_tls_files.cert, data_tls_files.key,
                                                 data_tls_files.ca, {"worker"});
  if (!data_tls.ok()) {
    log.Error(data_tls.status().message());
    return 2;
  }
  // --http_tls: the metrics pages over HTTPS with this server's certificate.
  const auto http_tls = lockstep::HttpTlsFromFlag(data_tls_files.cert, data_tls_files.key,
                                                     data_tls_files.ca);
  if (!http_tls.ok()) {
    log.Error(http_tls.status().message());
    return 2;
  }
  if (security->explicitly_insecure()) {
    log.Warn("--insecure: gRPC in plain text; anyone who reaches the port can push gradients");
  }
  if (absl::Status s = lockstep::InstallShutdownSignalHandlers(); !s.ok()) {
    log.Error(s.message());
    return 1;
  }

  if (absl::GetFlag(FLAGS_data_port) < -1 || absl::GetFlag(FLAGS_data_port) > 65535) {
    log.Error(absl::StrCat("--data_port: expected -1 (off), 0 (OS-chosen) or a port, got ",
                           absl::GetFlag(FLAGS_data_port)));
    return 2;
  }

  // One registry of shards behind both front ends: gRPC Push/Pull and the
  // raw-TCP data plane (common/psnet/ps_tcp_server.h).
  // The job keys (and shapes) the coordinator started here, from its
  // Control messages: the registry creates no other key.
  lockstep::PsKeyTable key_table;
  lockstep::PsRegistryLimits limits;
  limits.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  if (absl::GetFlag(FLAGS_keys_from_coordinator)) {
    limits.key_shape = [&key_table](uint64_t job, absl::Time deadline) {
      return key_table.Wait(job, deadline);
    };
  }
  lockstep::PsShardRegistry registry(limits);
  lockstep::PsService service(&registry);
  service.SetKeyTable(&key_table);
  // Health: SERVING once listening, NOT_SERVING from the shutdown signal on.
  lockstep::HealthService health({lockstep::v1::ParameterServer::service_full_name()});
  lockstep::EnableServerReflection();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string listen_host = lockstep::HostOfAddress(listen);  // brackets kept
  builder.AddListeningPort(listen, security->ServerCredentials(), &port);
  // No SO_REUSEPORT (gRPC's default is on): a second server given the same
  // --listen fails to start instead of silently sharing the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  // One shard per Push request / Pull reply (common/grpcutil/message_limits.h).
  lockstep::SetServerMessageLimits(&builder,
                                   lockstep::PsMaxMessageBytes(registry.max_shard_floats()));
  // Metrics (common/metrics/metrics_server.h): the shard's counters and
  // failed RPCs by method and code.
  lockstep::MetricsRegistry metrics_registry;
  lockstep::RegisterPsMetrics(&service, &metrics_registry);
  lockstep::Family<lockstep::Counter>* rpc_errors = metrics_registry.AddCounterFamily(
      "lockstep_ps_rpc_errors_total", "Failed RPCs served, by method and status code.",
      {"method", "code"});
  auto interceptors = lockstep::RpcErrorServerInterceptors(
      [rpc_errors](absl::string_view method, absl::string_view code) {
        rpc_errors->WithLabels({std::string(method), std::string(code)})->Increment();
      });
  // Refused requests are logged naming the peer, bounded (refusal_log.h).
  lockstep::RealClock refusal_clock;
  lockstep::RefusalLog refusals(&log, &refusal_clock);
  interceptors.push_back(refusals.InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    log.Error("cannot listen: the address is in use or not available", {{"listen", listen}});
    return 1;
  }
  lockstep::RefusedConnectionLog data_refusals(&log, &refusal_clock,
                                               "data plane connection refused");
  std::unique_ptr<lockstep::PsTcpServer> data_plane;
  if (absl::GetFlag(FLAGS_data_port) >= 0) {
    lockstep::PsTcpServerOptions tcp_options;
    tcp_options.tls = *data_tls;
    // Under TLS only the coordinator (Control, coordinator certificates
    // only) fixes a job's data-plane secret; in plain text anyone could
    // call Control, so the first registration does as before.
    tcp_options.secrets_from_coordinator = security->tls();
    // A refused data-plane connection is logged naming its address and why,
    // within a line budget (common/log_budget.h).
    tcp_options.on_reject = [&data_refusals](const std::string& why) {
      data_refusals.Refused(why);
    };
    auto started = lockstep::PsTcpServer::Start(&registry, lockstep::HostOfAddress(listen),
                                                absl::GetFlag(FLAGS_data_port), tcp_options);
    if (!started.ok()) {
      log.Error(absl::StrCat("--data_port: ", started.status().message()));
      server->Shutdown();
      return 1;
    }
    data_plane = *std::move(started);
    service.SetSecretHooks(lockstep::DataPlaneSecretHooks(data_plane.get()));
    service.SetDataAddress(data_plane->port());
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = lockstep::WritePortFile(absl::GetFlag(FLAGS_port_file), port); !s.ok()) {
      log.Error(absl::StrCat("--port_file: ", s.message()));
      server->Shutdown();
      return 2;
    }
  }
  log.Info("listening", {{"role", "ps"},
                         {"address", lockstep::JoinHostPort(listen_host, port)},
                         {"port", port},
                         {"data_port", data_plane != nullptr ? data_plane->port() : -1}});
  const lockstep::MetricsServerConfig metrics_config = lockstep::MetricsServerConfigFromFlags(
      argc, argv, listen_host, absl::GetFlag(FLAGS_metrics_host),
      absl::GetFlag(FLAGS_metrics_port), absl::GetFlag(FLAGS_metrics_port_file), *http_token,
      *http_tls);
  std::string metrics_note;
  auto metrics_http =
      lockstep::StartMetricsServer(metrics_config, &metrics_registry, &metrics_note);
  if (!metrics_http.ok()) {
    log.Error(metrics_http.status().message());
    server->Shutdown();
    return metrics_http.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!metrics_note.empty()) log.Info(metrics_note);
  health.SetAllServing(true);
  const int sig = lockstep::WaitForShutdownSignal();
  log.Info("shutting down", {{"signal", lockstep::ShutdownSignalName(sig)}});
  health.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (data_plane != nullptr) data_plane->Shutdown();
  return 0;
}
