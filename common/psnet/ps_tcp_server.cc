#include "common/psnet/ps_tcp_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/net/data_auth.h"

namespace lockstep {
namespace {

using psnet::Frame;
using psnet::Kind;

constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);

// "host:port" ("[v6]:port") of a socket address.
std::string AddressText(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(a->sin6_port));
  }
  return "an unknown address";
}

// True when the client closed its end or the connection failed (checked
// without blocking while a request waits for the step's other pushes).
bool ClientGone(int fd) {
  pollfd p = {fd, static_cast<short>(POLLRDHUP), 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

absl::Status SendFrame(const dataconn::Conn& fd, const Frame& f, const void* payload, absl::Time deadline) {
  uint8_t h[psnet::kFrameBytes];
  psnet::EncodeFrame(f, h);
  iovec iov[2] = {{h, sizeof(h)}, {const_cast<void*>(payload), static_cast<size_t>(f.len)}};
  return psnet::WriteFully(fd, iov, f.len > 0 ? 2 : 1, deadline);
}

absl::Status SendError(const dataconn::Conn& fd, const Frame& req, const absl::Status& error, absl::Time deadline) {
  std::string text(error.message().substr(0, psnet::kMaxErrorBytes));
  Frame f;
  f.kind = static_cast<uint32_t>(Kind::kError);
  f.job = req.job;
  f.step = req.step;
  f.worker = req.worker;
  f.count = static_cast<int64_t>(error.code());
  f.len = static_cast<int64_t>(text.size());
  return SendFrame(fd, f, text.data(), deadline);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsTcpServer>> PsTcpServer::Start(PsShardRegistry* registry,
                                                                const std::string& host,
                                                                int port,
                                                                PsTcpServerOptions options) {
  int bound = 0;
  absl::StatusOr<int> fd = psnet::Listen(host, port, &bound);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(),
                        absl::StrCat("ps data plane: ", fd.status().message()));
  }
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    const std::string e = psnet::Errno("eventfd");
    close(*fd);
    return absl::UnavailableError(absl::StrCat("ps data plane: ", e));
  }
  return std::unique_ptr<PsTcpServer>(new PsTcpServer(registry, *fd, wake, bound, options));
}

PsTcpServer::PsTcpServer(PsShardRegistry* registry, int listen_fd, int wake_fd, int port,
                         PsTcpServerOptions options)
    : registry_(registry),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      options_(options) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

PsTcpServer::~PsTcpServer() {
  Shutdown();
  close(listen_fd_);
  close(wake_fd_);
}

void PsTcpServer::Shutdown() {
  if (stop_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  accept_thread_.join();
  {
    absl::MutexLock l(&mu_);
    shut_down_ = true;
    // Only Reap closes a connection's fd (after joining its thread), so
    // every fd here is still open.
    for (const auto& c : conns_) shutdown(c->fd, SHUT_RDWR);
  }
  Reap(/*all=*/true);
}

int64_t PsTcpServer::rejected_connections() const {
  absl::MutexLock l(&mu_);
  return rejected_;
}

std::string PsTcpServer::last_rejection() const {
  absl::MutexLock l(&mu_);
  return last_rejection_;
}

int PsTcpServer::connections() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const auto& c : conns_) n += c->done.load() ? 0 : 1;
  return n;
}

void PsTcpServer::Reject(const std::string& why) {
  {
    absl::MutexLock l(&mu_);
    ++rejected_;
    last_rejection_ = why;
  }
  if (options_.on_reject) options_.on_reject(why);
}

namespace {

absl::Status CheckSecretLength(uint64_t job, const std::string& secret) {
  if (secret.size() == dataauth::kSecretBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "ps data plane: job %d: data_plane_secret has %d bytes, expected %d", job, secret.size(),
      dataauth::kSecretBytes));
}

}  // namespace

