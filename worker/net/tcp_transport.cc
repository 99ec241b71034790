// Raw-TCP transport: see tcp_transport.h for the contract.
//
// Wire format (all integers little-endian, as x86-64 stores them):
//   challenge, acceptor -> connector on accept (40 bytes): 'LKSC',
//     version, 32-byte nonce
//   hello, once per connection, connector -> acceptor (104 bytes):
//     u32 magic 'LKSH' | u32 version | u64 group | u32 from | u32 to |
//     u32 world | u32 0 | u64 0 | 32-byte connector nonce | HMAC-SHA256
//     (job secret; the 72 bytes before it and the challenge's nonce)
//   accept, acceptor -> connector once the hello fits (40 bytes): 'LKSA',
//     version, HMAC-SHA256 (job secret, another domain; the same bytes).
//     No frame is sent before it has been checked.
//   frame, once per message (40 bytes, then `len` payload bytes):
//     u32 magic 'LKSF' | u32 flags (0) | u64 job | i64 step | i32 phase |
//     i32 chunk | i64 len
//
// Threads: Send and Recv run entirely in the caller's thread while the
// socket keeps up (non-blocking sendmsg / recv, ppoll for waiting). The one
// writer thread per transport (the outbox, tcp_outbox.h) only drains
// backlogs: bytes a Send could not hand to the kernel at once. Every ppoll
// also watches the inbox's eventfd, which Shutdown makes readable, so no
// wait outlives a shutdown. Accepting and hellos: the hub, tcp_hub.h; the
// byte layout: tcp_wire.h; socket helpers: tcp_io.h.
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
#include "worker/net/tcp_io.h"
#include "worker/net/tcp_outbox.h"
#include "worker/net/tcp_wire.h"

namespace lockstep {
namespace {

using tcpwire::Frame;
using tcpwire::Get;
using tcpwire::kHeaderBytes;
using tcpwire::DecodeFrame;
using tcpwire::EncodeFrame;
using tcpio::Errno;
using tcpio::ReadFully;
using tcpio::SetNoDelay;
using tcpio::SplitHostPort;
using tcpio::WaitFd;
using tcpio::WriteFully;

}  // namespace

// -------------------------------------------------------------- transport

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(
    TcpPeerHub* hub, uint64_t group, int rank,
    std::vector<std::string> peer_addresses, TcpTransportOptions options) {
  const int k = static_cast<int>(peer_addresses.size());
  if (hub == nullptr) return absl::InvalidArgumentError("tcp transport: no hub");
  if (k < 1 || rank < 0 || rank >= k) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tcp transport: rank %d is not in [0, %d)", rank, k));
  }
  if (options.secret.size() != dataauth::kSecretBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tcp transport: the job's data-plane secret has %d bytes, expected %d (the "
        "coordinator's Assignment.data_plane_secret)",
        options.secret.size(), dataauth::kSecretBytes));
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
  auto inbox = std::make_shared<TcpInbox>(group, rank, k, inbox_wake, options.secret);
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
      options_(options),
      outbox_(std::make_unique<TcpOutbox>(
          rank_, static_cast<int>(addresses_.size()), wake_fd,
          inbox_->wake_fd, options_.close_timeout, options_.progress)) {}

TcpTransport::~TcpTransport() { Shutdown(); }

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

