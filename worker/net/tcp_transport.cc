// Raw-TCP transport: see tcp_transport.h for the contract.
//
// Wire format (all integers little-endian, as x86-64 stores them):
//   hello, once per connection, connector -> acceptor (40 bytes):
//     u32 magic 'LKSH' | u32 version | u64 group | u32 from | u32 to |
//     u32 world | u32 0 | u64 0
//   frame, once per message (40 bytes, then `len` payload bytes):
//     u32 magic 'LKSF' | u32 flags (0) | u64 job | i64 step | i32 phase |
//     i32 chunk | i64 len
//
// Threads: Send and Recv run entirely in the caller's thread while the
// socket keeps up (non-blocking sendmsg / recv, ppoll for waiting). The one
// writer thread per transport only drains backlogs: bytes a Send could not
// hand to the kernel at once. Every ppoll also watches the inbox's eventfd,
// which Shutdown makes readable, so no wait outlives a shutdown.
#include "worker/net/tcp_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fifo.h"
#include "common/net/resolve.h"
#include "worker/net/tcp_wire.h"

namespace lockstep {
namespace {

using tcpwire::Frame;
using tcpwire::Get;
using tcpwire::kHeaderBytes;
using tcpwire::DecodeFrame;
using tcpwire::EncodeFrame;

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
absl::Status ReadFully(int fd, uint8_t* p, size_t n, size_t* got, bool* eof,
                       absl::FunctionRef<absl::Status()> wait) {
  while (*got < n) {
    const ssize_t r = recv(fd, p + *got, n - *got, MSG_DONTWAIT);
    if (r > 0) {
      *got += static_cast<size_t>(r);
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
absl::Status WriteFully(int fd, const uint8_t* p, size_t n, int wake_fd,
                        absl::Time deadline) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w =
        send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(Errno("send"));
    }
    absl::Status s = WaitFd(fd, POLLOUT, wake_fd, deadline);
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

}  // namespace

// ------------------------------------------------------------------ inbox

// Receive side of one (group, rank): for each peer, the queue of accepted
// connections from it (front = the one being read; a reconnect appends) and
// the reader's position in the byte stream.
class TcpInbox {
 public:
  struct InLink {
    absl::Mutex read_mu;  // held by the one Recv reading this link
    uint8_t hdr[kHeaderBytes] ABSL_GUARDED_BY(read_mu);
    size_t hdr_got ABSL_GUARDED_BY(read_mu) = 0;
    int64_t skip_left ABSL_GUARDED_BY(read_mu) = 0;
  };

  TcpInbox(uint64_t group, int rank, int world, int wake_fd)
      : group(group), rank(rank), world(world), wake_fd(wake_fd),
        fds_(world) {
    for (int i = 0; i < world; ++i) links.push_back(std::make_unique<InLink>());
  }
  ~TcpInbox() {
    for (auto& q : fds_) {
      for (int fd : q) close(fd);
    }
    close(wake_fd);
  }

  // Hub: a connection from `from` arrived. False if shut down (the caller
  // closes fd).
  bool Deliver(int from, int fd) {
    absl::MutexLock l(&mu_);
    if (shut_down_) return false;
    fds_[from].push_back(fd);
    return true;
  }

  // Waits for a connection from `from`; returns its fd, or an error.
  absl::StatusOr<int> Current(int from, absl::Time deadline) {
    absl::MutexLock l(&mu_);
    auto ready = [this, from]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return shut_down_ || !fds_[from].empty();
    };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (shut_down_) return absl::CancelledError("transport shut down");
    if (fds_[from].empty()) {
      return absl::DeadlineExceededError("no connection from it yet");
    }
    return fds_[from].front();
  }

  // The current connection from `from` ended: switch to the next one if the
  // peer reconnected. True if switched.
  bool Advance(int from) {
    absl::MutexLock l(&mu_);
    auto& q = fds_[from];
    if (q.size() < 2) return false;
    close(q.front());
    q.pop_front();
    return true;
  }

  bool AwaitCount(int from, size_t count, absl::Time deadline) {
    absl::MutexLock l(&mu_);
    auto enough = [this, from, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return shut_down_ || fds_[from].size() >= count;
    };
    mu_.AwaitWithDeadline(absl::Condition(&enough), deadline);
    return fds_[from].size() >= count;
  }

  // Makes the current connection from `from` read as ended (corrupt data).
  void Poison(int from) {
    absl::MutexLock l(&mu_);
    if (!fds_[from].empty()) shutdown(fds_[from].front(), SHUT_RDWR);
  }

  void Shutdown() {
    {
      absl::MutexLock l(&mu_);
      shut_down_ = true;
    }
    const uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof(one));
  }

