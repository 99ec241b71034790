#include "common/metrics/metrics_server.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/flags/flag.h"
#include "common/daemon_util.h"
#include "common/metrics/http_token_flag.h"
#include "common/token_file.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<HttpServer>> StartMetricsServer(const MetricsServerConfig& config,
                                                               const MetricsRegistry* registry,
                                                               std::string* note) {
  if (config.port < -1 || config.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port: expected -1 (off), 0 (OS-chosen) or 1..65535, got ",
                     config.port));
  }
  if (config.port == -1) {
    if (note != nullptr) *note = "metrics off (--metrics_port=-1)";
    return std::unique_ptr<HttpServer>();
  }
  HttpServerOptions options;
  options.access_token = config.access_token;
  options.tls = config.tls;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(config.host, config.port, options);
  std::string fallback;
  if (!server.ok() && config.port_is_default && config.port > 0) {
    fallback = absl::StrCat(" (default port ", config.port, " unavailable: ",
                            server.status().message(), ")");
    server = HttpServer::Start(config.host, 0, options);
  }
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("--metrics_port: ", server.status().message()));
  }
  (*server)->Handle("/metrics", MetricsHttpHandler(registry));
  (*server)->Handle("/healthz", [](const HttpRequest&) {
    HttpResponse r;
    r.body = "ok\n";
    r.headers["Cache-Control"] = "no-store";
    return r;
  });
  if (!config.port_file.empty()) {
    if (absl::Status s = WritePortFile(config.port_file, (*server)->port()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--metrics_port_file: ", s.message()));
    }
  }
  if (note != nullptr) {
    const std::string host = config.host.empty() ? "0.0.0.0" : config.host;
    const std::string address = host[0] == '['
                                    ? absl::StrCat(host, ":", (*server)->port())
                                    : JoinHostPort(host, (*server)->port());
    *note = absl::StrCat("metrics on ", options.tls != nullptr ? "https://" : "http://", address,
                         "/metrics and /healthz",
                         options.access_token.empty() ? " (open: no --http_token_file)"
                                                      : " (token required except /healthz)",
                         fallback);
  }
  return server;
}

absl::StatusOr<std::string> HttpTokenFromFlag() {
  const std::string path = absl::GetFlag(FLAGS_http_token_file);
  if (path.empty()) return std::string();
  return ReadTokenFile("--http_token_file", path);
}

absl::StatusOr<std::shared_ptr<const dataconn::DataTls>> HttpTlsFromFlag(const std::string& cert,
                                                                        const std::string& key,
                                                                        const std::string& ca) {
  const bool client_certs = absl::GetFlag(FLAGS_http_client_certs);
  if (!absl::GetFlag(FLAGS_http_tls)) {
    if (client_certs) {
      return absl::InvalidArgumentError(
          "--http_client_certs: needs --http_tls (client certificates are a TLS feature)");
    }
    return std::shared_ptr<const dataconn::DataTls>();
  }
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError(
        "--http_tls: needs this daemon's certificate (--tls_cert and --tls_key; not "
        "--insecure)");
  }
  if (client_certs) {
    return dataconn::DataTls::CreateServerWithClientCerts(cert, key, ca, {"metrics", "client"});
  }
  return dataconn::DataTls::CreateServerOnly(cert, key);
}

MetricsServerConfig MetricsServerConfigFromFlags(
    int argc, char** argv, const std::string& listen_host, const std::string& metrics_host,
    int port, const std::string& port_file, const std::string& access_token,
    std::shared_ptr<const dataconn::DataTls> tls) {
  MetricsServerConfig config;
  config.host = metrics_host.empty() ? listen_host : metrics_host;
  config.port = port;
  config.port_is_default = !FlagOnCommandLine(argc, argv, "metrics_port");
  config.port_file = port_file;
  config.access_token = access_token;
  config.tls = std::move(tls);
  return config;
}

bool FlagOnCommandLine(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") return false;
    if (!absl::ConsumePrefix(&a, "--")) {
      if (!absl::ConsumePrefix(&a, "-")) continue;
    }
    if (a == name || (absl::ConsumePrefix(&a, name) && absl::StartsWith(a, "="))) return true;
  }
  return false;
}

}  // namespace lockstep
