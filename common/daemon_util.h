// Start-up helpers shared by the daemon mains (lockstep-coordinator,
// lockstep-worker, lockstep-server --role=ps): the --port_file write and the
// address a daemon advertises for itself. POSIX only; no gRPC here.
#ifndef LOCKSTEP_COMMON_DAEMON_UTIL_H_
#define LOCKSTEP_COMMON_DAEMON_UTIL_H_

#include <string>

#include "absl/status/status.h"
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

// The "host:port" a daemon listening on `listen_host` (the host part of its
// --listen flag, IPv6 brackets kept) and bound to `port` tells others to
// dial. A wildcard host ("", "0.0.0.0", "[::]" or "::") is no address for a
// peer, so it becomes this machine's host name (gethostname(), or
// "localhost" if that fails or gives an empty name); any other host is kept
// as given.
std::string AdvertisedAddress(absl::string_view listen_host, int port);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DAEMON_UTIL_H_
