// Raw-TCP implementation of the collective Transport (common/collective/
// transport.h): the fast peer data plane. The gRPC transport
// (grpc_transport.h) moves the same messages through gRPC's streams and
// thread pool; this one moves them over plain TCP sockets driven by the
// calling thread, which is what MPI and Gloo do. On the 2-core benchmark host
// it is what brings the all-reduce to Open MPI's speed (see the README).
//
// Object model (mirrors the gRPC transport):
//   * One TcpPeerHub per process: a listening socket and one accept thread.
//     The hub sends every inbound connection a random challenge; the
//     connection answers with a 72-byte hello naming (group, sender rank,
//     receiver rank, world size) and an HMAC of it and the challenge under
//     the job's secret (tcp_wire.h); the hub hands the socket to the
//     receiver's transport once the HMAC fits that transport's secret, or
//     parks it (up to park_timeout) until that transport attaches, so ranks
//     may start in any order.
//   * One TcpTransport per (group, rank). Create attaches it to the hub.
//     It opens one outbound connection per peer lazily, on the first Send
//     (so a connection carries bytes one way only: the connector writes,
//     the acceptor reads).
//
//   auto hub = TcpPeerHub::Start("127.0.0.1", 0);       // once per process
//   ... publish "127.0.0.1:" + (*hub)->port() to the other ranks ...
//   auto t = TcpTransport::Create(hub->get(), job_id, rank, addresses);
//   RingAllReducer((*t).get()).AllReduce(...);
//
// Wire format: every message is a 40-byte frame header (magic, flags, job,
// step, phase, chunk, payload length; little-endian, see tcp_wire.h)
// followed by the payload bytes verbatim. No per-element encoding; a Recv
// accepts only the length its caller expects (anything else is an error
// naming the peer, the frame is not consumed).
//
// Sending: Send writes the header and payload with one non-blocking
// sendmsg() from the caller's thread (no copy, no thread hop). Whatever the
// kernel does not take at once (its socket buffer is full because the peer
// is not reading yet) is copied into the link's backlog and written by the
// transport's one writer thread, so Send never waits for the peer's Recv
// (transport.h forbids that: ring all-reduce posts its sends first). Send
// waits only while more than max_queued_bytes are backlogged for that peer
// (flow control) or while connecting, both bounded by its deadline.
// SendBorrowed backlogs a reference instead of a copy; FlushSends (which the
// all-reduce calls before returning) then writes what is left from the
// caller's thread.
//
// Receiving: Recv reads the next frame header of the link from `from`
// directly from its socket, checks key and size (transport.h matching
// semantics: a mismatched frame is not consumed, a stale one is skipped)
// and reads the payload straight into `out`: one copy, kernel to caller,
// again in the caller's thread. A Recv that hits its deadline half-way
// through a payload leaves the rest of that message to be skipped by the
// next Recv (it can never be delivered).
//
// Errors (all name the peer as "peer rank 2 (127.0.0.1:4567)"):
//   InvalidArgumentError  bad peer (CheckPeer), unparsable peer address;
//   UnavailableError      cannot connect (and answer the peer's challenge)
//                         before min(deadline, connect_timeout); the link
//                         broke (also: the peer refused our hello) (send failed,
//                         the peer closed its end: a Recv fails at once
//                         once everything sent before the close is
//                         consumed). A broken outbound link is dropped and
//                         the next Send reconnects; its backlog is lost;
//   DeadlineExceededError Send: backlog still over max_queued_bytes at the
//                         deadline; Recv: no (complete) message in time;
//   InternalError/DataLossError  key / size mismatch (transport.h), or a
//                         corrupt frame header (the link is then closed);
//   CancelledError        the transport was shut down.
//
// Threading: all methods are thread-safe. Sends to one peer are serialized
// (FIFO in the order their Send calls return); Recvs from one peer are
// serialized. Shutdown() (or the destructor) wakes every waiting call (they
// return CancelledError), lets the backlog drain for up to close_timeout,
// then closes the outbound sockets (peers see end-of-stream); inbound ones
// close with the transport. The hub (tcp_hub.h) reads hellos as they
// arrive, each with its own deadline, so a connection that never sends one
// delays no other; pending hellos and parked connections are capped.
#ifndef LOCKSTEP_WORKER_NET_TCP_TRANSPORT_H_
#define LOCKSTEP_WORKER_NET_TCP_TRANSPORT_H_

#include <atomic>
#include <cstdint>
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
#include "absl/types/span.h"
#include "common/collective/progress_mark.h"
#include "common/collective/transport.h"
#include "worker/net/tcp_hub.h"
#include "worker/net/tcp_outbox.h"

