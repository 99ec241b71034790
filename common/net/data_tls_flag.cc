// --data_plane_tls: see data_tls_flag.h.
#include "common/net/data_tls_flag.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"

ABSL_FLAG(bool, data_plane_tls, false,
          "encrypt the raw-TCP data planes (--peer_transport=tcp rings, --ps_transport=tcp "
          "pushes and pulls) with mutual TLS 1.3 from this daemon's --tls_cert/--tls_key/--tls_ca "
          "(peers must hold a worker certificate; ps servers a server or coordinator one). "
          "Every daemon of the cluster must pass the same value");

namespace lockstep {

absl::StatusOr<std::shared_ptr<const dataconn::DataTls>> DataPlaneTlsFromFlag(
    const std::string& cert, const std::string& key, const std::string& ca,
    std::vector<std::string> peer_roles) {
  if (!absl::GetFlag(FLAGS_data_plane_tls)) return std::shared_ptr<const dataconn::DataTls>();
  if (cert.empty() || key.empty() || ca.empty()) {
    return absl::InvalidArgumentError(
        "--data_plane_tls: needs mutual TLS (--tls_cert, --tls_key and --tls_ca; not "
        "--insecure): the data planes use this daemon's certificate");
  }
  return dataconn::DataTls::Create(cert, key, ca, std::move(peer_roles));
}

}  // namespace lockstep
