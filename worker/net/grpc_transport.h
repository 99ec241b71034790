// gRPC implementation of the collective Transport (common/collective/
// transport.h) for one job ("group") on one worker.
//
// Object model (worker daemon):
//   * The worker owns ONE grpc::Server and ONE PeerServiceImpl
//     (peer_service.h) registered on it with PeerServiceImpl::RegisterOn, for
//     its whole life; other services share that server.
//   * For each job it creates a GrpcTransport with (group = job id, rank,
//     every rank's PeerService address, the PeerServiceImpl). The transport
//     attaches its group to the service (its receive Mailbox) and lazily
//     opens one long-lived client stream (PeerService.Stream) to each peer it
//     sends to. Destroying (or Shutdown()) the transport detaches the group.
//
//   PeerServiceImpl service;              // once per worker
//   grpc::ServerBuilder b;
//   int port = 0;
//   b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
//   service.RegisterOn(b);
//   std::unique_ptr<grpc::Server> server = b.BuildAndStart();
//   ...
//   auto t = GrpcTransport::Create(&service, job_id, rank, addresses);
//   RingAllReducer(t->get()).AllReduce(...);
//
// Sending: Send encodes the PeerMessage header (peer_wire.h) and copies the
// payload ONCE, into a pooled buffer that becomes the single gRPC slice of
// the message (no protobuf object, no per-element encoding), then queues it
// on one of the peer's streams_per_peer streams (round robin by message
// number, peer.proto `seq`) and returns; gRPC writes it asynchronously (one
// write in flight per stream, the rest queued); the receiver restores the
// order. Send never waits for the peer's Recv; it waits only while more than
// max_queued_bytes are queued on the stream (flow control) or while the
// first connection is being made, both bounded by its deadline.
//
// Receiving: see peer_service.h; Recv is Mailbox::Receive with the error
// prefixed by the peer's rank and address.
//
// Errors (all name the peer as "peer rank 2 (127.0.0.1:4567)"):
//   InvalidArgumentError  bad peer (CheckPeer), payload > kMaxPeerMessageBytes;
//   UnavailableError      cannot connect before min(deadline, connect_timeout)
//                         or the stream to the peer broke (peer process or
//                         server gone, stream rejected); the failed stream is
//                         dropped and the next Send opens a new one;
//   DeadlineExceededError Send: queue still full at the deadline;
//                         Recv: nothing arrived in time;
//   InternalError/DataLossError  key / size mismatch (Mailbox semantics);
//   CancelledError        the transport was shut down.
// Peer-side failures that close our incoming stream from that peer (its
// process died, it shut its transport down) make Recv from it fail at once
// with UnavailableError instead of waiting for the deadline.
//
// Threading: all methods are thread-safe; Sends to one peer are serialized
// (FIFO in the order their Send calls return; a Send waits for a concurrent
// Send to the same peer, itself bounded by its deadline). gRPC's callback
// threads do the writing and reading; this class starts no threads.
// Shutdown() (or the destructor) wakes every waiting Send / Recv (they
// return CancelledError), lets already-queued messages drain for up to
// close_timeout, ends each stream with a fin message (peer.proto
// `fin_total`, so the peer's Recv fails fast once it has consumed
// everything), half-closes the streams, and cancels what is left.
//
// Process settings: on hosts where fresh pages are expensive, the worker's
// main() should keep glibc from returning freed gRPC buffers to the kernel
// (mallopt M_ARENA_MAX 1, M_TRIM_THRESHOLD large, M_MMAP_THRESHOLD 32 MiB;
// see bench/allreduce.cc): without it a 16 MiB all-reduce was 7x slower.
#ifndef LOCKSTEP_WORKER_NET_GRPC_TRANSPORT_H_
#define LOCKSTEP_WORKER_NET_GRPC_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/progress_mark.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/transport.h"
#include "worker/net/peer_service.h"

