// Name resolution with a deadline. getaddrinfo() blocks for as long as the
// system's resolver likes (DNS timeouts times attempts times servers: tens
// of seconds on a cut-off host) and cannot be interrupted, so a transport
// that called it directly could wait far past its own deadline. Resolve()
// answers numeric hosts ("10.0.0.3", "::1", "[::1]") at once without any
// lookup, and runs any other name's getaddrinfo on a helper thread it does
// not wait for beyond `deadline` (the thread finishes on its own and frees
// its result; at most kMaxResolvesInFlight such threads at once).
//
// Errors: DeadlineExceededError "resolving NAME took longer than 1.2s";
// CancelledError when `wake_fd` (an fd that becomes readable on shutdown,
// e.g. an eventfd; -1 = none) is readable; UnavailableError with
// gai_strerror's text when the name does not resolve;
// ResourceExhaustedError when kMaxResolvesInFlight lookups are still
// running. No gRPC here.
#ifndef LOCKSTEP_COMMON_NET_RESOLVE_H_
#define LOCKSTEP_COMMON_NET_RESOLVE_H_

#include <netdb.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

// A resolved address list; frees itself with freeaddrinfo.
struct AddrInfoDeleter {
  void operator()(addrinfo* a) const {
    if (a != nullptr) freeaddrinfo(a);
  }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Lookups whose helper threads may run at once (a resolver that never
// answers must not make a retrying caller start threads without bound).
constexpr int kMaxResolvesInFlight = 16;

// The blocking lookup Resolve runs for non-numeric names (getaddrinfo by
// default; tests pass a slow one). Same contract as getaddrinfo.
using GetAddrInfoFn =
    std::function<int(const char* host, const char* port, const addrinfo* hints, addrinfo** res)>;

// Resolves `host` (brackets around an IPv6 literal are removed) and numeric
// `port` for SOCK_STREAM, any family. `passive`: AI_PASSIVE (an empty host
// then means every interface).
absl::StatusOr<AddrInfoList> Resolve(const std::string& host, const std::string& port,
                                     absl::Time deadline, int wake_fd = -1, bool passive = false,
                                     GetAddrInfoFn lookup = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_NET_RESOLVE_H_
