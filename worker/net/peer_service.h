// Receive side of the gRPC peer transport: the lockstep.v1.PeerService
// implementation a worker registers ONCE on its grpc::Server and keeps for
// its whole life, shared by every job the worker runs.
//
// Each job's GrpcTransport (grpc_transport.h) attaches a "group" (id, rank,
// world size, peer addresses) and gets its GroupInbox, whose Mailbox
// (common/collective/mailbox.h) implements the matching semantics of
// transport.h. Incoming streams are routed by their first message's
// (group, from_rank) (peer.proto field 7 and 5); every message is handed to
// the group's Mailbox with Mailbox::Deliver, in the order of its seq (field
// 8): a sender spreads its messages over several streams, and a message that
// overtakes its predecessors is held (no copy: its gRPC slices are kept)
// until they have been delivered.
//
// Messages for a group that is not attached:
//   * a group detached recently (the last kRetiredGroupsRemembered): the
//     stream is rejected with FAILED_PRECONDITION and a line is logged to
//     stderr;
//   * a group never seen: the stream is PARKED (not read, so gRPC flow
//     control pushes back on the sender) until that group attaches, the
//     sender cancels (its Send deadline / transport shutdown), or Shutdown().
//     This absorbs the start-up race of a job whose ranks attach at slightly
//     different times; a line is logged to stderr.
// A stream that breaks (cancelled, connection dropped) closes its peer in
// the group's Mailbox with UnavailableError, and so does the sender's fin
// message (field 10, sent when its transport shuts down) once every message
// it announces has been delivered: queued messages stay receivable, then
// Recv from that peer fails at once instead of waiting for its deadline. A broken link stays
// broken for the group (messages may have been lost); jobs restart with
// fresh transports.
//
// Copies: the payload arrives as gRPC slices; if it lies in one slice it is
// handed to Mailbox::Deliver directly (one copy); otherwise it is first
// gathered into a per-stream buffer that is reused (two copies): Mailbox has
// no Deliver overload taking fragments, which would make it one copy always.
//
// Threading: gRPC callback API. Reactions run on gRPC's threads and never
// block (Mailbox::Deliver does not wait for receivers). Attach, Detach and
// Shutdown are thread-safe and may be called from any thread.
//
// Lifetime: register with RegisterOn() before building the server. The
// service must outlive the grpc::Server (shut the server down first). Call
// Shutdown() before grpc::Server::Shutdown() so long-lived peer streams are
// finished and the server's shutdown does not wait on them (or pass a
// deadline to grpc::Server::Shutdown).
#ifndef LOCKSTEP_WORKER_NET_PEER_SERVICE_H_
#define LOCKSTEP_WORKER_NET_PEER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/support/slice.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/collective/mailbox.h"
#include "common/collective/progress_mark.h"
#include "common/collective/transport.h"
#include "common/log.h"
#include "proto/peer.grpc.pb.h"

namespace grpc {
class ServerBuilder;
}

namespace lockstep {

// Keepalive / ping settings the peer client channels and the server must
// agree on (gRPC drops connections whose pings the server considers abusive).
struct PeerKeepalive {
  int time_ms = 10000;     // ping an idle connection this often
  int timeout_ms = 5000;   // declare it dead if the ping is not acked
  // Server side: minimum interval between client pings it accepts.
  int min_recv_ping_interval_ms = 1000;
};

// Receive side of the link from one peer: puts the messages of the sender's
// parallel streams back into seq order (peer.proto fields 8 and 9).
// Bounds of the receive side (issue 11): a message may overtake at most
// kMaxHeldGap predecessors (the sender's two streams per peer reorder by a
// few messages; its flow control keeps far fewer in flight), and a link
// holds at most kMaxHeldBytes of overtaking payload; beyond either the
// stream ends with RESOURCE_EXHAUSTED naming the peer, the seq and the
// expected one.
inline constexpr uint64_t kMaxHeldGap = 4096;
inline constexpr int64_t kMaxHeldBytes = int64_t{256} << 20;

struct LinkIn {
  struct Held {  // a message that arrived before its predecessors
    MessageKey key;
    std::vector<grpc::Slice> slices;  // keep the payload's memory alive
    std::vector<absl::Span<const uint8_t>> payload;
  };
  absl::Mutex mu;
  uint64_t next_seq ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, Held> held ABSL_GUARDED_BY(mu);
  int64_t held_bytes ABSL_GUARDED_BY(mu) = 0;
  // From the sender's fin message (0: none yet): how many it sent in all.
  uint64_t fin_total ABSL_GUARDED_BY(mu) = 0;
};

// The receive state of one attached group. Created by Attach, shared by the
// service (routing) and the group's transport.
struct GroupInbox {
  GroupInbox(uint64_t group, int rank, std::vector<std::string> peer_addresses,
             std::shared_ptr<ProgressMark> progress = nullptr)
      : group(group),
        rank(rank),
        peer_addresses(std::move(peer_addresses)),
        progress(std::move(progress)),
        mailbox(rank, static_cast<int>(this->peer_addresses.size())) {
    for (size_t r = 0; r < this->peer_addresses.size(); ++r) {
      links.push_back(std::make_unique<LinkIn>());
    }
  }

