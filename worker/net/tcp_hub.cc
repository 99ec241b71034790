// The accept side of the raw-TCP peer transport: see tcp_hub.h.
#include "worker/net/tcp_hub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/net/tcp_io.h"

namespace lockstep {

namespace {

// "host:port" ("[v6]:port") of a socket address.
std::string AddressText(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return absl::StrCat(host, ":", port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  return "an unknown address";
}

std::string QueueFullMessage(int from, uint64_t group, int to) {
  return absl::StrFormat(
      "connection from rank %d for group %d rank %d: %d connections from it are already "
      "queued (TcpInbox::kMaxQueuedPerPeer)",
      from, group, to, TcpInbox::kMaxQueuedPerPeer);
}

}  // namespace


using tcpio::Errno;
using tcpio::SetNoDelay;
using tcpio::Unbracketed;
using tcpwire::kHeaderBytes;
using tcpwire::kHelloBytes;

// "host" of a "host:port" (IPv6 hosts keep their brackets).
static std::string SourceHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

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
  for (Parked& p : parked_) dataconn::Close(p.conn);
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
  std::vector<std::string> refused;  // reported once mu_ is released
  std::vector<Parked> claimed;        // verified: accepted once mu_ is released
  absl::Status st = [&]() -> absl::Status {
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
  for (Parked& p : parked_) {
    if (p.group != inbox->group || p.to != inbox->rank) {
      keep.push_back(p);
    } else if (absl::Status mac = tcpwire::VerifyHello(p.hello.data(), inbox->secret, p.nonce);
               !mac.ok()) {
      // Checked first: nothing an unauthenticated hello says is trusted.
      dataconn::Close(p.conn);
      ++rejected_;
      last_rejection_ = absl::StrCat("connection from ", p.peer, ": ", mac.message());
      refused.push_back(last_rejection_);
    } else if (p.world != inbox->world || p.from >= inbox->world) {
      dataconn::Close(p.conn);
      ++rejected_;
      last_rejection_ = absl::StrFormat(
          "connection from %s: rank %d of %d for group %d rank %d, which has "
          "world size %d",
          p.peer, p.from, p.world, p.group, p.to, inbox->world);
      refused.push_back(last_rejection_);
    } else {
      claimed.push_back(std::move(p));  // accepted and delivered below, unlocked
    }
  }
  parked_.swap(keep);
  return absl::OkStatus();
  }();
  Report(refused);
  // In arrival order (FIFO per peer holds for every connection that carries
  // frames: see AcceptAndDeliver).
  for (Parked& p : claimed) {
    const std::string why =
        AcceptAndDeliver(*inbox, p.hello.data(), p.nonce, p.from, p.conn);
    if (!why.empty()) Reject(p.conn, p.peer, why);
  }
  return st;
}

std::string TcpPeerHub::AcceptAndDeliver(TcpInbox& inbox, const uint8_t* hello,
                                         const dataauth::Nonce& nonce, int from,
                                         dataconn::Conn conn) {
  uint8_t accept[tcpwire::kAcceptBytes];
  tcpwire::EncodeAccept(hello, inbox.secret, nonce, accept);
  // 40 bytes into a fresh socket's empty send buffer: this does not wait in
  // practice; the deadline bounds it anyway (the accept thread serves
  // every connection).
  absl::Status s = tcpio::WriteFully(conn, accept, sizeof(accept), inbox.wake_fd,
                                     absl::Now() + absl::Seconds(1));
  if (!s.ok()) {
    dataconn::Close(conn);  // it went away, or the transport shut down
    return "";
  }
  switch (inbox.Deliver(from, conn)) {
    case TcpInbox::Delivery::kQueued:
      return "";
    case TcpInbox::Delivery::kShutDown:
      dataconn::Close(conn);
      return "";
    case TcpInbox::Delivery::kFull:
      break;
  }
  return QueueFullMessage(from, inbox.group, inbox.rank);
}

void TcpPeerHub::Report(const std::vector<std::string>& reasons) const {
  if (!options_.on_reject) return;
  for (const std::string& r : reasons) options_.on_reject(r);
}

void TcpPeerHub::Detach(const TcpInbox* inbox) {
  absl::MutexLock l(&mu_);
  auto it = inboxes_.find(std::make_pair(inbox->group, inbox->rank));
  if (it != inboxes_.end() && it->second.get() == inbox) inboxes_.erase(it);
}

void TcpPeerHub::Reject(dataconn::Conn& c, const std::string& peer, const std::string& why) {
  const std::string text = absl::StrCat("connection from ", peer, ": ", why);
  {
    // Counted before the close, so a client that sees the close sees it.
    absl::MutexLock l(&mu_);
    ++rejected_;
    last_rejection_ = text;
  }
  Report({text});  // before the close too: a client that sees the close sees the report
  dataconn::Close(c);
}

void TcpPeerHub::AcceptLoop() {
  std::vector<PendingHello> pending;  // this thread only
  std::vector<pollfd> fds;
  // Accepts until EAGAIN below: the listening socket must not block.
  const int listen_flags = fcntl(listen_fd_, F_GETFL);
  if (listen_flags >= 0) fcntl(listen_fd_, F_SETFL, listen_flags | O_NONBLOCK);
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    absl::Time wake_at = absl::Now() + absl::Seconds(1);  // park expiry
    for (const PendingHello& p : pending) {
      fds.push_back({p.conn.fd, static_cast<short>(p.want_write ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, p.deadline);
    }
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(wake_at - absl::Now()) + 1, 0, 1000));
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (stop_.load()) break;
    // Hellos first (their fds are fds[2..]), then new connections.
    if (n > 0) {
      size_t keep = 0;
      for (size_t i = 0; i < pending.size(); ++i) {
        const bool ready = fds[2 + i].revents != 0;
        if (ready && ReadHello(pending[i])) continue;
        if (keep != i) pending[keep] = std::move(pending[i]);
        ++keep;
      }
      pending.resize(keep);
    }
    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      // Accept what is queued (bounded per round so hellos keep moving).
      for (int i = 0; i < 64; ++i) {
        sockaddr_storage from{};
        socklen_t from_len = sizeof(from);
        const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                               SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        const std::string peer = AddressText(from);
        // The transports read with MSG_DONTWAIT and wait with ppoll: the
        // socket itself stays blocking, as before (a TLS one does not:
        // OpenSSL reads it itself).
        const int flags = fcntl(fd, F_GETFL);
        if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        dataconn::Conn conn = dataconn::Plain(fd);
        if (static_cast<int>(pending.size()) >= options_.max_pending_hellos) {
          Reject(conn, peer, absl::StrFormat("%d connections are already waiting for their hello "
                                     "(max_pending_hellos)",
                                     pending.size()));
          continue;
        }
        PendingHello p;
        p.got = 0;
        p.accepted = absl::Now();
        p.deadline = p.accepted + options_.hello_timeout;
        p.nonce = dataauth::RandomNonce();
        p.peer = peer;
        if (options_.tls != nullptr) {
          absl::StatusOr<dataconn::Conn> tls = dataconn::StartTls(*options_.tls, fd, true);
          if (!tls.ok()) {
            Reject(conn, peer, std::string(tls.status().message()));
            continue;
          }
          conn = *tls;
          p.handshaking = true;
        }
        p.conn = conn;
        if (!p.handshaking && !SendChallenge(p)) continue;
        pending.push_back(std::move(p));
        // A hello sent with the connect is often there already.
        if (ReadHello(pending.back())) pending.pop_back();
      }
    }
    const absl::Time now = absl::Now();
    size_t keep = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (now >= pending[i].deadline) {
        Reject(pending[i].conn, pending[i].peer,
               pending[i].handshaking
                   ? absl::StrCat("no complete TLS handshake within ",
                                  absl::FormatDuration(options_.hello_timeout),
                                  " (--data_plane_tls is on here: is it on at the peer?)")
                   : absl::StrCat("no complete hello within ",
                                  absl::FormatDuration(options_.hello_timeout), " (", pending[i].got,
                                  " of ", kHelloBytes, " bytes)"));
        continue;
      }
      if (keep != i) pending[keep] = std::move(pending[i]);
      ++keep;
    }
    pending.resize(keep);
    pending_hellos_.store(static_cast<int>(pending.size()));
    // Drop connections nobody claimed in time.
    absl::MutexLock l(&mu_);
    std::vector<Parked> still;
    for (Parked& q : parked_) {
      if (now - q.since > options_.park_timeout) {
        dataconn::Close(q.conn);
      } else {
        still.push_back(q);
      }
    }
    parked_.swap(still);
  }
  for (PendingHello& p : pending) dataconn::Close(p.conn);
  pending_hellos_.store(0);
}