absl::Status PsTcpServer::RegisterSecret(uint64_t job, const std::string& secret,
                                         absl::Time deadline) {
  if (absl::Status s = CheckSecretLength(job, secret); !s.ok()) return s;
  if (options_.secrets_from_coordinator) {
    absl::MutexLock l(&mu_);
    auto set = [this, job] {
      mu_.AssertReaderHeld();
      auto it = secrets_.find(job);
      return shut_down_ || (it != secrets_.end() && it->second.from_coordinator);
    };
    mu_.AwaitWithDeadline(absl::Condition(&set), deadline);
    if (shut_down_) return absl::UnavailableError("ps data plane: shutting down");
    auto it = secrets_.find(job);
    if (it == secrets_.end() || !it->second.from_coordinator) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "ps data plane: job %d: the coordinator has not set this job's data-plane secret at "
          "this server (it sets it when the job starts; is this server in the coordinator's "
          "--ps_addresses, and can the coordinator reach it?)",
          job));
    }
    if (!dataauth::SecretEqual(it->second.secret, secret)) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "ps data plane: job %d: not the data-plane secret the coordinator set for it", job));
    }
    it->second.last_active = std::max(it->second.last_active, Now());
    return absl::OkStatus();
  }
  const absl::Time now = Now();
  absl::MutexLock l(&mu_);
  auto it = secrets_.find(job);
  if (it != secrets_.end()) {
    if (dataauth::SecretEqual(it->second.secret, secret)) {
      it->second.last_active = std::max(it->second.last_active, now);
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrFormat(
        "ps data plane: job %d already has another data-plane secret at this server", job));
  }
  return InsertSecretLocked(job, secret, now, /*from_coordinator=*/false);
}

absl::Status PsTcpServer::SetCoordinatorSecret(uint64_t job, const std::string& secret) {
  if (absl::Status s = CheckSecretLength(job, secret); !s.ok()) return s;
  const absl::Time now = Now();
  absl::MutexLock l(&mu_);
  auto it = secrets_.find(job);
  if (it != secrets_.end()) {
    it->second.secret = secret;
    it->second.from_coordinator = true;
    it->second.last_active = std::max(it->second.last_active, now);
    return absl::OkStatus();
  }
  return InsertSecretLocked(job, secret, now, /*from_coordinator=*/true);
}

void PsTcpServer::ForgetSecret(uint64_t job) {
  absl::MutexLock l(&mu_);
  secrets_.erase(job);
}

absl::Status PsTcpServer::InsertSecretLocked(uint64_t job, const std::string& secret,
                                             absl::Time now, bool from_coordinator) {
  if (secrets_.size() >= options_.max_secrets) {
    // Only a secret idle for secret_idle with no open connection may go
    // (the idlest; a running job's is never dropped).
    std::set<uint64_t> connected;
    for (const auto& c : conns_) {
      if (c->has_job && !c->done.load()) connected.insert(c->job);
    }
    auto victim = secrets_.end();
    for (auto s = secrets_.begin(); s != secrets_.end(); ++s) {
      if (connected.count(s->first) > 0 || now - s->second.last_active < options_.secret_idle) {
        continue;
      }
      if (victim == secrets_.end() || s->second.last_active < victim->second.last_active) {
        victim = s;
      }
    }
    if (victim == secrets_.end()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "ps data plane: job %d: this server holds %d data-plane secrets (its limit), every one "
          "of a job active within the last %s or with an open connection; retry when a job "
          "has ended",
          job, secrets_.size(), absl::FormatDuration(options_.secret_idle)));
    }
    secrets_.erase(victim);
  }
  Secret entry{secret, now};
  entry.from_coordinator = from_coordinator;
  secrets_.emplace(job, std::move(entry));
  return absl::OkStatus();
}

std::string PsTcpServer::SecretOf(uint64_t job) const {
  absl::MutexLock l(&mu_);
  auto it = secrets_.find(job);
  return it == secrets_.end() ? std::string() : it->second.secret;
}

void PsTcpServer::Reap(bool all) {
  std::vector<std::unique_ptr<Conn>> finished;
  {
    const absl::Time now = Now();
    absl::MutexLock l(&mu_);
    auto keep = conns_.begin();
    for (auto& c : conns_) {
      if (all || c->done.load()) {
        // A job's secret counts as active until its last connection ends,
        // not only at its hello (a long connection keeps it alive).
        if (c->has_job) {
          auto it = secrets_.find(c->job);
          if (it != secrets_.end()) it->second.last_active = std::max(it->second.last_active, now);
        }
        finished.push_back(std::move(c));
      } else {
        *keep++ = std::move(c);
      }
    }
    conns_.erase(keep, conns_.end());
  }
  for (auto& c : finished) {
    if (c->thread.joinable()) c->thread.join();
    dataconn::Close(c->io);
  }
}

void PsTcpServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = poll(p, 2, 200);
    Reap(/*all=*/false);
    if (n <= 0 || p[1].revents != 0 || (p[0].revents & POLLIN) == 0) continue;
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    const std::string peer = AddressText(from);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string refused;
    {
      absl::MutexLock l(&mu_);
      if (shut_down_ || static_cast<int>(conns_.size()) >= options_.max_connections) {
        ++rejected_;
        last_rejection_ = absl::StrCat("connection from ", peer, " refused: ", conns_.size(),
                                       " connections open, max_connections is ",
                                       options_.max_connections);
        refused = last_rejection_;
      } else {
        auto conn = std::make_unique<Conn>();
        conn->fd = fd;
        conn->io = dataconn::Plain(fd);
        conn->peer = peer;
        Conn* raw = conn.get();
        conns_.push_back(std::move(conn));
        raw->thread = std::thread([this, raw] {
          Serve(raw);
          raw->done.store(true);
        });
      }
    }
    if (!refused.empty() && options_.tls != nullptr) {
      // No plain-text answer on a TLS port.
      if (options_.on_reject) options_.on_reject(refused);
      close(fd);
    } else if (!refused.empty()) {
      if (options_.on_reject) options_.on_reject(refused);
      // Best effort, never blocking: tell the client why (a challenge, so it
      // sends its hello, then the hello reply).
      uint8_t c[psnet::kChallengeBytes];
      psnet::EncodeChallenge(dataauth::RandomNonce(), c);
      (void)!send(fd, c, sizeof(c), MSG_NOSIGNAL | MSG_DONTWAIT);
      uint8_t r[psnet::kHelloReplyBytes];
      psnet::EncodeHelloReply(static_cast<int32_t>(absl::StatusCode::kResourceExhausted),
                              static_cast<int64_t>(refused.size()), r);
      (void)!send(fd, r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)!send(fd, refused.data(), refused.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
    }
  }
}