  const uint64_t group;
  const int rank;
  const int world;
  const int wake_fd;  // eventfd, readable once shut down
  std::vector<std::unique_ptr<InLink>> links;

 private:
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::deque<int>> fds_ ABSL_GUARDED_BY(mu_);
};

// -------------------------------------------------------------------- hub

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

// -------------------------------------------------------------- transport

// Bytes of one message not yet taken by the kernel: `owned` first (a copy:
// the rest of the header, and the payload unless borrowed), then `ext` (the
// rest of a borrowed payload, still in the caller's buffer).
struct PendingSend {
  std::vector<uint8_t> owned;
  const uint8_t* ext = nullptr;
  size_t ext_len = 0;
  size_t size() const { return owned.size() + ext_len; }
};

struct TcpTransport::OutLink {
  absl::Mutex mu;
  int fd ABSL_GUARDED_BY(mu) = -1;
  // Bytes not yet taken by the kernel, in order; the front is partly
  // written (front_done bytes).
  // A Fifo keeps its capacity: no allocation per backlogged message.
  Fifo<PendingSend> backlog ABSL_GUARDED_BY(mu);
  size_t front_done ABSL_GUARDED_BY(mu) = 0;
  int64_t backlog_bytes ABSL_GUARDED_BY(mu) = 0;
  int borrowed ABSL_GUARDED_BY(mu) = 0;  // entries with ext != nullptr
  // !backlog.empty(), readable without the mutex.
  std::atomic<bool> pending{false};
  // Number of Recvs polling this link in WaitReadable right now.
  std::atomic<int> progressed{0};
  // Set when the writer found the link broken; reported by the next Send.
  absl::Status broken ABSL_GUARDED_BY(mu);
  // Recycled backlog buffers (fresh pages are slow here).
  std::vector<std::vector<uint8_t>> spare ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(
    TcpPeerHub* hub, uint64_t group, int rank,
    std::vector<std::string> peer_addresses, TcpTransportOptions options) {
  const int k = static_cast<int>(peer_addresses.size());
  if (hub == nullptr) return absl::InvalidArgumentError("tcp transport: no hub");
  if (k < 1 || rank < 0 || rank >= k) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tcp transport: rank %d is not in [0, %d)", rank, k));
  }
  std::vector<std::pair<std::string, std::string>> host_ports(k);
  for (int r = 0; r < k; ++r) {
    if (r == rank) continue;
    if (!SplitHostPort(peer_addresses[r], &host_ports[r].first,
                       &host_ports[r].second)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tcp transport: address of peer rank %d is '%s', expected "
          "host:port",
          r, peer_addresses[r]));
    }
  }
  const int inbox_wake = eventfd(0, EFD_CLOEXEC);
  const int writer_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (inbox_wake < 0 || writer_wake < 0) {
    const std::string e = Errno("eventfd");
    if (inbox_wake >= 0) close(inbox_wake);
    if (writer_wake >= 0) close(writer_wake);
    return absl::UnavailableError(absl::StrCat("tcp transport: ", e));
  }
  auto inbox = std::make_shared<TcpInbox>(group, rank, k, inbox_wake);
  absl::Status s = hub->Attach(inbox);
  if (!s.ok()) {
    close(writer_wake);
    return s;
  }
  return std::unique_ptr<TcpTransport>(new TcpTransport(
      hub, group, rank, std::move(peer_addresses), std::move(host_ports),
      std::move(inbox), writer_wake, options));
}

