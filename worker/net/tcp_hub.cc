// The accept side of the raw-TCP peer transport: see tcp_hub.h.
#include "worker/net/tcp_hub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/net/tcp_io.h"

namespace lockstep {

using tcpio::Errno;
using tcpio::ReadFully;
using tcpio::SetNoDelay;
using tcpio::Unbracketed;
using tcpio::WaitFd;
using tcpwire::kHeaderBytes;

absl::StatusOr<std::unique_ptr<TcpPeerHub>> TcpPeerHub::Start(
    const std::string& host, int port, TcpHubOptions options) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = absl::StrCat(port);
  const std::string bare = Unbracketed(host);
  const int gai = getaddrinfo(bare.empty() ? nullptr : bare.c_str(),
                              port_text.c_str(), &hints, &res);
  if (gai != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tcp peer hub: cannot resolve listen host '%s': %s", host,
        gai_strerror(gai)));
  }
  int fd = -1;
  std::string err;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = Errno("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      break;
    }
    err = Errno("bind/listen");
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrFormat(
        "tcp peer hub: cannot listen on %s:%d: %s", host, port, err));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound = ntohs(ss.ss_family == AF_INET6
                              ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                              : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    const std::string e = Errno("eventfd");
    close(fd);
    return absl::UnavailableError(absl::StrCat("tcp peer hub: ", e));
  }
  return std::unique_ptr<TcpPeerHub>(new TcpPeerHub(fd, wake, bound, options));
}

TcpPeerHub::TcpPeerHub(int listen_fd, int wake_fd, int port,
                       TcpHubOptions options)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port),
      options_(options) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TcpPeerHub::~TcpPeerHub() {
  stop_.store(true);
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  accept_thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  absl::MutexLock l(&mu_);
  for (const Parked& p : parked_) close(p.fd);
  parked_.clear();
}

int64_t TcpPeerHub::rejected_connections() const {
  absl::MutexLock l(&mu_);
  return rejected_;
}

std::string TcpPeerHub::last_rejection() const {
  absl::MutexLock l(&mu_);
  return last_rejection_;
}

int TcpPeerHub::parked_connections() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(parked_.size());
}

absl::Status TcpPeerHub::Attach(const std::shared_ptr<TcpInbox>& inbox) {
  absl::MutexLock l(&mu_);
  const auto id = std::make_pair(inbox->group, inbox->rank);
  if (inboxes_.count(id) > 0) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "tcp peer hub: group %d rank %d is already attached", inbox->group,
        inbox->rank));
  }
  inboxes_[id] = inbox;
  // Claim parked connections in arrival order (FIFO per peer holds).
  std::vector<Parked> keep;
  for (const Parked& p : parked_) {
    if (p.group != inbox->group || p.to != inbox->rank) {
      keep.push_back(p);
    } else if (p.world != inbox->world || p.from >= inbox->world) {
      close(p.fd);
      ++rejected_;
      last_rejection_ = absl::StrFormat(
          "connection from rank %d of %d for group %d rank %d, which has "
          "world size %d",
          p.from, p.world, p.group, p.to, inbox->world);
    } else if (!inbox->Deliver(p.from, p.fd)) {
      close(p.fd);
    }
  }
  parked_.swap(keep);
  return absl::OkStatus();
}

void TcpPeerHub::Detach(const TcpInbox* inbox) {
  absl::MutexLock l(&mu_);
  auto it = inboxes_.find(std::make_pair(inbox->group, inbox->rank));
  if (it != inboxes_.end() && it->second.get() == inbox) inboxes_.erase(it);
}

void TcpPeerHub::Reject(int fd, const std::string& why) {
  {
    // Counted before the close, so a client that sees the close sees it.
    absl::MutexLock l(&mu_);
    ++rejected_;
    last_rejection_ = why;
  }
  close(fd);
}

void TcpPeerHub::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = poll(p, 2, 1000);
    if (stop_.load()) break;
    if (n > 0 && (p[0].revents & POLLIN) != 0) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) HandleConnection(fd);
    }
    // Drop connections nobody claimed in time.
    absl::MutexLock l(&mu_);
    const absl::Time now = absl::Now();
    std::vector<Parked> keep;
    for (const Parked& q : parked_) {
      if (now - q.since > options_.park_timeout) {
        close(q.fd);
      } else {
        keep.push_back(q);
      }
    }
    parked_.swap(keep);
  }
}

void TcpPeerHub::HandleConnection(int fd) {
  uint8_t h[kHeaderBytes];
  size_t got = 0;
  bool eof = false;
  const absl::Time deadline = absl::Now() + options_.hello_timeout;
  absl::Status s = ReadFully(fd, h, sizeof(h), &got, &eof, [&] {
    return WaitFd(fd, POLLIN, wake_fd_, deadline);
  });
  if (!s.ok()) {
    Reject(fd, absl::StrCat("no complete hello (", got, " of ", kHeaderBytes,
                            " bytes): ", s.message()));
    return;
  }
  tcpwire::Hello hello;
  if (absl::Status bad = tcpwire::DecodeHello(h, &hello); !bad.ok()) {
    Reject(fd, std::string(bad.message()));
    return;
  }
  const uint64_t group = hello.group;
  const uint32_t from = hello.from;
  const uint32_t to = hello.to;
  const uint32_t world = hello.world;
  SetNoDelay(fd);
  std::shared_ptr<TcpInbox> inbox;
  {
    absl::MutexLock l(&mu_);
    auto it = inboxes_.find(std::make_pair(group, static_cast<int>(to)));
    if (it == inboxes_.end()) {
      parked_.push_back(Parked{group, static_cast<int>(to),
                               static_cast<int>(from), static_cast<int>(world),
                               fd, absl::Now()});
      return;
    }
    inbox = it->second;
  }
  if (static_cast<int>(world) != inbox->world) {
    Reject(fd, absl::StrFormat(
                   "hello from rank %d names world size %d; group %d rank %d "
                   "has %d",
                   from, world, group, to, inbox->world));
    return;
  }
  if (!inbox->Deliver(static_cast<int>(from), fd)) close(fd);
}

}  // namespace lockstep
