// --http_token_file: see http_token_flag.h.
#include "common/metrics/http_token_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, http_token_file, "",
          "file holding a token (printable ASCII, one word) that the HTTP server (/metrics, the "
          "status page) asks for on every page but /healthz: \"Authorization: Bearer <token>\" "
          "(Prometheus' authorization.credentials_file) or Basic with the token as password (a "
          "browser's prompt). Empty: the pages are open to anyone who reaches the port");
ABSL_FLAG(bool, http_tls, false,
          "serve the HTTP pages (/metrics, /healthz, the status page) over HTTPS with this "
          "daemon's --tls_cert/--tls_key (clients verify it against the cluster's CA, "
          "--tls_ca; Prometheus: scheme: https and tls_config.ca_file), so the "
          "--http_token_file token does not cross the network in clear text. Needs TLS (not "
          "--insecure)");
ABSL_FLAG(bool, http_client_certs, false,
          "with --http_tls: HTTPS clients must present a certificate from the cluster's CA "
          "(--tls_ca) with role metrics (deploy/certs.sh writes metrics.pem/metrics.key for "
          "Prometheus: tls_config.cert_file/key_file) or client (the CLI's, for a browser); "
          "others fail the TLS handshake, /healthz included. The token of --http_token_file, "
          "if given, is asked for as well");