namespace lockstep {

struct GrpcTransportOptions {
  // Bytes handed to Send but not yet written to the network, per stream
  // (so up to streams_per_peer times this per peer), above which Send waits
  // (one message is always accepted).
  int64_t max_queued_bytes = 16 << 20;
  // Longest time a Send waits for the first connection to a peer (also
  // bounded by the Send deadline).
  absl::Duration connect_timeout = absl::Seconds(10);
  // Shutdown: how long queued messages may take to drain before the streams
  // are cancelled.
  absl::Duration close_timeout = absl::Seconds(5);
  // Parallel streams (each on its own channel, i.e. TCP connection) per
  // peer. Consecutive messages go round robin over them and the receiver
  // restores their order (peer.proto seq), so a message does not wait for
  // the previous one's write to complete: gRPC allows one write in flight
  // per stream, and its completion costs a thread hop.
  int streams_per_peer = 2;
  // Recv first polls its mailbox for up to this long, yielding the CPU
  // between polls (sched_yield), before it blocks on a condition variable.
  // Trades CPU for latency (a blocked thread costs a futex wake-up per
  // message); on the 2-core benchmark host it made things worse, because
  // the spinning thread competes with gRPC's own threads. Zero (default):
  // block at once.
  absl::Duration recv_spin = absl::ZeroDuration();
  // Must match the peers' PeerServiceImpl settings.
  PeerKeepalive keepalive;
  // Extra integer channel arguments for the peer channels (tuning, e.g.
  // GRPC_ARG_HTTP2_BDP_PROBE, GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE).
  std::vector<std::pair<std::string, int>> channel_args;
  // Credentials of the peer channels (common/grpcutil/tls.h); nullptr =
  // plain text.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Touched per message written (a write completed) and per message
  // received for this group: the job's PeerWait mark, so a wait counts from
  // the last message moved (common/collective/peer_wait.h). Shared: gRPC's
  // reactors may run after the transport is gone. nullptr = none.
  std::shared_ptr<ProgressMark> progress;
};

class OutboundStream;
class SendBufferPool;

class GrpcTransport final : public Transport {
 public:
  // Attaches group `group` to `service` as rank `rank` of
  // peer_addresses.size() ranks (peer_addresses[r] = rank r's PeerService
  // address "host:port"; the entry for `rank` itself is not used). `service`
  // is not owned and must outlive the transport. Connections are opened
  // lazily by Send. Errors: those of PeerServiceImpl::Attach.
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Create(
      PeerServiceImpl* service, uint64_t group, int rank,
      std::vector<std::string> peer_addresses,
      GrpcTransportOptions options = GrpcTransportOptions());

  ~GrpcTransport() override;  // Shutdown()
  GrpcTransport(const GrpcTransport&) = delete;
  GrpcTransport& operator=(const GrpcTransport&) = delete;

  int rank() const override { return inbox_->rank; }
  int world_size() const override { return inbox_->world_size(); }
  int64_t max_message_bytes() const override { return kMaxPeerMessageBytes; }
  uint64_t group() const { return inbox_->group; }
  const std::string& peer_address(int r) const {
    return inbox_->peer_addresses[r];
  }

  absl::Status Send(int to, const MessageKey& key,
                    absl::Span<const uint8_t> data,
                    absl::Time deadline) override;
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override;

  // See the header comment. Idempotent; returns when every stream is done
  // (at most about close_timeout plus a few seconds).
  void Shutdown();

 private:
  struct PeerLink;

  GrpcTransport(PeerServiceImpl* service, std::shared_ptr<GroupInbox> inbox,
                GrpcTransportOptions options);

  // Returns open stream `index` to `to`, connecting first if needed. Called
  // with link.mu held.
  absl::StatusOr<std::shared_ptr<OutboundStream>> StreamTo(
      int to, PeerLink& link, int index, absl::Time deadline);
  absl::Status Named(int peer, const absl::Status& s) const;
  bool shut_down() const;

  PeerServiceImpl* const service_;
  const std::shared_ptr<GroupInbox> inbox_;
  const GrpcTransportOptions options_;
  const std::shared_ptr<SendBufferPool> pool_;
  std::vector<std::unique_ptr<PeerLink>> links_;  // one per rank

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Every stream ever opened (for Shutdown).
  std::vector<std::shared_ptr<OutboundStream>> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_GRPC_TRANSPORT_H_