TcpTransport::TcpTransport(
    TcpPeerHub* hub, uint64_t group, int rank,
    std::vector<std::string> addresses,
    std::vector<std::pair<std::string, std::string>> host_ports,
    std::shared_ptr<TcpInbox> inbox, int wake_fd, TcpTransportOptions options)
    : hub_(hub), group_(group), rank_(rank), addresses_(std::move(addresses)),
      host_ports_(std::move(host_ports)), inbox_(std::move(inbox)),
      writer_wake_fd_(wake_fd), options_(options) {
  for (size_t i = 0; i < addresses_.size(); ++i) {
    out_.push_back(std::make_unique<OutLink>());
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

TcpTransport::~TcpTransport() {
  Shutdown();
  close(writer_wake_fd_);
}

std::string TcpTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= world_size()) {
    return absl::StrFormat("peer rank %d", peer);
  }
  return absl::StrFormat("peer rank %d (%s)", peer, addresses_[peer]);
}

absl::Status TcpTransport::Named(int peer, const absl::Status& s) const {
  return absl::Status(s.code(),
                      absl::StrCat(PeerName(peer), ": ", s.message()));
}

void TcpTransport::WakeWriter() {
  const uint64_t one = 1;
  (void)!write(writer_wake_fd_, &one, sizeof(one));
}

absl::Status TcpTransport::ConnectLocked(int to, OutLink& link,
                                         absl::Time deadline) {
  const absl::Time start = absl::Now();
  const absl::Time until = std::min(deadline, start + options_.connect_timeout);
  // A numeric address resolves at once; a name is looked up within the
  // connect's time and a shutdown interrupts the wait (common/net/resolve.h:
  // getaddrinfo itself cannot be interrupted or bounded).
  absl::StatusOr<AddrInfoList> resolved = Resolve(
      host_ports_[to].first, host_ports_[to].second, until, inbox_->wake_fd);
  if (!resolved.ok()) {
    if (resolved.status().code() == absl::StatusCode::kCancelled) return resolved.status();
    return absl::UnavailableError(
        absl::StrCat("cannot resolve its address: ", resolved.status().message()));
  }
  addrinfo* res = resolved->get();
  std::string err = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                a->ai_protocol);
    if (fd < 0) {
      err = Errno("socket");
      continue;
    }
    if (options_.send_buffer_bytes > 0) {
      const int b = options_.send_buffer_bytes;
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    }
    absl::Status s;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        s = absl::UnavailableError(Errno("connect"));
      } else {
        s = WaitFd(fd, POLLOUT, inbox_->wake_fd, until);
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (s.ok() && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 ||
                       soerr != 0)) {
          errno = soerr;
          s = absl::UnavailableError(Errno("connect"));
        }
      }
    }
    if (!s.ok()) {
      err = std::string(s.message());
      if (s.code() == absl::StatusCode::kCancelled) {
        close(fd);
        return s;
      }
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot connect within %s (the smaller of the send deadline and "
        "connect_timeout): %s",
        absl::FormatDuration(until - start), err));
  }
  SetNoDelay(fd);
  uint8_t h[kHeaderBytes];
  tcpwire::EncodeHello(
      tcpwire::Hello{group_, static_cast<uint32_t>(rank_),
                     static_cast<uint32_t>(to),
                     static_cast<uint32_t>(world_size())},
      h);
  absl::Status s = WriteFully(fd, h, sizeof(h), inbox_->wake_fd, until);
  if (!s.ok()) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot send the hello: ", s.message()));
  }
  link.fd = fd;
  link.broken = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status TcpTransport::Send(int to, const MessageKey& key,
                                absl::Span<const uint8_t> data,
                                absl::Time deadline) {
  return SendImpl(to, key, data, deadline, /*borrow=*/false);
}

absl::Status TcpTransport::SendBorrowed(int to, const MessageKey& key,
                                        absl::Span<const uint8_t> data,
                                        absl::Time deadline) {
  return SendImpl(to, key, data, deadline, /*borrow=*/true);
}

