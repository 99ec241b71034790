// Start-up helpers shared by the daemon mains (lockstep-coordinator,
// lockstep-worker, lockstep-server --role=ps): the --port_file write and the
// address a daemon advertises for itself. POSIX only; no gRPC here (a gRPC
// peer string is parsed as plain text).
#ifndef LOCKSTEP_COMMON_DAEMON_UTIL_H_
#define LOCKSTEP_COMMON_DAEMON_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// Writes "<port>\n" to `path` atomically: the text goes to
// "<path>.tmp.<pid>", which is then renamed over `path`, so a reader polling
// `path` sees either no file (or the old one) or the whole new content, never
// a partial line. Not fsync'ed: atomic for readers, not durable across a
// crash.
//
// On failure returns a non-OK status (its code from errno) whose message
// names the file and the step that failed, e.g.
// "cannot create /d/port.tmp.42: No such file or directory" or
// "cannot rename /d/port.tmp.42 to /d/port: Is a directory"; the temporary
// file is removed and `path` is left as it was.
absl::Status WritePortFile(const std::string& path, int port);

// True for the hosts that mean "every local address": "", "0.0.0.0",
// "[::]" and "::".
bool IsWildcardHost(absl::string_view host);

// "host:port", with an IPv6 literal bracketed ("::1", 80 -> "[::1]:80").
// An empty host gives ":port" (see AdvertisedAddress).
std::string JoinHostPort(absl::string_view host, int port);

// The host part of "host:port" / "[v6]:port" (brackets kept); the whole
// string when it has no port. "" for ":port".
std::string HostOfAddress(absl::string_view address);

// The address a daemon tells others to dial, from its --advertise flag
// (`advertise`, named `flag` in errors), the host of its --listen flag
// (`listen_host`, IPv6 brackets kept) and the port it bound.
//
//   advertise              result
//   ""  (listen concrete)  listen_host:bound_port
//   ""  (listen wildcard)  ":bound_port" -- no host: the receiver fills in
//                          the address it sees the daemon at (the
//                          coordinator uses the source IP of the worker's
//                          call, a worker the host it dials the
//                          coordinator at). Never this machine's host
//                          name: cloned VMs and containers share one, and
//                          names need DNS.
//   "HOST" / "[V6]" / "V6" HOST:bound_port (a bare host gets the bound port)
//   "HOST:PORT"            kept (PORT in 1..65535: a port-mapped setup)
//
// INVALID_ARGUMENT naming the flag and the expected form for anything else
// (an empty or non-numeric port, a port out of range, "host:" ...).
absl::StatusOr<std::string> AdvertisedAddress(absl::string_view flag,
                                              absl::string_view advertise,
                                              absl::string_view listen_host, int bound_port);

// The IP address (IPv6 bracketed) in a gRPC peer string as
// grpc::ServerContext::peer() gives it: "ipv4:10.0.0.3:5123" -> "10.0.0.3",
// "ipv6:[::1]:5123" or "ipv6:%5B::1%5D:5123" -> "[::1]". INVALID_ARGUMENT
// for any other form (a unix socket, "").
absl::StatusOr<std::string> HostFromGrpcPeer(absl::string_view peer);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DAEMON_UTIL_H_
