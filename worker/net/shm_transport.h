// Shared-memory implementation of the collective Transport (common/
// collective/transport.h) for ranks that run on one host: the ring's bytes
// go through a byte ring in /dev/shm per directed link (shm_link.h) instead
// of the kernel's TCP loopback path, which is what NCCL, gloo and Open MPI's
// `vader` do for peers on one machine. A job asks for it with
// `--peer_transport=shm`; the coordinator starts such a job only on workers
// that registered the same hostname.
//
//   ShmTransportOptions o;
//   o.secret = assignment.data_plane_secret();      // names the segments
//   auto t = ShmTransport::Create(group, rank, world, peer_names, o);
//   RingAllReducer((*t).get()).AllReduce(...);
//
// Links: rank r's first Send to p opens segment r->p as its writer, its first
// Recv from p opens p->r as its reader (either process may create it; see
// shm_link.h). The segment names derive from the job's data-plane secret,
// so only the job's members can find them, and the files are the user's own
// with mode 0600.
//
// Wire format: per message a 40-byte frame header (the raw-TCP transport's,
// tcp_wire.h: magic, job, step, phase, chunk, payload length) then the
// payload verbatim, as one byte stream per link.
//
// Sending: Send copies the header and payload into the ring from the
// caller's thread and returns. What does not fit (the ring is full because
// the peer is not reading yet) is copied into the link's backlog, which the
// link's writer thread (started on first use) moves into the ring as the
// peer frees space, so Send never waits for the peer's Recv. Send waits only
// while more than max_queued_bytes are backlogged for that peer (flow
// control), bounded by its deadline. SendBorrowed copies (the default).
//
// Receiving: Recv waits for the next frame header, checks key and size
// (transport.h matching semantics: a mismatched frame is not consumed, a
// stale one is skipped) and copies the payload from the ring straight into
// `out` as it arrives. A Recv that hits its deadline half-way through a
// payload leaves the rest to be skipped by the next Recv.
//
// Errors (all name the peer as "peer rank 2 (host:port)"):
//   InvalidArgumentError  bad peer, bad options;
//   UnavailableError      the segment cannot be made or mapped; the peer
//                         closed its end (a Recv fails once everything it
//                         sent before is consumed);
//   DeadlineExceededError Send: backlog over max_queued_bytes at the
//                         deadline; Recv: no complete message in time (the
//                         message says when the peer never attached to the
//                         link: a rank on another host or with another
//                         /dev/shm never does);
//   InternalError/DataLossError  key / size mismatch, corrupt frame header
//                         or ring indices;
//   PermissionDeniedError / FailedPreconditionError  a segment under the
//                         link's name that is not ours (shm_link.h);
//   CancelledError        the transport was shut down.
// A peer process that dies without closing is noticed by the coordinator
// (heartbeats), which stops the job; the link itself only sees silence.
//
// Threading: all methods are thread-safe; Sends to one peer are serialized
// and Recvs from one peer are serialized. Shutdown() wakes every waiting
// call (CancelledError), closes the receiving links (peers' Sends then
// fail UNAVAILABLE), lets each backlog drain into its ring for up to
// close_timeout, then closes the sending links (peers see the close after
// the bytes already in the ring).
#ifndef LOCKSTEP_WORKER_NET_SHM_TRANSPORT_H_
#define LOCKSTEP_WORKER_NET_SHM_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/progress_mark.h"
#include "common/collective/transport.h"
#include "worker/net/shm_link.h"

namespace lockstep {

struct ShmTransportOptions {
  // The job's data-plane secret (the Assignment's): the segments' names
  // derive from it. Required (dataauth::kSecretBytes bytes).
  std::string secret;
  // Bytes of each directed link's ring: a power of two in [4 KiB, 1 GiB].
  // 4 MiB holds the main job's whole gradient (814 KB) in flight, so the
  // writer thread is not needed for it.
  int64_t ring_bytes = int64_t{4} << 20;
  // Bytes backlogged for one peer above which Send waits (one message is
  // always accepted).
  int64_t max_queued_bytes = int64_t{64} << 20;
  // Before a Recv sleeps on the link's futex it polls for this long (as
  // TcpTransportOptions::recv_spin).
  absl::Duration recv_spin = absl::Microseconds(50);
  // Shutdown: how long the backlogs may take to drain.
  absl::Duration close_timeout = absl::Seconds(5);
  // Touched whenever bytes go into or out of a ring (each link's Write and
  // Consume, shm_link.h: Send, the writer thread, Recv): the job's PeerWait
  // mark, so a wait counts from the last byte moved
  // (common/collective/peer_wait.h). Not owned; must outlive the transport
  // (Shutdown joins the writer threads and closes the links). nullptr = none.
  ProgressMark* progress = nullptr;
};

class ShmTransport final : public Transport {
 public:
  // Rank `rank` of peer_names.size() ranks in group `group`; peer_names[r]
  // names rank r in errors (its worker address). Opens no segment yet.
  // Errors: InvalidArgumentError (rank out of range, secret not
  // dataauth::kSecretBytes long, ring_bytes not a power of two in range).
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(
      uint64_t group, int rank, std::vector<std::string> peer_names,
      ShmTransportOptions options);

  ~ShmTransport() override;  // Shutdown()
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(names_.size()); }

  absl::Status Send(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                    absl::Time deadline) override;
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override;

  // See the header comment. Idempotent.
  void Shutdown();

  // Counters (tests, --stats).
  int64_t messages_sent() const { return sent_.load(); }
  // Sends that did not fit the ring and went (partly) through the backlog.
  int64_t messages_backlogged() const { return backlogged_.load(); }
  int64_t stale_discarded() const { return stale_.load(); }

 private:
  struct OutLink;
  struct InLink;
  ShmTransport(uint64_t group, int rank, std::vector<std::string> names,
               ShmTransportOptions options);

  std::string PeerName(int peer) const;
  absl::Status Named(int peer, const absl::Status& s) const;
  absl::Status RecvLocked(int from, InLink& in, const MessageKey& key, absl::Span<uint8_t> out,
                          absl::Time deadline);
  void WriterLoop(int to);
  // The link from -> to of this group, opened as `side` (shm_link.h).
  absl::StatusOr<std::unique_ptr<ShmLink>> OpenLink(int from, int to, ShmLink::Side side,
                                                    absl::Time deadline);
  static void DropBacklogLocked(OutLink& o);

  const uint64_t group_;
  const int rank_;
  const std::vector<std::string> names_;
  const ShmTransportOptions options_;
  std::vector<std::unique_ptr<OutLink>> out_;  // by peer; fixed size
  std::vector<std::unique_ptr<InLink>> in_;    // by peer; fixed size
  std::atomic<bool> shut_down_{false};
  std::atomic<int64_t> sent_{0};
  std::atomic<int64_t> backlogged_{0};
  std::atomic<int64_t> stale_{0};
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_SHM_TRANSPORT_H_
