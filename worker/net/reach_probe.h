// Which peers accept a TCP connection: the worker's side of the
// coordinator's reachability probe of a stuck ring or ps job (README
// "Two workers that cannot reach each other"). No gRPC here.
//
// ProbeReachable connects to every address at once (non-blocking connects,
// one poll loop) and closes each connection as soon as it is established,
// sending nothing; the peer's data hub (tcp_hub.h) and gRPC server close
// such a connection without logging a refusal. A refused or reset
// connection, an unparsable address, a name that does not resolve in time
// and a connect still pending at `deadline` all count as unreachable; ""
// (the caller's own rank) counts as reachable. Every address a name
// resolves to is tried (as the transport does); names are resolved one
// after another before any connect, all within the same deadline
// (common/net/resolve.h; the coordinator sends what the workers
// registered, numeric addresses unless --advertise named a host).
//
// Any thread; blocks until every address has answered or `deadline`.
#ifndef LOCKSTEP_WORKER_NET_REACH_PROBE_H_
#define LOCKSTEP_WORKER_NET_REACH_PROBE_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace lockstep {

// result[i]: whether addresses[i] ("host:port") accepted a connection.
std::vector<bool> ProbeReachable(const std::vector<std::string>& addresses, absl::Time deadline);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_REACH_PROBE_H_