void PsTcpServer::Serve(Conn* conn) {
  const std::string from = absl::StrCat("connection from ", conn->peer, ": ");
  // ---- TLS (--data_plane_tls), challenge, then the hello answering it
  const absl::Time accepted = absl::Now();
  const absl::Time hello_deadline = accepted + options_.hello_timeout;
  // Ended at once having sent nothing: a probe, not a refused peer.
  const auto probe = [&] { return absl::Now() - accepted < options_.probe_close; };
  if (options_.tls != nullptr) {
    // Shutdown's shutdown(2) ends the wait.
    absl::StatusOr<dataconn::Conn> tls = dataconn::StartTls(*options_.tls, conn->fd, true);
    absl::Status hs = tls.status();
    if (tls.ok()) {
      conn->io = *tls;  // this thread's; Reap reads it after the join
      hs = dataconn::Handshake(*options_.tls, conn->io, -1, hello_deadline);
    }
    if (!hs.ok() && tls.ok() && dataconn::NothingReceived(conn->io) && probe()) return;
    if (!hs.ok()) {
      Reject(absl::StrCat(from, hs.message()));
      return;
    }
  }
  const dataconn::Conn& fd = conn->io;
  const dataauth::Nonce nonce = dataauth::RandomNonce();
  {
    uint8_t c[psnet::kChallengeBytes];
    psnet::EncodeChallenge(nonce, c);
    iovec iov[1] = {{c, sizeof(c)}};
    if (!psnet::WriteFully(fd, iov, 1, hello_deadline).ok()) {
      if (probe()) return;  // gone at once: a probe
      Reject(absl::StrCat(from, "cannot send the challenge"));
      return;
    }
  }
  uint8_t hb[psnet::kHelloBytes];
  bool nothing = false;
  if (!psnet::ReadFully(fd, hb, sizeof(hb), hello_deadline, nullptr, nullptr, &nothing).ok()) {
    if (nothing && probe()) return;
    Reject(absl::StrCat(from, "closed or silent before its ", psnet::kHelloBytes,
                        "-byte hello"));
    return;
  }
  psnet::Hello hello;
  absl::Status st = psnet::DecodeHello(hb, &hello);
  std::string secret;
  if (st.ok()) {
    // Authenticated before anything is looked up or allocated for it.
    secret = SecretOf(hello.job);
    if (secret.empty()) {
      st = absl::PermissionDeniedError(absl::StrFormat(
          "hello for job %d shard %d: this server has no data-plane secret for job %d (its "
          "workers register it through DataAddress)",
          hello.job, hello.shard, hello.job));
    } else {
      st = psnet::VerifyHello(hb, secret, nonce);
    }
  }
  std::shared_ptr<PsShard> shard;
  if (st.ok()) {
    absl::StatusOr<std::shared_ptr<PsShard>> s =
        registry_->GetShard(hello.job, hello.shard, hello.num_workers, hello.shard_len,
                            hello_deadline);
    if (s.ok()) {
      shard = *std::move(s);
    } else {
      st = s.status();
    }
  }
  if (st.ok()) {
    // An authenticated connection keeps its job's secret (RegisterSecret).
    // Recorded before the reply goes out: a client that read the reply can
    // count on it.
    const absl::Time now = Now();
    absl::MutexLock l(&mu_);
    conn->has_job = true;
    conn->job = hello.job;
    auto it = secrets_.find(hello.job);
    if (it != secrets_.end()) it->second.last_active = std::max(it->second.last_active, now);
  }
  {
    const std::string text(st.message().substr(0, psnet::kMaxErrorBytes));
    uint8_t r[psnet::kHelloReplyBytes];
    psnet::EncodeHelloReply(static_cast<int32_t>(st.code()), static_cast<int64_t>(text.size()),
                            r);
    // Accepted: prove we hold the job's secret too (the client checks it
    // before it sends a frame).
    if (st.ok()) psnet::SignHelloReply(hb, secret, nonce, r);
    iovec iov[2] = {{r, sizeof(r)}, {const_cast<char*>(text.data()), text.size()}};
    // Counted before the answer goes out (a client that read it sees it).
    if (!st.ok()) Reject(absl::StrCat(from, "hello refused: ", st.message()));
    const absl::Status sent = psnet::WriteFully(fd, iov, text.empty() ? 1 : 2,
                                                absl::Now() + options_.hello_timeout);
    if (!st.ok() || !sent.ok()) return;
  }
  const bool wide = hello.wire == WireFormat::kFloat32;
  const std::string where = absl::StrFormat(
      "ps data plane: job %d shard %d (K=%d, %d floats%s)", hello.job, hello.shard,
      hello.num_workers, hello.shard_len,
      wide ? "" : absl::StrCat(", ", WireFormatName(hello.wire), " on the wire"));
  const int64_t bytes_per_value = WireBytesPerFloat(hello.wire);
  const int64_t payload_bytes = hello.shard_len * bytes_per_value;
  std::vector<float> buf;  // the push, then the reduced shard; allocated once
  std::vector<uint16_t> wire16;  // 16-bit values on their way (hello.wire); allocated once

  // ---- requests
  while (!stop_.load()) {
    // Wait for the next request in slices (shutdown, idle timeout).
    const absl::Time idle_until = absl::Now() + options_.idle_timeout;
    absl::Status ready;
    for (;;) {
      if (dataconn::Pending(fd)) break;  // TLS bytes already decrypted
      ready = psnet::WaitFd(fd.fd, POLLIN,
                            std::min(idle_until, absl::Now() + absl::Milliseconds(200)));
      if (ready.ok() || stop_.load() || absl::Now() >= idle_until) break;
    }
    if (!ready.ok()) return;  // idle or shutting down: close
    uint8_t fb[psnet::kFrameBytes];
    bool clean_eof = false;
    const absl::Time frame_deadline = absl::Now() + options_.frame_timeout;
    if (!psnet::ReadFully(fd, fb, sizeof(fb), frame_deadline, &clean_eof).ok()) return;
    Frame f;
    absl::Status bad = psnet::DecodeFrame(fb, &f);
    const Kind kind = static_cast<Kind>(f.kind);
    if (bad.ok()) {
      const bool pushes = kind == Kind::kPush || kind == Kind::kRound;
      if (!pushes && kind != Kind::kPull) {
        bad = absl::InvalidArgumentError(absl::StrCat(
            where, ": frame kind ", f.kind, " (", psnet::KindName(f.kind),
            "), expected PUSH, PULL or ROUND"));
      } else if (f.job != hello.job) {
        bad = absl::InvalidArgumentError(absl::StrCat(
            where, ": ", psnet::KindName(f.kind), " names job ", f.job,
            ", but this connection's hello named job ", hello.job));
      } else if (f.chunk != 0) {
        bad = absl::InvalidArgumentError(absl::StrCat(
            where, ": ", psnet::KindName(f.kind), " names chunk ", f.chunk,
            ", expected 0 (one bucket per shard)"));
      } else if (f.worker < 0 || f.worker >= hello.num_workers) {
        bad = absl::InvalidArgumentError(absl::StrCat(
            where, ": ", psnet::KindName(f.kind), " from worker ", f.worker,
            ", expected a worker in [0, ", hello.num_workers, ")"));
      } else if (f.len != (pushes ? payload_bytes : 0)) {
        bad = absl::InvalidArgumentError(absl::StrCat(
            where, ": ", psnet::KindName(f.kind), " (step ", f.step, ", worker ", f.worker,
            ") carries ", f.len, " payload bytes, expected ", pushes ? payload_bytes : 0,
            pushes ? (wide ? " (the shard's length x 4)" : " (the shard's length x 2)") : ""));
      }
    }
    if (!bad.ok()) {
      // The stream cannot be trusted past a bad header: answer and close.
      Reject(absl::StrCat(from, bad.message()));
      (void)SendError(fd, f, bad, absl::Now() + options_.frame_timeout);
      return;
    }
    if (buf.size() != static_cast<size_t>(hello.shard_len)) buf.resize(hello.shard_len);
    if (!wide && wire16.size() != buf.size()) wire16.resize(buf.size());
    absl::Status s;
    if (kind != Kind::kPull) {
      void* into = wide ? static_cast<void*>(buf.data()) : static_cast<void*>(wire16.data());
      if (!psnet::ReadFully(fd, into, static_cast<size_t>(payload_bytes), frame_deadline).ok()) {
        return;
      }
      if (!wide) Decode16(hello.wire, wire16.data(), hello.shard_len, buf.data());
      s = shard->Push(f.job, f.step, f.worker, buf, f.count);
      if (s.ok()) registry_->CountPush(payload_bytes + static_cast<int64_t>(sizeof(int64_t)));
      if (kind == Kind::kPush) {
        Frame ack;
        ack.kind = static_cast<uint32_t>(Kind::kAck);
        ack.job = f.job;
        ack.step = f.step;
        ack.worker = f.worker;
        const absl::Status sent = s.ok() ? SendFrame(fd, ack, nullptr, frame_deadline)
                                         : SendError(fd, f, s, frame_deadline);
        if (!sent.ok()) return;
        continue;
      }
    }
    int64_t total = 0;
    if (s.ok()) {
      // Wait for the step's other pushes, in slices: a client that hung up
      // (its job was cancelled) or a shutdown ends the wait early.
      const absl::Duration wait =
          std::clamp(absl::Microseconds(f.wait_us), absl::ZeroDuration(), psnet::kMaxWait);
      const absl::Time deadline = absl::Now() + wait;
      for (;;) {
        const absl::Time slice = std::min(deadline, absl::Now() + kWaitSlice);
        s = shard->Pull(f.job, f.step, f.worker, absl::MakeSpan(buf), &total, slice);
        if (s.code() != absl::StatusCode::kDeadlineExceeded || slice >= deadline) break;
        if (stop_.load() || ClientGone(fd.fd)) return;
      }
    }
    absl::Status sent;
    if (s.ok()) {
      Frame r;
      r.kind = static_cast<uint32_t>(Kind::kResult);
      r.job = f.job;
      r.step = f.step;
      r.worker = f.worker;
      r.count = total;
      r.len = payload_bytes;
      // Counted when answered, before the send, as the gRPC handler counts
      // before gRPC sends its reply: counted after, a client (or test) that
      // has its result could still read the old count.
      registry_->CountPull(payload_bytes + static_cast<int64_t>(sizeof(int64_t)));
      // A 16-bit wire gets the float32 sum rounded once: every worker
      // decodes the same bits.
      if (!wide) Encode16(hello.wire, buf.data(), hello.shard_len, wire16.data());
      sent = SendFrame(fd, r, wide ? static_cast<const void*>(buf.data()) : wire16.data(),
                       absl::Now() + options_.frame_timeout);
    } else {
      sent = SendError(fd, f, s, absl::Now() + options_.frame_timeout);
    }
    if (!sent.ok()) return;
  }
}

}  // namespace lockstep
