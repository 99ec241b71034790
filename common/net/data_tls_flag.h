// --data_plane_tls: the flag lockstep-worker, lockstep-server and
// lockstep-coordinator (which hosts a ps shard) share, and the TLS context
// it makes from the daemon's own --tls_cert/--tls_key/--tls_ca files
// (common/net/data_conn.h).
//
// A daemon flag, not a job option, as in gloo (TLS is a property of the
// transport device every process of the job is built with, from that
// process's own key and certificate): the certificates are the daemon's, the
// listening side must know before the first byte whether a connection
// speaks TLS, and a job cannot turn off what the operator turned on. Every
// daemon of a cluster passes the same value; a mismatch fails each
// connection's handshake with an error naming the peer.
#ifndef LOCKSTEP_COMMON_NET_DATA_TLS_FLAG_H_
#define LOCKSTEP_COMMON_NET_DATA_TLS_FLAG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/net/data_conn.h"

ABSL_DECLARE_FLAG(bool, data_plane_tls);

namespace lockstep {

// Null without --data_plane_tls. With it: the context for peers holding one
// of `peer_roles`; InvalidArgumentError naming the flags when the daemon runs
// --insecure or lacks --tls_cert/--tls_key/--tls_ca, or naming the file that
// does not load.
absl::StatusOr<std::shared_ptr<const dataconn::DataTls>> DataPlaneTlsFromFlag(
    const std::string& cert, const std::string& key, const std::string& ca,
    std::vector<std::string> peer_roles);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_NET_DATA_TLS_FLAG_H_
