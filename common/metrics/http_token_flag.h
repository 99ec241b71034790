// --http_token_file and --http_tls, shared by the three daemons
// (lockstep-coordinator, lockstep-worker, lockstep-server) through
// MetricsServerConfigFromFlags: a file holding the token their HTTP server
// (metrics, status page) asks for on every page but /healthz
// (common/http/http_server.h), and HTTPS for that server with the daemon's
// own --tls_cert/--tls_key.
#ifndef LOCKSTEP_COMMON_METRICS_HTTP_TOKEN_FLAG_H_
#define LOCKSTEP_COMMON_METRICS_HTTP_TOKEN_FLAG_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, http_token_file);
ABSL_DECLARE_FLAG(bool, http_tls);
ABSL_DECLARE_FLAG(bool, http_client_certs);

#endif  // LOCKSTEP_COMMON_METRICS_HTTP_TOKEN_FLAG_H_
