// The daemons' HTTP endpoint for metrics: one HttpServer serving
//   GET /metrics   the registry in the Prometheus text format 0.0.4
//   GET /healthz   "ok" (the process is up and its HTTP server answers)
// Other handlers (the coordinator's status page) can be added to the
// returned server with Handle()/HandlePrefix().
//
// Port rule shared by the three daemon mains (--metrics_host,
// --metrics_port, --metrics_port_file):
//   port > 0, given on the command line   bind exactly that port; failing
//                                         to bind is an error (exit).
//   port > 0, the daemon's default        bind it; if it is taken (a
//                                         second daemon of the kind on one
//                                         host, parallel tests), fall back
//                                         to an OS-chosen port and say so.
//   0                                     an OS-chosen port.
//   -1                                    no HTTP server (nullptr, OK).
// The bound port is written to port_file (if not empty) like --port_file.
// With a token file (--http_token_file) every page but /healthz needs the
// token (common/http/http_server.h, "Access token"); with --http_tls the
// server speaks HTTPS only (HttpServerOptions::tls).
#ifndef LOCKSTEP_COMMON_METRICS_METRICS_SERVER_H_
#define LOCKSTEP_COMMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/http/http_server.h"
#include "common/metrics/metrics.h"
#include "common/net/data_conn.h"

namespace lockstep {

struct MetricsServerConfig {
  std::string host;        // "" / "0.0.0.0" / "[::]" = every address
  int port = -1;
  bool port_is_default = false;  // see the rule above
  std::string port_file;
  std::string daemon;      // "lockstep-worker", for messages
  std::string access_token;  // from --http_token_file (HttpTokenFromFlag); "" = open pages
  std::shared_ptr<const dataconn::DataTls> tls;  // from --http_tls (HttpTlsFromFlag); null = HTTP
};

// `registry` must outlive the server. On success the server is serving (or
// nullptr for port -1); `note` (if not null) gets a line to log, e.g.
// "metrics on 127.0.0.1:9171 (/metrics, /healthz)". Errors name the flag:
// INVALID_ARGUMENT "--metrics_port: expected -1..65535, got 70000",
// UNAVAILABLE "--metrics_port: http server: cannot listen on ...",
absl::StatusOr<std::unique_ptr<HttpServer>> StartMetricsServer(const MetricsServerConfig& config,
                                                               const MetricsRegistry* registry,
                                                               std::string* note);

// The config a daemon main builds from its --metrics_host (`metrics_host`,
// "" = `listen_host`), --metrics_port and --metrics_port_file flags;
// port_is_default unless argv sets --metrics_port; `access_token` is
// HttpTokenFromFlag's.
// `tls` is HttpTlsFromFlag's.
MetricsServerConfig MetricsServerConfigFromFlags(
    int argc, char** argv, const std::string& listen_host, const std::string& metrics_host,
    int port, const std::string& port_file, const std::string& access_token,
    std::shared_ptr<const dataconn::DataTls> tls);

// --http_tls: null without the flag; with it the server-only TLS context of
// the daemon's certificate and key (`cert`, `key`: its --tls_cert and
// --tls_key), read once at start; with --http_client_certs too, clients
// must present a certificate from `ca` (its --tls_ca) with role metrics or
// client. INVALID_ARGUMENT naming --http_tls when the daemon has no
// certificate (--insecure) or a file does not load, naming
// --http_client_certs when it comes without --http_tls.
absl::StatusOr<std::shared_ptr<const dataconn::DataTls>> HttpTlsFromFlag(const std::string& cert,
                                                                        const std::string& key,
                                                                        const std::string& ca);

// The token in --http_token_file ("" without the flag), read once, when a
// daemon starts: a missing, empty or malformed file stops it before it
// serves anything (also with --metrics_port=-1). INVALID_ARGUMENT
// "--http_token_file: <path> is empty" (or unreadable, or not one printable
// token).
absl::StatusOr<std::string> HttpTokenFromFlag();

// True when argv (before parsing) sets flag `name`: "--name=V", "--name V",
// "-name=V" or "-name V" (flags after a bare "--" do not count).
bool FlagOnCommandLine(int argc, char** argv, absl::string_view name);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_METRICS_METRICS_SERVER_H_
