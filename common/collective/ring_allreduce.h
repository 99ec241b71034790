// Bandwidth-optimal ring all-reduce of a gradient SUM vector plus an example
// COUNT over a Transport (transport.h). After a successful call every rank
// holds the element-wise sum of all ranks' vectors and the sum of all counts,
// with bit-identical floats on every rank; the caller divides by the count
// once (exact full-batch mean even with uneven slices or a rank with 0
// examples).
//
// Algorithm and message layout: see the comment at the top of
// ring_allreduce.cc. In short: reduce-scatter then all-gather over K chunks
// (ChunkBounds from chunking.h), each chunk split into segments of at most
// segment_bytes, pipelined (a segment is forwarded as soon as it is reduced).
// Each rank sends about 2(K-1)/K of the buffer per call.
//
// Small buffers (AllReduceAlgorithm, below) instead take a one-round direct
// exchange whose sum is in rank order ((x_0 + x_1) + x_2) + ... + x_{K-1}.
//
// Determinism (ring): chunk c is summed in the fixed ring order
//   ((x_c + x_{c+1}) + x_{c+2}) + ... + x_{c-1}        (indices mod K)
// by the ranks it passes through, and the fully reduced chunk is then copied
// bit-for-bit to every rank. The result is independent of timing and
// identical on every rank (it may differ in the last bits from another
// summation order, e.g. the parameter-server path's rank order).
//
// Count: travels exactly, as its native int64 bytes, in a separate 8-byte
// message with key.chunk = kCountChunk, sent right after the segments of
// chunk 0 in every ring step that carries chunk 0; it is summed along chunk
// 0's path and broadcast with it.
//
// Message keys: job and step from the options; phase = ring step g in
// [0, 2K-2) (g < K-1: reduce-scatter, else all-gather); chunk = global segment
// index (segments numbered through chunks 0..K-1), or kCountChunk.
//
// All ranks must call with the same job, step, n (= grad.size()) and
// segment_bytes; a disagreement shows up as a key or size mismatch error.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_RING_ALLREDUCE_H_
#define LOCKSTEP_COMMON_COLLECTIVE_RING_ALLREDUCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/transport.h"
#include "common/collective/wire_format.h"

namespace lockstep {

inline constexpr int64_t kDefaultSegmentBytes = 256 << 10;
// The gRPC transport caps messages at 4 MiB; stay well below.
inline constexpr int64_t kMaxSegmentBytes = 2 << 20;
inline constexpr int32_t kCountChunk = -1;
// key.chunk of the direct algorithm's single message per peer.
inline constexpr int32_t kDirectChunk = -2;
// kAuto uses the direct exchange while the bytes it makes each rank send,
// (K-1) x buffer, stay within this (measured with //bench:allreduce on
// loopback: at K = 2 direct wins up to 1 MiB, at K = 4 up to ~256 KiB; see
// the README).
inline constexpr int64_t kDefaultDirectMaxBytes = 1 << 20;

// Ring, step 0: see AllReduceOptions::first_step_window_bytes. Measured
// with //bench:allreduce (README).
inline constexpr int64_t kDefaultFirstStepWindowBytes = 2 << 20;

// kRing: reduce-scatter + all-gather, bandwidth-optimal (each rank sends
// 2(K-1)/K of the buffer) but 2(K-1) message latencies in sequence.
// kDirect: every rank sends its whole buffer (and count) to every other rank
// in one message and sums all K buffers locally in rank order 0..K-1:
// one message latency, (K-1) buffers sent per rank. For small buffers, where
// per-message latency dominates (the choice MPI libraries make too).
// kAuto: kDirect when (K-1) x buffer bytes <= direct_max_bytes (and the
// buffer fits one message), else kRing.
enum class AllReduceAlgorithm { kAuto, kRing, kDirect };

// JobSpec.ring_algorithm: "" or "auto" -> kAuto, "ring", "direct"; else
// InvalidArgumentError "expected auto, ring or direct, got \"x\"".
absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name);

