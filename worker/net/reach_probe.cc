#include "worker/net/reach_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "common/net/resolve.h"
#include "worker/net/tcp_io.h"

namespace lockstep {
namespace {

// Starts a non-blocking connect; -1 when it failed at once. *done: the
// connect completed at once (loopback may).
int StartConnect(const std::string& address, absl::Time deadline, bool* done) {
  *done = false;
  std::string host, port;
  if (!tcpio::SplitHostPort(address, &host, &port)) return -1;
  absl::StatusOr<AddrInfoList> ai = Resolve(host, port, deadline);
  if (!ai.ok() || *ai == nullptr) return -1;
  const addrinfo* a = ai->get();
  const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
    *done = true;
    return fd;
  }
  if (errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::vector<bool> ProbeReachable(const std::vector<std::string>& addresses, absl::Time deadline) {
  std::vector<bool> ok(addresses.size(), false);
  std::vector<pollfd> fds;
  std::vector<size_t> index;  // fds[i] probes addresses[index[i]]
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].empty()) {
      ok[i] = true;  // the caller itself
      continue;
    }
    bool done = false;
    const int fd = StartConnect(addresses[i], deadline, &done);
    if (fd < 0) continue;
    if (done) {
      ok[i] = true;
      close(fd);
      continue;
    }
    fds.push_back({fd, POLLOUT, 0});
    index.push_back(i);
  }
  size_t open = fds.size();
  while (open > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    const int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1, 1000));
    const int n = poll(fds.data(), fds.size(), ms);
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 &&
          (fds[i].revents & POLLOUT) != 0) {
        ok[index[i]] = true;
      }
      close(fds[i].fd);
      fds[i].fd = -1;  // poll ignores negative fds
      --open;
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  return ok;
}

}  // namespace lockstep