absl::Status TcpTransport::ConnectLocked(int to, TcpOutLink& link,
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
  dataconn::Conn conn = dataconn::Plain(fd);
  if (const dataconn::DataTls* tls = hub_->tls(); tls != nullptr) {
    // --data_plane_tls: a mutual TLS session first (the peer must hold a
    // worker certificate from our CA); the challenge and hello run inside it.
    absl::StatusOr<dataconn::Conn> started = dataconn::StartTls(*tls, fd, /*server=*/false);
    if (!started.ok()) {
      close(fd);
      return absl::UnavailableError(started.status().message());
    }
    conn = *started;
    absl::Status hs = dataconn::Handshake(*tls, conn, inbox_->wake_fd, until);
    if (!hs.ok()) {
      dataconn::Close(conn);
      if (hs.code() == absl::StatusCode::kCancelled) return hs;
      return absl::UnavailableError(hs.message());
    }
  }
  // The acceptor's challenge (sent on accept), then our hello answering it.
  uint8_t c[tcpwire::kChallengeBytes];
  size_t got = 0;
  bool eof = false;
  absl::Status s = ReadFully(conn, c, sizeof(c), &got, &eof,
                             [&] { return WaitFd(fd, POLLIN, inbox_->wake_fd, until); });
  dataauth::Nonce nonce;
  if (s.ok()) s = tcpwire::DecodeChallenge(c, &nonce);
  if (!s.ok()) {
    dataconn::Close(conn);
    if (s.code() == absl::StatusCode::kCancelled) return s;
    return absl::UnavailableError(absl::StrCat("no challenge from it (", got, " of ",
                                               sizeof(c), " bytes): ", s.message()));
  }
  uint8_t h[tcpwire::kHelloBytes];
  tcpwire::EncodeHello(
      tcpwire::Hello{group_, static_cast<uint32_t>(rank_),
                     static_cast<uint32_t>(to),
                     static_cast<uint32_t>(world_size())},
      options_.secret, nonce, dataauth::RandomNonce(), h);
  s = WriteFully(conn, h, sizeof(h), inbox_->wake_fd, until);
  if (!s.ok()) {
    dataconn::Close(conn);
    return absl::UnavailableError(
        absl::StrCat("cannot send the hello: ", s.message()));
  }
  // Its accept: it proves the peer holds the job's secret before any frame
  // goes out. It comes once the peer's rank has attached (the peer parks our
  // hello until then), so it is waited for until the send's own deadline
  // (`until` above is at most that), not only connect_timeout.
  uint8_t a[tcpwire::kAcceptBytes];
  got = 0;
  eof = false;
  s = ReadFully(conn, a, sizeof(a), &got, &eof,
                [&] { return WaitFd(fd, POLLIN, inbox_->wake_fd, deadline); });
  if (s.ok()) s = tcpwire::VerifyAccept(a, h, options_.secret, nonce);
  if (!s.ok()) {
    dataconn::Close(conn);
    if (s.code() == absl::StatusCode::kCancelled) return s;
    if (eof) {
      return absl::UnavailableError(absl::StrCat(
          "it closed the connection without accepting our hello (", got, " of ", sizeof(a),
          " bytes; it refused the hello: see its log)"));
    }
    return absl::Status(s.code() == absl::StatusCode::kPermissionDenied
                            ? absl::StatusCode::kPermissionDenied
                            : absl::StatusCode::kUnavailable,
                        absl::StrCat("no valid accept of our hello (", got, " of ", sizeof(a),
                                     " bytes): ", s.message()));
  }
  link.AdoptLocked(conn);
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
  if (outbox_->shutting_down()) return cancelled();
  TcpOutLink& link = outbox_->link(to);
  absl::MutexLock l(&link.mu);
  // Flow control: wait while the backlog is over the limit.
  auto room = [&]() ABSL_SHARED_LOCKS_REQUIRED(link.mu) {
    return link.backlog_bytes <= options_.max_queued_bytes ||
           link.backlog.empty() || !link.broken.ok() ||
           outbox_->shutting_down();
  };
  if (!link.mu.AwaitWithDeadline(absl::Condition(&room), deadline)) {
    return Named(to, absl::DeadlineExceededError(absl::StrFormat(
                         "rank %d: send of message %s: %d bytes still queued "
                         "for the peer at the deadline (it is not reading)",
                         rank_, KeyToString(key), link.backlog_bytes)));
  }
  if (outbox_->shutting_down()) return cancelled();
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
      const ssize_t w = dataconn::Sendv(link.sock->conn, iov, niov);
      if (w > 0) {
        done += static_cast<size_t>(w);
        TouchProgress(options_.progress);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      const std::string e = Errno("send");
      link.CloseLocked();
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
  outbox_->BacklogLocked(link, hdr, kHeaderBytes, done, data, borrow);
  return absl::OkStatus();
}

absl::Status TcpTransport::FlushSends(absl::Time deadline) {
  int peer = -1;
  absl::Status s = outbox_->FlushBorrowed(deadline, &peer);
  if (s.ok()) return s;
  return Named(peer, s);
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
    if (outbox_->shutting_down()) {
      return waiting(absl::CancelledError("transport shut down"));
    }
    absl::StatusOr<dataconn::Conn> fd = inbox_->Current(from, deadline);
    if (!fd.ok()) return waiting(fd.status());
    auto wait = [&] {
      return outbox_->WaitReadable(fd->fd, deadline, options_.recv_spin,
                                   options_.progress_in_recv);
    };
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
      s = ReadFully(*fd, in.hdr, kHeaderBytes, &in.hdr_got, &eof, wait, options_.progress);
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
    if (absl::Status m = MismatchError(rank_, from, f.key, f.len, key,
                                       static_cast<int64_t>(out.size()));
        !m.ok()) {
      return Named(from, m);
    }
    size_t got = 0;
    s = ReadFully(*fd, out.data(), out.size(), &got, &eof, wait, options_.progress);
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
  // First wake every wait on the inbox's eventfd: Recvs, and the connects
  // of Sends (a Send waiting for a late peer's accept holds its link's
  // lock, which BeginShutdown takes next).
  inbox_->Shutdown();
  hub_->Detach(inbox_.get());
  outbox_->BeginShutdown();  // Sends waiting for room return
  // Drains the backlog for up to close_timeout, then closes the outbound
  // sockets (peers see end-of-stream).
  outbox_->StopWriterAndClose();
  // Wait for readers to leave before the inbox's sockets go away with it.
  for (auto& in : inbox_->links) {
    absl::MutexLock l(&in->read_mu);
  }
}

}  // namespace lockstep
