#include "common/net/resolve.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {
namespace {

std::atomic<int> g_in_flight{0};

// One lookup on a helper thread. Shared by the thread and the waiter; the
// last one to let go frees it (and the result, if nobody took it).
struct Lookup {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  int rc ABSL_GUARDED_BY(mu) = 0;
  addrinfo* res ABSL_GUARDED_BY(mu) = nullptr;
  int event_fd = -1;  // written once done
  ~Lookup() {
    if (res != nullptr) freeaddrinfo(res);
    if (event_fd >= 0) close(event_fd);
  }
};

std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

absl::StatusOr<AddrInfoList> Resolve(const std::string& host_in, const std::string& port,
                                     absl::Time deadline, int wake_fd, bool passive,
                                     GetAddrInfoFn lookup) {
  const std::string host = Unbracketed(host_in);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  auto failed = [&](int rc) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  };
  // Numeric hosts (and the empty passive host) need no lookup: answered
  // here, in this thread, at once.
  {
    addrinfo numeric = hints;
    numeric.ai_flags |= AI_NUMERICHOST;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &numeric, &res);
    if (rc == 0) return AddrInfoList(res);
    if (host.empty()) return failed(rc);
  }
  if (g_in_flight.fetch_add(1) >= kMaxResolvesInFlight) {
    g_in_flight.fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot resolve '%s': %d earlier lookups are still running (the resolver is not "
        "answering)",
        host, kMaxResolvesInFlight));
  }
  auto state = std::make_shared<Lookup>();
  state->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->event_fd < 0) {
    g_in_flight.fetch_sub(1);
    return absl::UnavailableError(absl::StrCat("eventfd: ", strerror(errno)));
  }
  if (!lookup) lookup = [](const char* h, const char* p, const addrinfo* hi, addrinfo** r) {
    return getaddrinfo(h, p, hi, r);
  };
  std::thread([state, host, port, hints, lookup = std::move(lookup)] {
    addrinfo* res = nullptr;
    const int rc = lookup(host.c_str(), port.c_str(), &hints, &res);
    {
      absl::MutexLock l(&state->mu);
      state->done = true;
      state->rc = rc;
      state->res = res;
    }
    const uint64_t one = 1;
    (void)!write(state->event_fd, &one, sizeof(one));
    g_in_flight.fetch_sub(1);
  }).detach();

  const absl::Time start = absl::Now();
  for (;;) {
    {
      absl::MutexLock l(&state->mu);
      if (state->done) {
        if (state->rc != 0) return failed(state->rc);
        addrinfo* res = state->res;
        state->res = nullptr;
        return AddrInfoList(res);
      }
    }
    pollfd p[2] = {{state->event_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "resolving '%s' took longer than %s", host, absl::FormatDuration(absl::Now() - start)));
    }
    timespec ts = absl::ToTimespec(std::min(left, absl::Seconds(3600)));
    const int n = ppoll(p, wake_fd >= 0 ? 2 : 1, &ts, nullptr);
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("ppoll: ", strerror(errno)));
    }
    if (n > 0 && wake_fd >= 0 && p[1].revents != 0) {
      return absl::CancelledError(absl::StrCat("resolving '", host, "': shut down"));
    }
  }
}

}  // namespace lockstep
