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

// Starts a non-blocking connect to every address `address` resolves to
// (as tcp_transport.cc tries each): the fds still connecting go to
// *pending; true when one connected at once (loopback may).
bool StartConnects(const std::string& address, absl::Time deadline, std::vector<int>* pending) {
  std::string host, port;
  if (!tcpio::SplitHostPort(address, &host, &port)) return false;
  absl::StatusOr<AddrInfoList> ai = Resolve(host, port, deadline);
  if (!ai.ok()) return false;
  for (const addrinfo* a = ai->get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      close(fd);
      return true;
    }
    if (errno == EINPROGRESS) {
      pending->push_back(fd);
    } else {
      close(fd);
    }
  }
  return false;
}

}  // namespace

std::vector<bool> ProbeReachable(const std::vector<std::string>& addresses, absl::Time deadline) {
  std::vector<bool> ok(addresses.size(), false);
  std::vector<pollfd> fds;
  std::vector<size_t> index;  // fds[i] probes (one of the addresses of) addresses[index[i]]
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].empty()) {
      ok[i] = true;  // the caller itself
      continue;
    }
    std::vector<int> pending;
    if (StartConnects(addresses[i], deadline, &pending)) ok[i] = true;
    for (int fd : pending) {
      if (ok[i]) {
        close(fd);
        continue;
      }
      fds.push_back({fd, POLLOUT, 0});
      index.push_back(i);
    }
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
