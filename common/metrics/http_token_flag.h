// --http_token_file, shared by the three daemons (lockstep-coordinator,
// lockstep-worker, lockstep-server) through MetricsServerConfigFromFlags:
// a file holding the token their HTTP server (metrics, status page) asks
// for on every page but /healthz (common/http/http_server.h).
#ifndef LOCKSTEP_COMMON_METRICS_HTTP_TOKEN_FLAG_H_
#define LOCKSTEP_COMMON_METRICS_HTTP_TOKEN_FLAG_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, http_token_file);

#endif  // LOCKSTEP_COMMON_METRICS_HTTP_TOKEN_FLAG_H_
