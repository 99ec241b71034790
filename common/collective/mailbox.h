// Mailbox: the receive side of one Transport endpoint, implementing the
// matching semantics documented in transport.h (per-peer FIFO, stale-step
// discard, key/size mismatch errors that do not consume, deadlines). The
// in-process hub uses it directly; a network transport can feed it from its
// receive threads (Deliver) and serve Transport::Recv from it (Receive), so
// every transport matches messages identically.
//
// Memory: message buffers are recycled through a small free list (up to
// kMaxPooledBuffers), each as large as the largest message seen so far, so
// a steady stream of messages (of any mix of sizes) allocates nothing and
// touches no fresh page after warm-up. Message::size, not the buffer's
// size, is the message's length.
//
// Thread-safety: all methods are thread-safe. Per-peer order is the order in
// which Deliver calls for that peer return.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_MAILBOX_H_
#define LOCKSTEP_COMMON_COLLECTIVE_MAILBOX_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/transport.h"
#include "common/fifo.h"

namespace lockstep {

class Mailbox {
 public:
  static constexpr int kMaxPooledBuffers = 64;

  // Inbound messages of rank `owner_rank` in a group of `world_size` ranks.
  // Aborts (programming error) unless 0 <= owner_rank < world_size.
  Mailbox(int owner_rank, int world_size);
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Appends a copy of `data` tagged `key` to the stream from peer `from`.
  // Never waits for a receiver. Errors: InvalidArgumentError for a bad peer;
  // after ClosePeer(from, reason) the message is rejected with `reason`'s
  // code (message names the peer).
  absl::Status Deliver(int from, const MessageKey& key,
                       absl::Span<const uint8_t> data);

  // Zero-copy Deliver: queues the message whose bytes are the concatenation
  // of `frags` without copying them. `keep` owns the fragments' memory; the
  // mailbox drops it once the message is received, discarded as stale or
  // rejected (from whichever thread does that). Same errors as Deliver.
  absl::Status DeliverFragments(int from, const MessageKey& key,
                                std::vector<absl::Span<const uint8_t>> frags,
                                std::shared_ptr<const void> keep);

  // Transport::Recv semantics (see transport.h). If the stream from `from`
  // was closed and holds no more messages, returns the close reason's code
  // with a message naming the peer.
  absl::Status Receive(int from, const MessageKey& key, absl::Span<uint8_t> out,
                       absl::Time deadline);

  // Marks the stream from `from` as broken (e.g. the connection dropped).
  // Messages already queued can still be received; after that, Receive
  // returns `reason` immediately instead of waiting. `reason` must be non-OK.
  void ClosePeer(int from, absl::Status reason);

  // Total number of stale messages discarded so far (all peers).
  int64_t stale_discarded() const;

 private:
  struct Message {
    MessageKey key;
    size_t size = 0;             // bytes in the message
    std::vector<uint8_t> bytes;  // owned copy (Deliver), or
    std::vector<absl::Span<const uint8_t>> frags;  // DeliverFragments
    std::shared_ptr<const void> keep;              // owns frags' memory
  };

  // Rejects (naming the peer and key) if `from` is bad or closed.
  absl::Status CheckOpenLocked(int from, const MessageKey& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct PeerStream {
    Fifo<Message> queue;  // keeps its capacity: no allocation per message
    absl::Status closed;  // OK while open
    int64_t stale = 0;    // stale messages discarded from this peer
    MessageKey last_stale;
  };

  void RecycleLocked(std::vector<uint8_t> buf) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int rank_;
  const int world_size_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled on every Deliver and ClosePeer
  std::vector<PeerStream> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint8_t>> pool_ ABSL_GUARDED_BY(mu_);
  size_t largest_message_ ABSL_GUARDED_BY(mu_) = 0;  // bytes; pooled buffers' size
  int64_t stale_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_MAILBOX_H_
