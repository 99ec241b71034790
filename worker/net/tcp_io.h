// Socket helpers shared by the parts of the raw-TCP peer transport (the hub,
// tcp_hub.h; the outbox, tcp_outbox.h; the transport, tcp_transport.h).
// Contract: every wait takes a deadline and a wake eventfd (readable once the
// owner shuts down: the wait then returns CancelledError); nothing here holds
// a lock or owns a descriptor.
#ifndef LOCKSTEP_WORKER_NET_TCP_IO_H_
#define LOCKSTEP_WORKER_NET_TCP_IO_H_

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/collective/progress_mark.h"
#include "common/net/data_conn.h"

namespace lockstep {
namespace tcpio {

// "what: strerror(errno)".
std::string Errno(const char* what);

// ppoll's timeout for `deadline`: null (wait forever) for an infinite one,
// else the time left (zero if passed), stored in *ts.
timespec* TimeLeft(absl::Time deadline, timespec* ts);

// Waits until `fd` has `events` or `wake_fd` is readable (shutdown:
// CancelledError), until `deadline` (DeadlineExceededError). OK: fd ready
// (or in error, which the next I/O call reports).
absl::Status WaitFd(int fd, short events, int wake_fd, absl::Time deadline);

// Reads until [*got, n) of p is filled. OK when done; *eof set (and
// UnavailableError) on end of stream or a reset; `wait` blocks until fd may
// be readable (its errors are returned). `progress` (optional, not owned)
// is touched whenever a read returns bytes.
absl::Status ReadFully(const dataconn::Conn& c, uint8_t* p, size_t n, size_t* got, bool* eof,
                       absl::FunctionRef<absl::Status()> wait,
                       ProgressMark* progress = nullptr);

// Writes all of p (blocking via WaitFd). For the small hello only.
absl::Status WriteFully(const dataconn::Conn& c, const uint8_t* p, size_t n, int wake_fd,
                        absl::Time deadline);

void SetNoDelay(int fd);

// A host as getaddrinfo takes it: "[::1]" -> "::1"; others unchanged.
std::string Unbracketed(const std::string& host);

// "host:port" (host may be bracketed) -> host (unbracketed) and port text;
// false unless the port is a number in [1, 65535].
bool SplitHostPort(const std::string& addr, std::string* host,
                   std::string* port);

}  // namespace tcpio
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_IO_H_
