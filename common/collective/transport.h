// Point-to-point message transport used by the collective algorithms
// (ring all-reduce). Gloo-style: a Transport is one rank's endpoint in a group
// of world_size() ranks; it sends tagged byte messages to peers and receives
// the message it expects from a given peer. The algorithms only see this
// interface; the in-process hub (inproc_transport.h) and a gRPC transport
// (worker/) implement it, and collective_conformance.h is the test suite every
// implementation must pass.
//
// Matching semantics (every implementation must provide exactly these; the
// Mailbox in mailbox.h implements them and may be reused):
//   * Messages from one peer to one receiver are delivered in the order the
//     sender's Send calls returned (per-peer FIFO). There is no ordering
//     between different senders.
//   * Recv(from, key, out, deadline) looks at the NEXT message from `from`:
//       - same key and exactly out.size() bytes: it is consumed and copied out;
//       - a STALE message (same job, strictly smaller step): it is a leftover
//         of an aborted earlier collective; it is discarded (counted) and the
//         next message is examined;
//       - any other key: InternalError naming the receiver, the peer, the
//         expected key and the actual key. The message is NOT consumed (a
//         message of a newer step stays for the collective it belongs to);
//       - right key, wrong size: DataLossError naming the peer, the key and
//         both sizes. Not consumed either.
//     So a mix-up is never silent, and a collective that aborts half way does
//     not poison the next step of the same job (its leftovers are stale).
//     Leftovers of a different job are not stale: a Transport serves one job
//     at a time (after an aborted collective, switching jobs needs fresh
//     transports).
//   * No message arrives before the deadline: DeadlineExceededError naming
//     the receiver, the peer and the expected key (and how many stale
//     messages were discarded while waiting).
//
// Error codes:
//   InvalidArgumentError  peer out of range or equal to rank() (a rank never
//                         sends to itself).
//   DeadlineExceededError Recv: nothing matching arrived in time; Send: the
//                         message could not be handed to the transport in
//                         time (flow control).
//   UnavailableError      the link to the peer is broken / the peer is gone
//                         (names the peer).
//   InternalError         key mismatch (see above).
//   DataLossError         size mismatch (see above).
//
// Threading: an implementation must allow one thread calling Send while
// another thread calls Recv on the same endpoint (the in-process and gRPC
// transports are fully thread-safe). Ordering guarantees only hold between
// Send calls that are themselves ordered (e.g. made by one thread).
//
// Wire format: bytes are carried verbatim. Float buffers are sent as their
// native IEEE-754 bytes and int64 counts as native int64 bytes: all ranks must
// share endianness and float format (they run the same binary on x86-64).
#ifndef LOCKSTEP_COMMON_COLLECTIVE_TRANSPORT_H_
#define LOCKSTEP_COMMON_COLLECTIVE_TRANSPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace lockstep {

// Tag carried by every message. (job, step) identify one collective call;
// (phase, chunk) identify the message within it. The meaning of phase and
// chunk is up to the algorithm (see ring_allreduce.h).
struct MessageKey {
  uint64_t job = 0;
  int64_t step = 0;
  int32_t phase = 0;
  int32_t chunk = 0;
};

inline bool operator==(const MessageKey& a, const MessageKey& b) {
  return a.job == b.job && a.step == b.step && a.phase == b.phase &&
         a.chunk == b.chunk;
}
inline bool operator!=(const MessageKey& a, const MessageKey& b) {
  return !(a == b);
}

inline MessageKey MakeKey(uint64_t job, int64_t step, int32_t phase,
                          int32_t chunk) {
  MessageKey k;
  k.job = job;
  k.step = step;
  k.phase = phase;
  k.chunk = chunk;
  return k;
}

// "{job=1 step=7 phase=2 chunk=5}" for error messages.
std::string KeyToString(const MessageKey& key);

// True if `msg` is a leftover of an earlier step of the same job relative to
// `expected` (see the matching semantics above).
inline bool IsStale(const MessageKey& msg, const MessageKey& expected) {
  return msg.job == expected.job && msg.step < expected.step;
}

class Transport {
 public:
  virtual ~Transport() = default;

  // This endpoint's rank in [0, world_size()). Constant.
  virtual int rank() const = 0;
  // Number of ranks in the group (>= 1). Constant.
  virtual int world_size() const = 0;
  // The largest message Send accepts, in bytes; 0 = no limit but memory.
  // Constant. Wrappers forward their inner transport's.
  virtual int64_t max_message_bytes() const { return 0; }

  // Sends `data` to peer `to` tagged with `key`. The transport copies (or
  // finishes reading) `data` before returning, so the caller may reuse the
  // buffer immediately. Send may return before the peer received anything and
  // must NOT wait for the peer to call Recv (algorithms post sends before
  // their receives; a rendezvous Send would deadlock). It may block for local
  // resources (flow control) until `deadline`. Errors: see above.
  virtual absl::Status Send(int to, const MessageKey& key,
                            absl::Span<const uint8_t> data,
                            absl::Time deadline) = 0;

  // Like Send, but the transport may keep reading `data` after returning
  // instead of copying it: the caller must keep the bytes alive and
  // unchanged until its next FlushSends() call returns (whatever it
  // returns). Same ordering and errors as Send; a message sent this way is
  // ordered with plain Sends to the same peer. The default copies (Send).
  virtual absl::Status SendBorrowed(int to, const MessageKey& key,
                                    absl::Span<const uint8_t> data,
                                    absl::Time deadline) {
    return Send(to, key, data, deadline);
  }

  // Ends every borrow of earlier SendBorrowed calls made by this thread's
  // collective: waits until their bytes are handed to the network, and at
  // `deadline` copies whatever is still pending (it is still sent) and
  // returns DeadlineExceededError. After it returns, the transport no longer
  // reads any caller buffer. The default does nothing.
  virtual absl::Status FlushSends(absl::Time deadline) {
    (void)deadline;
    return absl::OkStatus();
  }

  // Receives the next message from peer `from`, which must carry exactly
  // `key` and exactly out.size() bytes, into `out`; waits until `deadline`.
  // On error `out` is unspecified. Errors: see above.
  virtual absl::Status Recv(int from, const MessageKey& key,
                            absl::Span<uint8_t> out, absl::Time deadline) = 0;
};

// Byte views of float buffers (floats travel as their native bytes).
inline absl::Span<const uint8_t> AsBytes(absl::Span<const float> v) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                   v.size() * sizeof(float));
}
inline absl::Span<uint8_t> AsWritableBytes(absl::Span<float> v) {
  return absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(v.data()),
                             v.size() * sizeof(float));
}

// The matching error for the next message from `from` (transport.h
// semantics), or OK when it carries `want` and exactly want_len bytes:
// InternalError "rank R: message from peer P has key {..} (N bytes) but key
// {..} (M bytes) was expected" for another key, DataLossError "rank R:
// message {..} from peer P has N bytes but M were expected" for another
// size. Shared by every implementation so their messages agree.
absl::Status MismatchError(int rank, int from, const MessageKey& got, int64_t got_len,
                           const MessageKey& want, int64_t want_len);

// Returns InvalidArgumentError unless 0 <= peer < world_size and peer != rank.
// `what` is "send to" or "receive from", for the message.
absl::Status CheckPeer(int rank, int world_size, int peer, const char* what);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_TRANSPORT_H_