namespace lockstep {



struct TcpTransportOptions {
  // The job's data-plane secret (dataauth::kSecretBytes bytes; the
  // coordinator hands it out in the Assignment). Every connection this
  // transport opens answers the acceptor's challenge with an HMAC under it,
  // and every connection it accepts must (tcp_hub.h). Required.
  std::string secret;
  // Bytes backlogged for one peer above which Send waits (one message is
  // always accepted).
  int64_t max_queued_bytes = 64 << 20;
  // Longest time a Send waits for a connection (also bounded by its
  // deadline).
  absl::Duration connect_timeout = absl::Seconds(10);
  // SO_SNDBUF of outbound connections (the kernel doubles it and caps it at
  // net.core.wmem_max); 0 keeps the kernel's autotuning.
  int send_buffer_bytes = 0;
  // While a Recv waits for data it also writes the backlog of every link
  // that has one (and the writer thread stands aside), as MPI's progress
  // engine does: no thread hop per backlogged message. False: only the
  // writer thread writes backlogs.
  bool progress_in_recv = true;
  // Before a Recv sleeps in ppoll it polls its socket for up to this long,
  // yielding the CPU in between (sched_yield), like Open MPI's
  // mpi_yield_when_idle. Zero: sleep at once. 50 us: measured with
  // //bench:allreduce (K = 4 on 2 cores, 64 KiB-1 MiB: 15-30% faster;
  // no change at 16-64 MiB).
  absl::Duration recv_spin = absl::Microseconds(50);
  // Shutdown: how long the backlog may take to drain.
  absl::Duration close_timeout = absl::Seconds(5);
  // Touched whenever a read or write of this transport moves bytes (the
  // job's PeerWait progress: a wait counts from the last byte). Not owned;
  // null = none; must outlive the transport.
  ProgressMark* progress = nullptr;
};

class TcpTransport final : public Transport {
 public:
  // Rank `rank` of peer_addresses.size() ranks in group `group`;
  // peer_addresses[r] = "host:port" of rank r's hub (the entry for `rank` is
  // not used). `hub` is not owned and must outlive the transport.
  // Errors: InvalidArgumentError (rank out of range, unparsable address,
  // options.secret not dataauth::kSecretBytes long),
  // AlreadyExistsError ((group, rank) already attached to the hub),
  // UnavailableError (eventfd / thread creation failed).
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(
      TcpPeerHub* hub, uint64_t group, int rank,
      std::vector<std::string> peer_addresses,
      TcpTransportOptions options = {});

  ~TcpTransport() override;  // Shutdown()
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override {
    return static_cast<int>(addresses_.size());
  }
  uint64_t group() const { return group_; }

  absl::Status Send(int to, const MessageKey& key,
                    absl::Span<const uint8_t> data,
                    absl::Time deadline) override;
  // Zero-copy variant: what the kernel does not take at once stays a
  // reference to `data` in the backlog (transport.h contract).
  absl::Status SendBorrowed(int to, const MessageKey& key,
                            absl::Span<const uint8_t> data,
                            absl::Time deadline) override;
  // Writes borrowed backlog from the calling thread until none is left.
  absl::Status FlushSends(absl::Time deadline) override;
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override;

  // See the header comment. Idempotent.
  void Shutdown();

  // Waits until `count` connections from peer `from` have been accepted
  // (counting ended ones not yet read past). False at the deadline. For
  // tests and start-up barriers.
  bool AwaitInbound(int from, int count, absl::Time deadline);

  // Counters (for tests and the benchmark's --stats).
  int64_t messages_sent() const { return sent_.load(); }
  // Sends that did not fit the socket buffer and went (partly) through the
  // writer thread's backlog.
  int64_t messages_backlogged() const { return outbox_->backlogged(); }
  // Borrowed sends FlushSends had to copy at its deadline.
  int64_t borrows_copied() const { return outbox_->borrows_copied(); }
  int64_t stale_discarded() const { return stale_.load(); }

 private:
  TcpTransport(TcpPeerHub* hub, uint64_t group, int rank,
               std::vector<std::string> addresses,
               std::vector<std::pair<std::string, std::string>> host_ports,
               std::shared_ptr<TcpInbox> inbox, int wake_fd,
               TcpTransportOptions options);

  absl::Status Named(int peer, const absl::Status& s) const;
  absl::Status SendImpl(int to, const MessageKey& key,
                        absl::Span<const uint8_t> data, absl::Time deadline,
                        bool borrow);
  std::string PeerName(int peer) const;
  // Connects link `to` (called with its mutex held).
  absl::Status ConnectLocked(int to, TcpOutLink& link, absl::Time deadline);

  TcpPeerHub* const hub_;
  const uint64_t group_;
  const int rank_;
  const std::vector<std::string> addresses_;
  const std::vector<std::pair<std::string, std::string>> host_ports_;
  const std::shared_ptr<TcpInbox> inbox_;
  const TcpTransportOptions options_;
  const std::unique_ptr<TcpOutbox> outbox_;  // send side, writer thread

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;

  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> stale_{0};
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_TRANSPORT_H_