absl::Status TcpTransport::SendImpl(int to, const MessageKey& key,
                                    absl::Span<const uint8_t> data,
                                    absl::Time deadline, bool borrow) {
  absl::Status s = CheckPeer(rank_, world_size(), to, "send to");
  if (!s.ok()) return s;
  auto cancelled = [&] {
    return Named(to, absl::CancelledError(absl::StrFormat(
                         "rank %d: send of message %s: transport shut down",
                         rank_, KeyToString(key))));
  };
  if (shutting_down_.load()) return cancelled();
  OutLink& link = *out_[to];
  absl::MutexLock l(&link.mu);
  // Flow control: wait while the backlog is over the limit.
  auto room = [&]() ABSL_SHARED_LOCKS_REQUIRED(link.mu) {
    return link.backlog_bytes <= options_.max_queued_bytes ||
           link.backlog.empty() || !link.broken.ok() ||
           shutting_down_.load();
  };
  if (!link.mu.AwaitWithDeadline(absl::Condition(&room), deadline)) {
    return Named(to, absl::DeadlineExceededError(absl::StrFormat(
                         "rank %d: send of message %s: %d bytes still queued "
                         "for the peer at the deadline (it is not reading)",
                         rank_, KeyToString(key), link.backlog_bytes)));
  }
  if (shutting_down_.load()) return cancelled();
  if (!link.broken.ok()) {
    absl::Status b = link.broken;
    link.broken = absl::OkStatus();  // reported once; the next Send reconnects
    return Named(to, b);
  }
  if (link.fd < 0) {
    s = ConnectLocked(to, link, deadline);
    if (!s.ok()) {
      if (s.code() == absl::StatusCode::kCancelled) return cancelled();
      return Named(to, s);
    }
  }
  uint8_t hdr[kHeaderBytes];
  EncodeFrame(key, static_cast<int64_t>(data.size()), hdr);
  size_t done = 0;  // of header + payload
  const size_t total = kHeaderBytes + data.size();
  if (link.backlog.empty()) {
    // Fast path: straight into the kernel from the caller's buffer.
    while (done < total) {
      iovec iov[2];
      int niov = 0;
      if (done < kHeaderBytes) {
        iov[niov++] = {hdr + done, kHeaderBytes - done};
        if (!data.empty()) {
          iov[niov++] = {const_cast<uint8_t*>(data.data()), data.size()};
        }
      } else {
        iov[niov++] = {const_cast<uint8_t*>(data.data()) + (done - kHeaderBytes),
                       total - done};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = niov;
      const ssize_t w = sendmsg(link.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        done += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      const std::string e = Errno("send");
      close(link.fd);
      link.fd = -1;
      return Named(to, absl::UnavailableError(absl::StrFormat(
                           "rank %d: send of message %s failed, link closed "
                           "(%s)",
                           rank_, KeyToString(key), e)));
    }
  }
  sent_.fetch_add(1);
  if (done == total) return absl::OkStatus();
  // The rest goes to the backlog, written by the writer thread (or by
  // FlushSends).
  backlogged_.fetch_add(1);
  PendingSend p;
  if (!link.spare.empty()) {
    p.owned = std::move(link.spare.back());
    link.spare.pop_back();
  }
  p.owned.clear();
  const size_t data_done = done > kHeaderBytes ? done - kHeaderBytes : 0;
  if (done < kHeaderBytes) p.owned.assign(hdr + done, hdr + kHeaderBytes);
  if (borrow && data.size() > data_done) {
    p.ext = data.data() + data_done;
    p.ext_len = data.size() - data_done;
    ++link.borrowed;
  } else {
    p.owned.insert(p.owned.end(), data.begin() + data_done, data.end());
  }
  const bool was_empty = link.backlog.empty();
  link.backlog_bytes += static_cast<int64_t>(p.size());
  link.backlog.push_back(std::move(p));
  SyncPendingLocked(link);
  if (was_empty) WakeWriter();
  return absl::OkStatus();
}

void TcpTransport::SyncPendingLocked(OutLink& link) {
  const bool now = !link.backlog.empty();
  if (link.pending.load() == now) return;
  link.pending.store(now);
  pending_links_.fetch_add(now ? 1 : -1);
}

bool TcpTransport::FlushLocked(int to, OutLink& link) {
  while (!link.backlog.empty() && link.fd >= 0) {
    constexpr int kMaxIov = 32;
    iovec iov[kMaxIov];
    int niov = 0;
    size_t skip = link.front_done;
    for (size_t i = 0; i < link.backlog.size() && niov + 2 <= kMaxIov; ++i) {
      PendingSend* it = &link.backlog[i];
      const size_t own = it->owned.size();
      if (skip < own) {
        iov[niov++] = {it->owned.data() + skip, own - skip};
        skip = 0;
      } else {
        skip -= own;
      }
      if (it->ext_len > skip) {
        iov[niov++] = {const_cast<uint8_t*>(it->ext) + skip,
                       it->ext_len - skip};
      }
      skip = 0;
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = niov;
    ssize_t w = sendmsg(link.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w <= 0) {
      link.broken = absl::UnavailableError(absl::StrFormat(
          "rank %d: link to peer %d broke with %d bytes queued (%s)", rank_,
          to, link.backlog_bytes, w < 0 ? std::strerror(errno) : "closed"));
      close(link.fd);
      link.fd = -1;
      for (size_t i = 0; i < link.backlog.size(); ++i) {
        PendingSend& b = link.backlog[i];
        if (link.spare.size() < 4) link.spare.push_back(std::move(b.owned));
      }
      link.backlog.clear();
      link.front_done = 0;
      link.backlog_bytes = 0;
      link.borrowed = 0;
      SyncPendingLocked(link);
      return false;
    }
    link.backlog_bytes -= w;
    size_t left = static_cast<size_t>(w);
    while (left > 0) {
      PendingSend& front = link.backlog.front();
      const size_t rest = front.size() - link.front_done;
      if (left < rest) {
        link.front_done += left;
        left = 0;
      } else {
        left -= rest;
        link.front_done = 0;
        if (front.ext != nullptr) --link.borrowed;
        if (link.spare.size() < 4) link.spare.push_back(std::move(front.owned));
        link.backlog.pop_front();
      }
    }
  }
  SyncPendingLocked(link);
  return true;
}

absl::Status TcpTransport::FlushSends(absl::Time deadline) {
  absl::Status result;
  auto note = [&](int to, const absl::Status& s) {
    if (result.ok()) result = Named(to, s);
  };
  for (int to = 0; to < world_size(); ++to) {
    OutLink& link = *out_[to];
    link.mu.Lock();
    while (link.borrowed > 0 && link.fd >= 0 && FlushLocked(to, link) &&
           link.borrowed > 0) {
      // Wait for room without holding the link (the writer thread and other
      // callers may use it meanwhile).
      const int fd = link.fd;
      link.mu.Unlock();
      absl::Status s = WaitFd(fd, POLLOUT, inbox_->wake_fd, deadline);
      link.mu.Lock();
      if (s.ok()) continue;
      // Out of time (or shutting down): copy what is still borrowed; it is
      // still sent, by the writer thread.
      const int64_t pending_bytes = link.backlog_bytes;
      for (size_t i = 0; i < link.backlog.size(); ++i) {
        PendingSend& p = link.backlog[i];
        if (p.ext == nullptr) continue;
        p.owned.insert(p.owned.end(), p.ext, p.ext + p.ext_len);
        p.ext = nullptr;
        p.ext_len = 0;
        borrows_copied_.fetch_add(1);
      }
      link.borrowed = 0;
      note(to, absl::Status(
                   s.code(),
                   absl::StrFormat("rank %d: %d bytes still queued for the "
                                   "peer when flushing sends (it is not "
                                   "reading): %s",
                                   rank_, pending_bytes, s.message())));
    }
    if (!link.broken.ok()) {
      // The link broke with our messages queued: they are lost.
      note(to, link.broken);
      link.broken = absl::OkStatus();
    }
    link.mu.Unlock();
  }
  return result;
}

void TcpTransport::WriterLoop() {
  std::vector<pollfd> fds;
  std::vector<int> peers;
  bool draining = false;
  absl::Time drain_until = absl::InfiniteFuture();
  for (;;) {
    fds.clear();
    peers.clear();
    fds.push_back({writer_wake_fd_, POLLIN, 0});
    for (int r = 0; r < world_size(); ++r) {
      OutLink& link = *out_[r];
      // A Recv polling the link writes its backlog (WaitReadable).
      if (!link.pending.load()) continue;
      if (link.progressed.load() > 0 && !shutting_down_.load()) continue;
      absl::MutexLock l(&link.mu);
      if (!link.backlog.empty() && link.fd >= 0) {
        fds.push_back({link.fd, POLLOUT, 0});
        peers.push_back(r);
      }
    }
    if (shutting_down_.load()) {
      if (!draining) {
        draining = true;
        drain_until = absl::Now() + options_.close_timeout;
      }
      if (peers.empty() || absl::Now() >= drain_until) return;
    }
    int timeout_ms = -1;
    if (draining) {
      timeout_ms = static_cast<int>(std::max<int64_t>(
          1, absl::ToInt64Milliseconds(drain_until - absl::Now())));
    }
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      uint64_t v;
      (void)!read(writer_wake_fd_, &v, sizeof(v));
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      OutLink& link = *out_[peers[i - 1]];
      absl::MutexLock l(&link.mu);
      FlushLocked(peers[i - 1], link);
    }
  }
}

absl::Status TcpTransport::WaitReadable(int fd, absl::Time deadline) {
  if (options_.recv_spin > absl::ZeroDuration() &&
      pending_links_.load() == 0) {
    // Stay runnable for a while, yielding the CPU, before sleeping.
    const absl::Time until = std::min(deadline, absl::Now() + options_.recv_spin);
    do {
      pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) return absl::OkStatus();
      sched_yield();
    } while (absl::Now() < until);
  }
  if (!options_.progress_in_recv || pending_links_.load() == 0) {
    return WaitFd(fd, POLLIN, inbox_->wake_fd, deadline);
  }
  // Also write backlogs while waiting (MPI-style progress in the caller's
  // thread); the writer thread leaves the links polled here alone and is
  // woken when we stop polling one that still has a backlog.
  pollfd p[2 + kMaxProgressPeers];
  int peers[kMaxProgressPeers];
  int n = 2;
  auto release = [&] {
    bool still_pending = false;
    for (int i = 2; i < n; ++i) {
      OutLink& link = *out_[peers[i - 2]];
      link.progressed.fetch_sub(1);
      still_pending |= link.pending.load();
    }
    n = 2;
    return still_pending;
  };
  for (;;) {
    p[0] = {fd, POLLIN, 0};
    p[1] = {inbox_->wake_fd, POLLIN, 0};
    n = 2;
    for (int r = 0; r < world_size() && n - 2 < kMaxProgressPeers; ++r) {
      OutLink& link = *out_[r];
      if (!link.pending.load()) continue;
      absl::MutexLock l(&link.mu);
      if (link.backlog.empty() || link.fd < 0) continue;
      link.progressed.fetch_add(1);
      peers[n - 2] = r;
      p[n++] = {link.fd, POLLOUT, 0};
    }
    timespec ts;
    timespec* tsp = TimeLeft(deadline, &ts);
    const int ready = ppoll(p, n, tsp, nullptr);
    absl::Status result;
    bool done = false;
    if (ready < 0 && errno != EINTR) {
      result = absl::UnavailableError(Errno("ppoll"));
      done = true;
    } else if (ready > 0 && p[1].revents != 0) {
      result = absl::CancelledError("transport shut down");
      done = true;
    } else if (ready > 0) {
      for (int i = 2; i < n; ++i) {
        if (p[i].revents == 0) continue;
        OutLink& link = *out_[peers[i - 2]];
        absl::MutexLock l(&link.mu);
        FlushLocked(peers[i - 2], link);
      }
      done = p[0].revents != 0;
    }
    if (!done && absl::Now() >= deadline) {
      result = absl::DeadlineExceededError("deadline passed");
      done = true;
    }
    const bool still_pending = release();
    if (done) {
      if (still_pending) WakeWriter();  // the backlog is the writer's again
      return result;
    }
  }
}

absl::Status TcpTransport::Recv(int from, const MessageKey& key,
                                absl::Span<uint8_t> out, absl::Time deadline) {
  absl::Status s = CheckPeer(rank_, world_size(), from, "receive from");
  if (!s.ok()) return s;
  TcpInbox::InLink& in = *inbox_->links[from];
  absl::MutexLock rl(&in.read_mu);
  int64_t skipped = 0;
  auto waiting = [&](const absl::Status& why) {
    std::string stale;
    if (skipped > 0) {
      stale = absl::StrFormat("; %d stale message(s) discarded", skipped);
    }
    const char* what = why.code() == absl::StatusCode::kDeadlineExceeded
                           ? "timed out waiting for"
                           : "failed while waiting for";
    return Named(from, absl::Status(why.code(),
                                    absl::StrFormat(
                                        "rank %d: %s message %s (%d bytes) "
                                        "from peer %d: %s%s",
                                        rank_, what, KeyToString(key),
                                        out.size(), from, why.message(),
                                        stale)));
  };
  for (;;) {
    s = absl::OkStatus();
    if (shutting_down_.load()) {
      return waiting(absl::CancelledError("transport shut down"));
    }
    absl::StatusOr<int> fd = inbox_->Current(from, deadline);
    if (!fd.ok()) return waiting(fd.status());
    auto wait = [&] { return WaitReadable(*fd, deadline); };
    bool eof = false;
    if (in.skip_left > 0) {
      uint8_t sink[16 << 10];
      while (in.skip_left > 0 && !eof) {
        size_t got = 0;
        const size_t n =
            static_cast<size_t>(std::min<int64_t>(in.skip_left, sizeof(sink)));
        s = ReadFully(*fd, sink, n, &got, &eof, wait);
        in.skip_left -= static_cast<int64_t>(got);
        if (!s.ok()) break;
      }
    }
    if (s.ok()) {
      s = ReadFully(*fd, in.hdr, kHeaderBytes, &in.hdr_got, &eof, wait);
    }
    if (eof) {
      in.hdr_got = 0;
      in.skip_left = 0;
      if (inbox_->Advance(from)) continue;  // the peer reconnected
      return waiting(absl::UnavailableError(absl::StrCat(
          "the link from it is closed (", s.message(), ")")));
    }
    if (!s.ok()) return waiting(s);
    Frame f;
    if (!DecodeFrame(in.hdr, &f)) {
      in.hdr_got = 0;
      inbox_->Poison(from);
      return Named(from, absl::DataLossError(absl::StrFormat(
                             "rank %d: corrupt frame header from peer %d "
                             "(magic 0x%08x); link closed",
                             rank_, from, Get<uint32_t>(in.hdr, 0))));
    }
    if (IsStale(f.key, key)) {
      in.hdr_got = 0;
      in.skip_left = f.len;
      ++skipped;
      stale_.fetch_add(1);
      continue;
    }
    if (f.key != key) {
      return Named(from, absl::InternalError(absl::StrFormat(
                             "rank %d: message from peer %d has key %s (%d "
                             "bytes) but key %s (%d bytes) was expected",
                             rank_, from, KeyToString(f.key), f.len,
                             KeyToString(key), out.size())));
    }
    if (f.len != static_cast<int64_t>(out.size())) {
      return Named(from, absl::DataLossError(absl::StrFormat(
                             "rank %d: message %s from peer %d has %d bytes "
                             "but %d were expected",
                             rank_, KeyToString(key), from, f.len,
                             out.size())));
    }
    size_t got = 0;
    s = ReadFully(*fd, out.data(), out.size(), &got, &eof, wait);
    in.hdr_got = 0;
    if (!s.ok()) {
      in.skip_left = static_cast<int64_t>(out.size() - got);
      return waiting(absl::Status(
          s.code(), absl::StrFormat("%s after %d of its %d bytes (the rest "
                                    "will be discarded)",
                                    s.message(), got, out.size())));
    }
    return absl::OkStatus();
  }
}

bool TcpTransport::AwaitInbound(int from, int count, absl::Time deadline) {
  if (from < 0 || from >= world_size() || count < 0) return false;
  return inbox_->AwaitCount(from, static_cast<size_t>(count), deadline);
}

void TcpTransport::Shutdown() {
  {
    absl::MutexLock l(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  shutting_down_.store(true);
  hub_->Detach(inbox_.get());
  inbox_->Shutdown();  // wakes every Recv / connect wait
  // Wake Sends waiting for room (their condition reads shutting_down_).
  for (auto& link : out_) {
    absl::MutexLock l(&link->mu);
  }
  WakeWriter();
  writer_.join();  // drains the backlog for up to close_timeout
  for (auto& link : out_) {
    absl::MutexLock l(&link->mu);
    if (link->fd >= 0) {
      shutdown(link->fd, SHUT_WR);
      close(link->fd);
      link->fd = -1;
    }
    // Whatever did not drain in time is dropped (and no caller buffer is
    // referenced any more).
    link->backlog.clear();
    link->backlog_bytes = 0;
    link->borrowed = 0;
    SyncPendingLocked(*link);
  }
  // Wait for readers to leave before the inbox's sockets go away with it.
  for (auto& in : inbox_->links) {
    absl::MutexLock l(&in->read_mu);
  }
}

}  // namespace lockstep
