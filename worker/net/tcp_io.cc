// Socket helpers of the raw-TCP peer transport: see tcp_io.h.
#include "worker/net/tcp_io.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace tcpio {

std::string Errno(const char* what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// ppoll's timeout for `deadline`: null (wait forever) for an infinite one,
// else the time left (zero if passed), stored in *ts.
timespec* TimeLeft(absl::Time deadline, timespec* ts) {
  if (deadline == absl::InfiniteFuture()) return nullptr;
  absl::Duration left = deadline - absl::Now();
  if (left < absl::ZeroDuration()) left = absl::ZeroDuration();
  *ts = absl::ToTimespec(left);
  return ts;
}

// Waits until `fd` has `events` or `wake_fd` is readable (shutdown), until
// `deadline`. OK: fd ready (or in error, which the next I/O call reports).
absl::Status WaitFd(int fd, short events, int wake_fd, absl::Time deadline) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    timespec ts;
    timespec* tsp = TimeLeft(deadline, &ts);
    const int n = ppoll(p, 2, tsp, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(Errno("ppoll"));
    }
    if (p[1].revents != 0) return absl::CancelledError("transport shut down");
    if (p[0].revents != 0) return absl::OkStatus();
    if (n == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError("deadline passed");
    }
  }
}

// Reads until [*got, n) of p is filled. OK when done; *eof set (and
// UnavailableError) on end of stream; `wait` blocks until fd may be
// readable (its errors are returned).
absl::Status ReadFully(const dataconn::Conn& c, uint8_t* p, size_t n, size_t* got, bool* eof,
                       absl::FunctionRef<absl::Status()> wait, ProgressMark* progress) {
  while (*got < n) {
    const ssize_t r = dataconn::Recv(c, p + *got, n - *got);
    if (r > 0) {
      *got += static_cast<size_t>(r);
      TouchProgress(progress);
      continue;
    }
    if (r == 0) {
      *eof = true;
      return absl::UnavailableError("end of stream");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *eof = true;  // a reset link is as gone as a closed one
      return absl::UnavailableError(Errno("recv"));
    }
    absl::Status s = wait();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Writes all of p (blocking via WaitFd). For the small hello only.
absl::Status WriteFully(const dataconn::Conn& c, const uint8_t* p, size_t n, int wake_fd,
                        absl::Time deadline) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = dataconn::Send(c, p + done, n - done);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(Errno("send"));
    }
    absl::Status s = WaitFd(c.fd, POLLOUT, wake_fd, deadline);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A host as getaddrinfo takes it: "[::1]" -> "::1"; others unchanged.
std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

bool SplitHostPort(const std::string& addr, std::string* host,
                   std::string* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) {
    return false;
  }
  *host = Unbracketed(addr.substr(0, colon));
  *port = addr.substr(colon + 1);
  int p = 0;
  return absl::SimpleAtoi(*port, &p) && p > 0 && p < 65536;
}

}  // namespace tcpio
}  // namespace lockstep