struct AllReduceOptions {
  uint64_t job = 0;
  int64_t step = 0;
  // The whole call (every Send and Recv) must finish within this time.
  absl::Duration timeout = absl::Seconds(60);
  // Pipelining granularity, in [sizeof(float), kMaxSegmentBytes]; rounded
  // down to whole floats.
  int64_t segment_bytes = kDefaultSegmentBytes;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
  int64_t direct_max_bytes = kDefaultDirectMaxBytes;  // for kAuto; >= 0
  // Ring: how much of its own chunk a rank sends before it starts receiving
  // (at least one segment); the rest goes out one segment per segment
  // received. Bounds what the transport must buffer for a slow peer (a
  // whole chunk of a 64 MiB buffer is 32 MiB at K = 2). >= 0.
  int64_t first_step_window_bytes = kDefaultFirstStepWindowBytes;
  // How the gradient floats travel (wire_format.h). kFloat32 is exact. A
  // 16-bit format sends every segment encoded and accumulates in float32:
  // ring: each reduce-scatter hop sends its float32 partial sum rounded to
  // 16 bits and the receiver adds the decoded value in float32; the rank
  // that completes a chunk rounds it once, keeps the rounded value itself
  // and sends those 16-bit values round the all-gather verbatim. Direct:
  // every rank sends its rounded buffer and all ranks sum the K decoded
  // buffers (its own too) in rank order. So every rank still ends with the
  // same float32 bits. The count is always exact.
  WireFormat wire = WireFormat::kFloat32;
  // Added to every message's phase (>= 0): keeps several all-reduces of one
  // step (the buckets of an overlapped combine) apart on the wire. The
  // call uses phases [phase_base, phase_base + 2K - 2).
  int32_t phase_base = 0;
  // false: no count travels and *count is left as is (for the buckets that
  // do not carry the step's count; count may then be null).
  bool with_count = true;
  // Out, when non-null: += the seconds this call spent blocked until peers'
  // data started arriving: the ring's first receive (the left neighbour
  // sends nothing of this buffer before it has it), or the direct
  // exchange's receives from every peer. See worker/combiner.h
  // (CombineTiming::peer_wait_seconds).
  double* peer_wait_seconds = nullptr;
};

// Reusable all-reducer for one transport endpoint. Owns the scratch buffer
// (one segment), sized on first use and reused by later calls, so steady-state
// calls allocate nothing.
//
// Thread-compatible: one call at a time per object; the transport must not be
// used by anyone else during a call. `transport` is not owned and must outlive
// the object.
class RingAllReducer {
 public:
  explicit RingAllReducer(Transport* transport);

  // In place: `grad` becomes the sum over ranks and *count the sum of counts.
  // K = 1 is a no-op. n = 0 and n < K (empty chunks) are fine.
  //
  // Errors (the message names this rank, the job/step and, for transport
  // failures, the peer):
  //   InvalidArgumentError  count null or negative, timeout <= 0,
  //                         segment_bytes out of range, too many segments;
  //                         returned before any communication;
  //   OutOfRangeError       the total count overflows int64;
  //   any Transport error   (DeadlineExceeded, Unavailable, Internal,
  //                         DataLoss): a peer is slow, gone or disagrees.
  // On error `grad` is unspecified (partially reduced) and *count unchanged.
  // Every Send and Recv of the call shares one deadline (start + timeout), so
  // a call never outlives it by more than scheduling delays, whatever the
  // peers do.
  absl::Status AllReduce(absl::Span<float> grad, int64_t* count,
                         const AllReduceOptions& options);

 private:
  // Names the call in errors ("ring all-reduce (job 3 step 41, rank 1 of
  // 2, n=203531)"), formatted at the first str(): a call that succeeds
  // allocates nothing for it.
  class CallName {
   public:
    CallName(const AllReduceOptions& o, const Transport& t, size_t n) : o_(o), t_(t), n_(n) {}
    const std::string& str() const;

   private:
    const AllReduceOptions& o_;
    const Transport& t_;
    const size_t n_;
    mutable std::string text_;
  };

  // AllReduce without the final FlushSends; `where` names the call in
  // errors, `deadline` bounds every Send and Recv.
  absl::Status AllReduceBorrowing(absl::Span<float> grad, int64_t* count,
                                  const AllReduceOptions& o,
                                  const CallName& where,
                                  absl::Time deadline);
  absl::Status Direct(absl::Span<float> grad, int64_t* count,
                      const AllReduceOptions& o, const CallName& where,
                      absl::Time deadline);

  Transport* const t_;
  std::vector<float> direct_;      // direct: K slots [count][n floats]
  std::vector<uint8_t> direct16_;  // direct, 16-bit wire: K slots [count][n halves]
  std::vector<uint16_t> wire_;     // 16-bit wire: encoded image of grad
  std::vector<uint16_t> scratch16_;  // 16-bit wire: receive buffer, one segment
  std::vector<float> scratch_;     // receive buffer for one segment
  std::vector<int32_t> seg_base_;  // first global segment index of chunk c
  std::vector<int32_t> deferred_;  // step-1 forwards waiting for step 0's sends
};

// One-shot convenience: RingAllReducer(&t).AllReduce(...). Allocates a fresh
// scratch segment per call; prefer a long-lived RingAllReducer.
absl::Status RingAllReduce(Transport& t, absl::Span<float> grad,
                           int64_t* count, const AllReduceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_RING_ALLREDUCE_H_
