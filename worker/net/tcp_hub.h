// The accept side of the raw-TCP peer transport (tcp_transport.h): one
// TcpPeerHub per process listens, sends each inbound connection a fresh
// challenge (a random nonce), reads its 72-byte hello (tcp_wire.h) and hands
// the socket to the TcpInbox of the (group, receiver rank) it names once the
// hello's mac fits that inbox's job secret, or parks it until that inbox
// attaches (ranks may start in any order) and checks the mac then.
//
// Contract:
//   * No connection reaches a TcpInbox (so no frame of it is read) unless
//     its hello carries the HMAC of the hello and this connection's nonce
//     under the inbox's secret (constant-time check). Refusals name the
//     peer's address and what was wrong, and go to options.on_reject (the
//     daemon logs them).
//   * A connection reaches its inbox only after the hub has answered its
//     hello with an accept (tcp_wire.h): the HMAC, under the same secret, of
//     the hello (which carries the connector's own nonce). The connector
//     checks it before it sends a frame, so both ends prove the job's
//     secret.
//   * A connection whose hello is missing, malformed or names a rank /
//     world size that does not fit is closed and counted
//     (rejected_connections, last_rejection naming why); the hub keeps
//     serving.
//   * Hellos are read by the accept thread as they arrive (non-blocking,
//     poll), each connection with its own hello_timeout: a silent or slow
//     connection delays no other. At most max_pending_hellos connections
//     wait for their hello and at most max_parked are parked; one more is
//     closed at once, counted and named (rejected_connections,
//     last_rejection).
//   * Parked connections are closed after park_timeout. Only hellos for a
//     group with no inbox here are parked: a hello for a rank this hub does
//     not hold, of a group it does hold a rank of, has its mac checked at
//     once with that group's secret and is refused either way (wrong mac,
//     or "this worker holds rank S of that group").
//   * TcpInbox: the receive side of one (group, rank); per peer, the FIFO of
//     accepted connections from it (front = the one being read; a reconnect
//     appends) and the reader's position in the byte stream. Its
//     descriptors are closed by the inbox only (Advance, destructor).
// Threading: thread-safe; one accept thread per hub. The hub must outlive
// the transports attached to it.
#ifndef LOCKSTEP_WORKER_NET_TCP_HUB_H_
#define LOCKSTEP_WORKER_NET_TCP_HUB_H_

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/net/data_conn.h"
#include "worker/net/tcp_wire.h"

namespace lockstep {

struct TcpHubOptions {
  // How long an accepted connection may take to send its hello (each
  // connection has its own deadline; hellos are read as they arrive, so a
  // silent connection delays no other).
  absl::Duration hello_timeout = absl::Seconds(5);
  // A connection that ends having sent nothing within this of its accept
  // is a reachability probe (reach_probe.h) or a port check: closed
  // without a refusal. Later it is refused as any silent connection.
  absl::Duration probe_close = absl::Seconds(1);
  // Connections accepted whose hello is not complete yet; one more is
  // closed at once (counted, named).
  int max_pending_hellos = 256;
  // How long a connection for a (group, rank) nobody attached is kept.
  absl::Duration park_timeout = absl::Seconds(60);
  // Parked connections at once; one more is closed at once (counted,
  // named). A job of K ranks parks at most K-1 per rank that starts late.
  int max_parked = 1024;
  // Parked connections from one source address (host, any port) at once;
  // one more is closed at once (counted, named). A stranger who can reach
  // the port cannot take every park slot with hellos for made-up groups: a
  // peer worker parks at most one connection per rank of its that calls a
  // rank here not attached yet.
  int max_parked_per_source = 64;
  // Called with the reason of every refused connection ("connection from
  // 10.0.0.7:51234: ..."), outside the hub's locks, from the accept thread
  // or a transport's Create. Empty: not reported (still counted).
  std::function<void(const std::string&)> on_reject;
  // --data_plane_tls: every connection, accepted or made by a transport on
  // this hub, is a mutual TLS session (common/net/data_conn.h) before the
  // challenge; null: plain TCP. The handshake counts against hello_timeout.
  std::shared_ptr<const dataconn::DataTls> tls;
};

// Receive side of one (group, rank): for each peer, the queue of accepted
// connections from it (front = the one being read; a reconnect appends) and
// the reader's position in the byte stream.
class TcpInbox {
 public:
  struct InLink {
    absl::Mutex read_mu;  // held by the one Recv reading this link
    uint8_t hdr[tcpwire::kHeaderBytes] ABSL_GUARDED_BY(read_mu);
    size_t hdr_got ABSL_GUARDED_BY(read_mu) = 0;
    int64_t skip_left ABSL_GUARDED_BY(read_mu) = 0;
  };

  TcpInbox(uint64_t group, int rank, int world, int wake_fd, std::string secret)
      : group(group), rank(rank), world(world), wake_fd(wake_fd),
        secret(std::move(secret)), fds_(world) {
    for (int i = 0; i < world; ++i) links.push_back(std::make_unique<InLink>());
  }
  ~TcpInbox() {
    for (auto& q : fds_) {
      for (dataconn::Conn& c : q) dataconn::Close(c);
    }
    close(wake_fd);
  }