bool TcpPeerHub::ClosedAtOnce(const PendingHello& p) const {
  return absl::Now() - p.accepted < options_.probe_close;
}

bool TcpPeerHub::SendChallenge(PendingHello& p) {
  // The challenge: 40 bytes into a fresh socket's (or session's) empty send
  // buffer.
  uint8_t challenge[tcpwire::kChallengeBytes];
  tcpwire::EncodeChallenge(p.nonce, challenge);
  const ssize_t w = dataconn::Send(p.conn, challenge, sizeof(challenge));
  if (w != static_cast<ssize_t>(sizeof(challenge))) {
    Reject(p.conn, p.peer, absl::StrCat("cannot send the challenge: ",
                                        w < 0 ? Errno("send") : std::string("short write")));
    return false;
  }
  return true;
}

bool TcpPeerHub::ReadHello(PendingHello& p) {
  if (p.handshaking) {
    absl::StatusOr<bool> done = dataconn::HandshakeStep(*options_.tls, p.conn, &p.want_write);
    if (!done.ok() && dataconn::NothingReceived(p.conn) && ClosedAtOnce(p)) {
      dataconn::Close(p.conn);  // as below: a probe that sent nothing
      return true;
    }
    if (!done.ok()) {
      Reject(p.conn, p.peer, std::string(done.status().message()));
      return true;
    }
    if (!*done) return false;
    p.handshaking = false;
    p.want_write = false;
    if (!SendChallenge(p)) return true;
  }
  for (;;) {
    const ssize_t r = dataconn::Recv(p.conn, p.buf + p.got, kHelloBytes - p.got);
    if (r > 0) {
      p.got += static_cast<size_t>(r);
      if (p.got == kHelloBytes) {
        HandleHello(p);
        return true;
      }
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (p.got == 0 && (r == 0 || errno == ECONNRESET) && ClosedAtOnce(p)) {
      // Closed (or reset: it did not read our challenge) at once, before
      // sending a byte: a reachability probe (reach_probe.h) or a port
      // check, not a refused peer. Closed without a refusal. (A peer that
      // gave up on its own deadline, e.g. one without --data_plane_tls
      // waiting for a challenge that never came, is refused as before.)
      dataconn::Close(p.conn);
      return true;
    }
    Reject(p.conn, p.peer, absl::StrCat("no complete hello (", p.got, " of ", kHelloBytes, " bytes): ",
                              r == 0 ? std::string("end of stream") : Errno("recv")));
    return true;
  }
}

void TcpPeerHub::HandleHello(PendingHello& p) {
  dataconn::Conn& fd = p.conn;
  tcpwire::Hello hello;
  if (absl::Status bad = tcpwire::DecodeHello(p.buf, &hello); !bad.ok()) {
    Reject(fd, p.peer, std::string(bad.message()));
    return;
  }
  const uint64_t group = hello.group;
  const uint32_t from = hello.from;
  const uint32_t to = hello.to;
  const uint32_t world = hello.world;
  SetNoDelay(fd.fd);
  std::shared_ptr<TcpInbox> inbox;
  bool mac_checked = false;
  for (;;) {
    absl::ReleasableMutexLock l(&mu_);
    auto it = inboxes_.find(std::make_pair(group, static_cast<int>(to)));
    if (it != inboxes_.end()) {
      inbox = it->second;
      break;
    }
    if (!mac_checked) {
      // The group is attached here (another of its ranks has an inbox), so
      // its secret is known: check the mac now, and refuse a forgery at once
      // instead of parking it. A valid hello is parked as below: several
      // ranks may share one hub (in-process tests and benches) and attach in
      // any order.
      auto held = inboxes_.lower_bound(std::make_pair(group, std::numeric_limits<int>::min()));
      if (held != inboxes_.end() && held->first.first == group) {
        const std::shared_ptr<TcpInbox> sibling = held->second;
        l.Release();
        if (absl::Status mac = tcpwire::VerifyHello(p.buf, sibling->secret, p.nonce); !mac.ok()) {
          Reject(fd, p.peer, std::string(mac.message()));
          return;
        }
        mac_checked = true;
        continue;  // (group, to) may have attached meanwhile
      }
    }
    const std::string source = SourceHost(p.peer);
    const int from_source = static_cast<int>(std::count_if(
        parked_.begin(), parked_.end(), [&](const Parked& q) { return SourceHost(q.peer) == source; }));
    if (from_source >= options_.max_parked_per_source) {
      l.Release();
      Reject(fd, p.peer,
             absl::StrFormat("hello from rank %d for group %d rank %d, which is not attached: "
                             "%d connections from %s are parked (max_parked_per_source)",
                             from, group, to, from_source, source));
      return;
    }
    if (static_cast<int>(parked_.size()) >= options_.max_parked) {
      const size_t parked = parked_.size();
      l.Release();
      Reject(fd, p.peer,
             absl::StrFormat("hello from rank %d for group %d rank %d, which is not attached: "
                             "%d connections are parked (max_parked)",
                             from, group, to, parked));
      return;
    }
    // Its mac is checked (again) when (group, to) attaches.
    Parked q{group, static_cast<int>(to), static_cast<int>(from), static_cast<int>(world),
             fd, absl::Now(), {}, p.nonce, p.peer};
    std::memcpy(q.hello.data(), p.buf, kHelloBytes);
    parked_.push_back(std::move(q));
    return;
  }
  if (absl::Status mac = tcpwire::VerifyHello(p.buf, inbox->secret, p.nonce); !mac.ok()) {
    Reject(fd, p.peer, std::string(mac.message()));
    return;
  }
  if (static_cast<int>(world) != inbox->world) {
    Reject(fd, p.peer, absl::StrFormat(
                   "hello from rank %d names world size %d; group %d rank %d "
                   "has %d",
                   from, world, group, to, inbox->world));
    return;
  }
  const std::string why =
      AcceptAndDeliver(*inbox, p.buf, p.nonce, static_cast<int>(from), fd);
  if (!why.empty()) Reject(fd, p.peer, why);
}

}  // namespace lockstep
