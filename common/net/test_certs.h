// Tests only: certificates from deploy/certs.sh (data dependency
// //deploy:certs.sh) in the test's temporary folder, and data-plane TLS
// contexts made from them.
#ifndef LOCKSTEP_COMMON_NET_TEST_CERTS_H_
#define LOCKSTEP_COMMON_NET_TEST_CERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "common/net/data_conn.h"

namespace lockstep {
namespace testcerts {

// $TEST_TMPDIR/<name>, made by certs.sh once per process (a CA of its own
// per name). Aborts (CHECK) if certs.sh fails.
std::string Pki(const std::string& name);

// The context of `role`'s certificate in Pki(pki), accepting peers with
// `peer_roles`. Aborts if it does not load.
std::shared_ptr<const dataconn::DataTls> Tls(const std::string& pki, const std::string& role,
                                             std::vector<std::string> peer_roles);

}  // namespace testcerts
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_NET_TEST_CERTS_H_