  // At most this many connections from one peer wait in its queue (the one
  // being read and the peer's reconnects); one more is refused, so a peer
  // that keeps connecting cannot exhaust this process's descriptors.
  static constexpr size_t kMaxQueuedPerPeer = 8;
  enum class Delivery { kQueued, kShutDown, kFull };
  // Hub: a connection from `from` arrived. Unless kQueued the caller owns
  // (and closes) c.
  Delivery Deliver(int from, dataconn::Conn c) {
    absl::MutexLock l(&mu_);
    if (shut_down_) return Delivery::kShutDown;
    if (fds_[from].size() >= kMaxQueuedPerPeer) return Delivery::kFull;
    fds_[from].push_back(c);
    return Delivery::kQueued;
  }

  // Waits for a connection from `from`; returns it, or an error.
  absl::StatusOr<dataconn::Conn> Current(int from, absl::Time deadline) {
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
    dataconn::Close(q.front());
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
    if (!fds_[from].empty()) shutdown(fds_[from].front().fd, SHUT_RDWR);
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
  const std::string secret;  // the job's data-plane secret (never logged)
  std::vector<std::unique_ptr<InLink>> links;

 private:
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::deque<dataconn::Conn>> fds_ ABSL_GUARDED_BY(mu_);
};

// Accepts the peer connections of every TcpTransport in the process.
// Thread-safe. Must outlive the transports attached to it.
class TcpPeerHub {
 public:
  // Listens on host:port (port 0: chosen by the OS; host "0.0.0.0" for every
  // interface; an IPv6 host may be bracketed, "[::1]", as in addresses). Errors: InvalidArgumentError (host), UnavailableError
  // (socket/bind/listen failed, with errno text).
  static absl::StatusOr<std::unique_ptr<TcpPeerHub>> Start(
      const std::string& host, int port, TcpHubOptions options = {});
  ~TcpPeerHub();  // stops accepting, closes parked connections
  TcpPeerHub(const TcpPeerHub&) = delete;
  TcpPeerHub& operator=(const TcpPeerHub&) = delete;

  int port() const { return port_; }
  // The TLS context of this hub's connections (null: plain TCP).
  const dataconn::DataTls* tls() const { return options_.tls.get(); }
  // Connections closed because their hello was missing, malformed or named
  // a rank / world size that does not fit; the last reason, for tests and
  // status pages.
  int64_t rejected_connections() const;
  std::string last_rejection() const;
  // Connections waiting for their transport to attach.
  int parked_connections() const;
  // Connections whose hello has not arrived yet.
  int pending_hellos() const { return pending_hellos_.load(); }

 private:
  friend class TcpTransport;
  struct Parked {
    uint64_t group;
    int to;
    int from;
    int world;
    dataconn::Conn conn;
    absl::Time since;
    // Checked against the inbox's secret when it attaches.
    std::array<uint8_t, tcpwire::kHelloBytes> hello;
    dataauth::Nonce nonce;
    std::string peer;
  };

  TcpPeerHub(int listen_fd, int wake_fd, int port, TcpHubOptions options);
  // Registers the receive side of (group, rank); claims parked connections.
  // AlreadyExistsError if (group, rank) is attached.
  absl::Status Attach(const std::shared_ptr<TcpInbox>& inbox);
  void Detach(const TcpInbox* inbox);
  // A connection whose hello is not complete yet (accept thread only).
  struct PendingHello {
    dataconn::Conn conn;
    bool handshaking = false;  // TLS handshake not done yet
    bool want_write = false;   // it waits for room to write
    uint8_t buf[tcpwire::kHelloBytes];
    size_t got;
    absl::Time deadline;
    absl::Time accepted;    // for options_.probe_close
    dataauth::Nonce nonce;  // the challenge sent on accept
    std::string peer;       // "host:port" of the connecting side
  };
  void AcceptLoop();
  // Reads what `p`'s socket has; true when p is done with (handed on or
  // rejected).
  bool ReadHello(PendingHello& p);
  // Sends p's challenge; false if it could not (p rejected).
  bool SendChallenge(PendingHello& p);
  // p ended unused within options_.probe_close of its accept.
  bool ClosedAtOnce(const PendingHello& p) const;
  void HandleHello(PendingHello& p);
  // Answers a verified hello with its accept (tcp_wire.h), then hands the
  // connection to `inbox`; closes it (and says why, empty when not
  // counted as a refusal) if the accept cannot be written or the inbox
  // refuses it. Not with mu_ held. The accept goes out before the inbox can
  // read the connection (a TLS session is never used by two threads), and a
  // connector sends no frame before it has the accept, so a connection
  // delivered out of arrival order carries no frame yet.
  std::string AcceptAndDeliver(TcpInbox& inbox, const uint8_t* hello,
                               const dataauth::Nonce& nonce, int from, dataconn::Conn conn);
  // Counts, reports (options_.on_reject) and closes. Not with mu_ held.
  void Reject(dataconn::Conn& c, const std::string& peer, const std::string& why);
  void Report(const std::vector<std::string>& reasons) const;

  const int listen_fd_;
  const int wake_fd_;  // eventfd: wakes the accept loop on destruction
  const int port_;
  const TcpHubOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::pair<uint64_t, int>, std::shared_ptr<TcpInbox>> inboxes_
      ABSL_GUARDED_BY(mu_);
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_rejection_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::atomic<int> pending_hellos_{0};
  std::thread accept_thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_HUB_H_