  const uint64_t group;
  const int rank;
  // peer_addresses[r] is rank r's PeerService address (entry `rank` is ours).
  const std::vector<std::string> peer_addresses;
  // Touched per message received from any peer of the group (the job's
  // PeerWait mark); nullptr = none.
  const std::shared_ptr<ProgressMark> progress;
  Mailbox mailbox;
  std::vector<std::unique_ptr<LinkIn>> links;  // links[r]: from rank r

  int world_size() const { return static_cast<int>(peer_addresses.size()); }
  // "peer rank 2 (127.0.0.1:4567)" for error messages.
  std::string PeerName(int r) const;
};

class InboundStream;

class PeerServiceImpl final
    : public lockstep::v1::PeerService::WithRawCallbackMethod_Stream<
          lockstep::v1::PeerService::Service> {
 public:
  static constexpr int kRetiredGroupsRemembered = 1024;

  // `logger`: where the service's warnings go (component "peer"; not
  // owned; nullptr = stderr text lines).
  explicit PeerServiceImpl(PeerKeepalive keepalive = PeerKeepalive(),
                           const Logger* logger = nullptr);
  ~PeerServiceImpl() override;
  PeerServiceImpl(const PeerServiceImpl&) = delete;
  PeerServiceImpl& operator=(const PeerServiceImpl&) = delete;

  // Registers this service on `builder` and sets the server-wide channel
  // arguments the peer clients rely on: keepalive permission and timing
  // (PeerKeepalive) and a receive limit that fits kMaxPeerMessageBytes.
  // These arguments apply to every service of that server.
  void RegisterOn(grpc::ServerBuilder& builder);

  // Attaches group `group` as rank `rank` of peer_addresses.size() ranks and
  // resumes streams parked for it. Errors: InvalidArgumentError (rank out of
  // range, no peers), AlreadyExistsError (group attached), FailedPrecondition
  // after Shutdown(). `progress` (optional) is touched per message received
  // for the group, on gRPC's threads.
  absl::StatusOr<std::shared_ptr<GroupInbox>> Attach(
      uint64_t group, int rank, std::vector<std::string> peer_addresses,
      std::shared_ptr<ProgressMark> progress = nullptr);

  // Detaches the group: its Mailbox peers are closed with `reason` (pending
  // and later Recv calls fail with it once queued messages are consumed; new
  // messages are rejected) and later streams for it are rejected. No-op if
  // not attached.
  void Detach(uint64_t group, absl::Status reason);

  // Finishes every open stream with UNAVAILABLE and rejects new ones; closes
  // all attached groups. Idempotent.
  void Shutdown();

  // Counters for tests and monitoring.
  int64_t streams_opened() const;
  int64_t streams_parked() const;    // total ever parked
  int64_t streams_rejected() const;  // finished with an error by us
  // Messages handed to a Mailbox, and how many of them arrived in several
  // gRPC slices (handed over as fragments; no gather copy either way).
  int64_t messages_delivered() const {
    return delivered_.load(std::memory_order_relaxed);
  }
  int64_t messages_fragmented() const {
    return fragmented_.load(std::memory_order_relaxed);
  }
  // Streams parked at once (for a group not attached yet) are capped: one
  // more is finished with RESOURCE_EXHAUSTED naming the cap. Default
  // kMaxParkedStreams; any thread.
  static constexpr int kMaxParkedStreams = 256;
  void SetMaxParkedStreams(int n);
  int streams_parked_now() const;

  // Waits until streams_parked() >= n; false at the deadline (for tests).
  bool AwaitParked(int64_t n, absl::Time deadline) const;
  // The service's logger (also used by the GrpcTransports over it).
  const Logger& logger() const { return log_; }

 private:
  friend class InboundStream;
  enum class Route { kDeliver, kParked, kReject };

  grpc::ServerReadReactor<grpc::ByteBuffer>* Stream(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;

  // Called by a stream on its first message (under the stream's lock).
  Route RouteStream(InboundStream* s, uint64_t group,
                    std::shared_ptr<GroupInbox>* inbox, absl::Status* reject);
  void Unpark(InboundStream* s, uint64_t group);
  void Forget(InboundStream* s);
  void CountRejected();

  const PeerKeepalive keepalive_;
  const Logger log_;
  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, std::shared_ptr<GroupInbox>> groups_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> retired_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> retired_order_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::vector<InboundStream*>> parked_ ABSL_GUARDED_BY(mu_);
  std::set<InboundStream*> live_ ABSL_GUARDED_BY(mu_);
  int64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t parked_total_ ABSL_GUARDED_BY(mu_) = 0;
  int parked_now_ ABSL_GUARDED_BY(mu_) = 0;
  int max_parked_ ABSL_GUARDED_BY(mu_) = kMaxParkedStreams;
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> delivered_{0};
  std::atomic<int64_t> fragmented_{0};
  absl::CondVar idle_;  // signalled when live_ becomes empty
  mutable absl::CondVar parked_cv_;  // signalled when a stream is parked
};

// Largest payload a peer message may carry (gRPC's default receive limit is
// 4 MiB; the ring uses segments of at most kMaxSegmentBytes = 2 MiB).
inline constexpr int64_t kMaxPeerMessageBytes = 4 << 20;

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_PEER_SERVICE_H_
