// Ring all-reduce (reduce-scatter + all-gather), gloo/baidu style.
//
// The buffer of n floats is cut into K chunks with ChunkBounds(n, K, c)
// (sizes differ by at most one; some are empty when n < K). Rank r sends only
// to its right neighbour r+1 and receives only from its left neighbour r-1
// (mod K). There are 2(K-1) ring steps g:
//
//   step g:  rank r sends chunk (r - g) mod K  and receives chunk (r - g - 1)
//
//   g in [0, K-1)    reduce-scatter: the received chunk is ADDED into the
//                    local copy. After step K-2, rank r holds chunk (r+1)
//                    fully reduced.
//   g in [K-1, 2K-2) all-gather: the received chunk is a fully reduced one;
//                    it is COPIED over the local copy.
//
// Example K = 3 (x_c^r = chunk c of rank r, "a+b" = partial sums):
//
//            rank 0            rank 1            rank 2
//   g=0   send c0 -> 1      send c1 -> 2      send c2 -> 0
//         c2 = x2^0+x2^2    c0 = x0^1+x0^0    c1 = x1^2+x1^1
//   g=1   send c2 -> 1      send c0 -> 2      send c1 -> 0
//         c1 = full         c2 = full         c0 = full
//   g=2   send c1 -> 1      send c2 -> 2      send c0 -> 0      (all-gather)
//   g=3   send c0 -> 1      send c1 -> 2      send c2 -> 0
//
// so chunk c is summed in ring order starting at rank c, and the final sum of
// each chunk is computed exactly once (by rank c-1) and copied bit-for-bit to
// everybody else: every rank ends with identical bits. Each rank sends
// 2(K-1) chunks, i.e. 2(K-1)/K of the buffer.
//
// Pipelining. Every chunk is further cut into segments of seg = segment_bytes
// / 4 floats (the last one shorter; an empty chunk has none). The chunk a rank
// sends at step g+1 is exactly the chunk it received at step g, so each
// segment is forwarded as soon as it has been reduced (or copied):
//
//   send the first W segments of chunk r                  (step 0)
//   for g in 0 .. 2K-3:
//     c = (r - g - 1) mod K
//     for each segment j of chunk c:
//       Recv (g, j) from left; add (g < K-1) or copy (g >= K-1) into grad;
//       if g == 0: send segment W+j of chunk r (step 0), if any
//       if g+1 < 2K-2: Send (g+1, j) to right
//
// Send only copies the bytes into the transport and returns (transport.h
// forbids rendezvous sends), so while this rank reduces segment j its left
// neighbour is already producing segment j+1 and its right neighbour is
// reducing the segment just forwarded: transfers and reductions of
// consecutive segments overlap along the ring and a chunk never waits for the
// whole previous chunk.
//
// Step 0's window. Sending all of chunk r up front would make the transport
// buffer up to a whole chunk per peer (32 MiB for 64 MiB at K = 2) while
// every rank is busy sending, which costs a copy and, with a bounded
// transport queue, can stall every rank at once. So only W segments
// (first_step_window_bytes, 2 MiB by default: less than a loopback socket
// buffer) go first, and each segment received in step 0 releases one more.
// Per-peer FIFO order must stay "all of step 0, then step 1": step-1
// forwards that become ready while step-0 segments are still unsent are
// deferred and sent right after the last step-0 segment (and count). With
// own = segments per chunk, that defers the first own - W - 1 forwards of
// step 1 (for a 64 MiB buffer at K = 2, W = 8 of 128: 119 of them), so
// the step 0 -> 1 hand-over is not pipelined for a large chunk; later
// steps send every segment as soon as it is ready. Every rank receives in
// the order its left neighbour sends.
//
// Zero copy. Segments are sent with SendBorrowed straight from grad: the
// transport may keep reading them after Send returns. That is safe because
// a rank overwrites a segment it sent only with data that has been all the
// way round the ring since, i.e. after its right neighbour received the
// send: chunk x sent at step g is next written at step g + K - 1 with
// data from the left that went through r+1, ..., r-1 after our send. The
// call ends with FlushSends (at once, copying, on an error path), so no
// borrow outlives it.
//
// All-gather segments without a count are received straight into grad (no
// scratch copy). The example count rides along with chunk 0 as a separate
// 8-byte int64 message (key.chunk = kCountChunk) after chunk 0's segments: it
// is summed by ranks 1..K-1 in reduce-scatter (rank 0 starts it) and, like
// the data, broadcast from rank K-1 in all-gather.
//
// Direct exchange (small buffers). The ring needs 2(K-1) message latencies
// one after another; for a few KiB that latency is the whole cost. Instead
// every rank sends one message [int64 count][n floats] to each peer (key:
// phase 0, chunk kDirectChunk), receives one from each, and computes
//   grad = ((x_0 + x_1) + x_2) + ... + x_{K-1},  count = c_0 + ... + c_{K-1}
// in rank order, from the same K inputs on every rank: identical bits
// everywhere. One latency, (K-1)·n floats sent per rank. Messages go to
// r+1, r+2, ... so the K ranks do not all hit rank 0 first.
#include "common/collective/ring_allreduce.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/collective/chunking.h"

namespace lockstep {
namespace {

int64_t NumSegments(int64_t len, int64_t seg) { return (len + seg - 1) / seg; }

}  // namespace

const std::string& RingAllReducer::CallName::str() const {
  if (text_.empty()) {
    text_ = absl::StrFormat("ring all-reduce (job %d step %d, rank %d of %d, n=%d)", o_.job,
                            o_.step, t_.rank(), t_.world_size(), n_);
  }
  return text_;
}

RingAllReducer::RingAllReducer(Transport* transport) : t_(transport) {
  ABSL_RAW_CHECK(t_ != nullptr, "RingAllReducer: transport is null");
}

absl::Status RingAllReducer::AllReduce(absl::Span<float> grad, int64_t* count,
                                       const AllReduceOptions& o) {
  // One deadline for every Send, Recv and the final flush of the call.
  const absl::Time deadline = absl::Now() + o.timeout;
  const CallName where(o, *t_, grad.size());  // formatted only for an error
  absl::Status s = AllReduceBorrowing(grad, count, o, where, deadline);
  // Segments are sent with SendBorrowed straight from grad (and the direct
  // exchange's buffer): end the borrows before the caller may touch them.
  // On failure, at once (what is pending gets copied).
  absl::Status f = t_->FlushSends(s.ok() ? deadline : absl::Now());
  if (s.ok() && !f.ok()) {
    return absl::Status(f.code(), absl::StrCat(where.str(), ": ", f.message()));
  }
  return s;
}

absl::Status RingAllReducer::AllReduceBorrowing(absl::Span<float> grad,
                                                int64_t* count,
                                                const AllReduceOptions& o,
                                                const CallName& where,
                                                absl::Time deadline) {
  const int K = t_->world_size();
  const int r = t_->rank();
  const int64_t n = static_cast<int64_t>(grad.size());
  if (count == nullptr && o.with_count) {
    return absl::InvalidArgumentError(where.str() + ": count is null");
  }
  int64_t no_count = 0;
  if (count == nullptr) count = &no_count;
  if (o.phase_base < 0 || o.phase_base > INT32_MAX - 2 * K) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: phase_base is %d, expected in [0, %d]", where.str(), o.phase_base,
        INT32_MAX - 2 * K));
  }
  if (*count < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: count is %d, expected >= 0", where.str(), *count));
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: timeout is %s, expected > 0", where.str(),
                        absl::FormatDuration(o.timeout)));
  }
  if (o.segment_bytes < static_cast<int64_t>(sizeof(float)) ||
      o.segment_bytes > kMaxSegmentBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: segment_bytes is %d, expected in [%d, %d]", where.str(),
        o.segment_bytes, sizeof(float), kMaxSegmentBytes));
  }
  if (o.direct_max_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: direct_max_bytes is %d, expected >= 0", where.str(),
        o.direct_max_bytes));
  }
  if (o.first_step_window_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: first_step_window_bytes is %d, expected >= 0", where.str(),
        o.first_step_window_bytes));
  }
  if (K == 1) return absl::OkStatus();
  const bool direct =
      o.algorithm == AllReduceAlgorithm::kDirect ||
      (o.algorithm == AllReduceAlgorithm::kAuto &&
       (n + 2) * static_cast<int64_t>(sizeof(float)) <= kMaxSegmentBytes &&
       (K - 1) * n * static_cast<int64_t>(sizeof(float)) <= o.direct_max_bytes);
  if (direct) return Direct(grad, count, o, where, deadline);

  const int64_t seg = o.segment_bytes / static_cast<int64_t>(sizeof(float));
  seg_base_.resize(K + 1);
  int64_t total_segments = 0;
  int64_t max_seg = 0;
  for (int c = 0; c < K; ++c) {
    seg_base_[c] = static_cast<int32_t>(total_segments);
    const int64_t len = ChunkBounds(n, K, c).size();
    total_segments += NumSegments(len, seg);
    max_seg = std::max(max_seg, std::min(len, seg));
    if (total_segments > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d floats in segments of %d bytes need more than 2^31-1 "
          "segments; use a larger segment_bytes",
          where.str(), n, o.segment_bytes));
    }
  }
  seg_base_[K] = static_cast<int32_t>(total_segments);
  if (static_cast<int64_t>(scratch_.size()) < max_seg) scratch_.resize(max_seg);
  const bool packed = o.wire != WireFormat::kFloat32;
  if (packed) {
    if (static_cast<int64_t>(wire_.size()) < n) wire_.resize(n);
    if (static_cast<int64_t>(scratch16_.size()) < max_seg) scratch16_.resize(max_seg);
  }

  const int left = (r - 1 + K) % K;
  const int right = (r + 1) % K;
  const int steps = 2 * (K - 1);
  int64_t count_acc = *count;
  const bool counted = o.with_count;

  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(where.str(), ": ", s.message()));
  };
  auto segment = [&](int c, int64_t j) {
    const Range cb = ChunkBounds(n, K, c);
    const int64_t b = cb.begin + j * seg;
    return grad.subspan(b, std::min(cb.end, b + seg) - b);
  };
  auto key = [&](int g, int32_t chunk) {
    return MakeKey(o.job, o.step, o.phase_base + g, chunk);
  };
  // Sends segment j of chunk c at ring step g (borrowed, see the top). On a
  // 16-bit wire from the encoded image wire_ (same positions as grad, so
  // the borrow argument holds for it too): partial sums (g < K-1) and the
  // completed chunk (g = K-1, which this rank also rounds for itself) are
  // encoded now; later all-gather steps forward the bytes received.
  auto send_segment = [&](int g, int c, int64_t j) -> absl::Status {
    absl::Span<float> s = segment(c, j);
    const MessageKey k = key(g, seg_base_[c] + static_cast<int32_t>(j));
    if (!packed) return t_->SendBorrowed(right, k, AsBytes(s), deadline);
    uint16_t* w = wire_.data() + (s.data() - grad.data());
    if (g <= K - 1) {
      Encode16(o.wire, s.data(), static_cast<int64_t>(s.size()), w);
      if (g == K - 1) Decode16(o.wire, w, static_cast<int64_t>(s.size()), s.data());
    }
    return t_->SendBorrowed(
        right, k,
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(w), s.size() * 2),
        deadline);
  };
  bool first_recv = true;
  // Recv, timing the call's first one (options.peer_wait_seconds).
  auto recv = [&](const MessageKey& k, absl::Span<uint8_t> out) {
    if (!first_recv || o.peer_wait_seconds == nullptr) {
      return t_->Recv(left, k, out, deadline);
    }
    first_recv = false;
    const absl::Time t0 = absl::Now();
    absl::Status s = t_->Recv(left, k, out, deadline);
    *o.peer_wait_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
    return s;
  };
  auto send_count = [&](int g) {
    uint8_t bytes[sizeof(int64_t)];
    std::memcpy(bytes, &count_acc, sizeof(bytes));
    return t_->Send(right, key(g, kCountChunk), bytes, deadline);
  };

  // Step 0: send the first `window` segments of our own chunk r up front;
  // the rest follow one per segment received in step 0 (see the comment at
  // the top). The count (r == 0) follows the last of them.
  const int32_t own = seg_base_[r + 1] - seg_base_[r];
  const int64_t window_segments = std::max<int64_t>(
      1, o.first_step_window_bytes / (seg * static_cast<int64_t>(sizeof(float))));
  int32_t sent0 = 0;
  bool count0_sent = r != 0 || !counted;
  auto send_step0 = [&](int64_t upto) -> absl::Status {
    while (sent0 < std::min<int64_t>(upto, own)) {
      absl::Status s = send_segment(0, r, sent0);
      if (!s.ok()) return s;
      ++sent0;
    }
    if (sent0 == own && !count0_sent) {
      count0_sent = true;
      return send_count(0);
    }
    return absl::OkStatus();
  };
  {
    absl::Status s = send_step0(window_segments);
    if (!s.ok()) return fail(s);
  }
  // Step-1 forwards made while step-0 sends are still going out wait here
  // (segment index j of the chunk) to keep per-peer FIFO order: all of step
  // 0 (and its count), then step 1.
  std::vector<int32_t>& deferred = deferred_;  // reused: no allocation per call
  deferred.clear();
  auto flush_deferred = [&](int c) -> absl::Status {
    for (int32_t j : deferred) {
      absl::Status s = send_segment(1, c, j);
      if (!s.ok()) return s;
    }
    deferred.clear();
    return absl::OkStatus();
  };

  for (int g = 0; g < steps; ++g) {
    const int c = ((r - g - 1) % K + K) % K;
    const bool reduce = g < K - 1;
    const bool forward = g + 1 < steps;
    for (int32_t j = 0; j < seg_base_[c + 1] - seg_base_[c]; ++j) {
      const int32_t id = seg_base_[c] + j;
      absl::Span<float> dst = segment(c, j);
      if (packed) {
        // Partial sums arrive in scratch and are added in float32; a
        // completed chunk arrives in wire_ (forwarded from there as is).
        uint16_t* w = reduce ? scratch16_.data()
                             : wire_.data() + (dst.data() - grad.data());
        absl::Status s = recv(key(g, id),
                              absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(w),
                                                  dst.size() * 2));
        if (!s.ok()) return fail(s);
        const int64_t len = static_cast<int64_t>(dst.size());
        if (reduce) {
          DecodeAdd16(o.wire, w, len, dst.data());
        } else {
          Decode16(o.wire, w, len, dst.data());
        }
      } else if (reduce) {
        absl::Span<float> in(scratch_.data(), dst.size());
        absl::Status s = recv(key(g, id), AsWritableBytes(in));
        if (!s.ok()) return fail(s);
        float* d = dst.data();
        const float* x = in.data();
        for (size_t i = 0; i < dst.size(); ++i) d[i] += x[i];
      } else {
        absl::Status s = recv(key(g, id), AsWritableBytes(dst));
        if (!s.ok()) return fail(s);
      }
      if (g == 0) {
        absl::Status s = send_step0(window_segments + j + 1);
        if (!s.ok()) return fail(s);
        if (sent0 < own || !count0_sent) {
          if (forward) deferred.push_back(j);
          continue;
        }
        s = flush_deferred(c);
        if (!s.ok()) return fail(s);
      }
      if (forward) {
        absl::Status s = send_segment(g + 1, c, j);
        if (!s.ok()) return fail(s);
      }
    }
    if (g == 0) {
      absl::Status s = send_step0(own);
      if (s.ok()) s = flush_deferred(c);
      if (!s.ok()) return fail(s);
    }
    if (counted && c == 0) {
      uint8_t bytes[sizeof(int64_t)];
      absl::Status s = recv(key(g, kCountChunk), bytes);
      if (!s.ok()) return fail(s);
      int64_t v;
      std::memcpy(&v, bytes, sizeof(v));
      if (reduce) {
        if (__builtin_add_overflow(count_acc, v, &count_acc)) {
          return absl::OutOfRangeError(absl::StrFormat(
              "%s: example count overflows int64 adding %d from peer %d",
              where.str(), v, left));
        }
      } else {
        count_acc = v;
      }
      if (forward) {
        s = send_count(g + 1);
        if (!s.ok()) return fail(s);
      }
    }
  }
  if (counted) *count = count_acc;
  return absl::OkStatus();
}

absl::Status RingAllReducer::Direct(absl::Span<float> grad, int64_t* count,
                                    const AllReduceOptions& o,
                                    const CallName& where,
                                    absl::Time deadline) {
  const int K = t_->world_size();
  const int r = t_->rank();
  const size_t n = grad.size();
  const bool packed = o.wire != WireFormat::kFloat32;
  // One slot per rank: the int64 count, then n values (floats, or halves
  // on a 16-bit wire). Slots start on 8-byte boundaries.
  const size_t msg_bytes =
      sizeof(int64_t) + n * static_cast<size_t>(WireBytesPerFloat(o.wire));
  const size_t stride = (msg_bytes + 7) / 8 * 8;
  if (msg_bytes > static_cast<size_t>(kMaxSegmentBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the direct algorithm sends the whole buffer in one message; %d "
        "floats exceed the %d-byte limit (use the ring)",
        where.str(), n, kMaxSegmentBytes));
  }
  uint8_t* base;
  if (packed) {
    if (direct16_.size() < stride * K) direct16_.resize(stride * K);
    base = direct16_.data();
  } else {
    if (direct_.size() * sizeof(float) < stride * K) {
      direct_.resize(stride * K / sizeof(float));
    }
    base = reinterpret_cast<uint8_t*>(direct_.data());
  }
  auto slot = [&](int p) { return base + stride * p; };
  auto floats = [&](int p) { return reinterpret_cast<float*>(slot(p) + sizeof(int64_t)); };
  auto halves = [&](int p) { return reinterpret_cast<uint16_t*>(slot(p) + sizeof(int64_t)); };
  std::memcpy(slot(r), count, sizeof(int64_t));
  if (n > 0) {
    if (packed) {
      Encode16(o.wire, grad.data(), static_cast<int64_t>(n), halves(r));
    } else {
      std::memcpy(floats(r), grad.data(), n * sizeof(float));
    }
  }
  const MessageKey k = MakeKey(o.job, o.step, o.phase_base, kDirectChunk);
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat(where.str(), " (direct): ", s.message()));
  };
  auto bytes = [&](int p) { return absl::Span<uint8_t>(slot(p), msg_bytes); };
  for (int d = 1; d < K; ++d) {
    absl::Status s = t_->SendBorrowed((r + d) % K, k, bytes(r), deadline);
    if (!s.ok()) return fail(s);
  }
  const absl::Time recv_start = absl::Now();
  for (int d = 1; d < K; ++d) {
    const int from = (r - d + K) % K;
    absl::Status s = t_->Recv(from, k, bytes(from), deadline);
    if (!s.ok()) return fail(s);
  }
  if (o.peer_wait_seconds != nullptr) {
    *o.peer_wait_seconds += absl::ToDoubleSeconds(absl::Now() - recv_start);
  }
  int64_t total = 0;
  for (int p = 0; p < K; ++p) {
    int64_t c;
    std::memcpy(&c, slot(p), sizeof(c));
    if (c < 0 || __builtin_add_overflow(total, c, &total)) {
      return absl::OutOfRangeError(absl::StrFormat(
          "%s (direct): example count %d from rank %d is negative or "
          "overflows the int64 total",
          where.str(), c, p));
    }
  }
  float* d = grad.data();
  if (packed) {
    // Every rank sums the same K rounded buffers (its own rounded one too).
    if (n > 0) Decode16(o.wire, halves(0), static_cast<int64_t>(n), d);
    for (int p = 1; p < K; ++p) {
      DecodeAdd16(o.wire, halves(p), static_cast<int64_t>(n), d);
    }
  } else {
    // d = x0 + x1 in one pass (the same bits as copying x0 and adding x1:
    // one float addition per element either way), then + x2, ... in rank
    // order. K >= 2 here.
    const float* x0 = floats(0);
    const float* x1 = floats(1);
    for (size_t i = 0; i < n; ++i) d[i] = x0[i] + x1[i];
    for (int p = 2; p < K; ++p) {
      const float* x = floats(p);
      for (size_t i = 0; i < n; ++i) d[i] += x[i];
    }
  }
  if (o.with_count) *count = total;
  return absl::OkStatus();
}

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name) {
  if (name.empty() || name == "auto") return AllReduceAlgorithm::kAuto;
  if (name == "ring") return AllReduceAlgorithm::kRing;
  if (name == "direct") return AllReduceAlgorithm::kDirect;
  return absl::InvalidArgumentError(
      absl::StrCat("expected auto, ring or direct, got \"", name, "\""));
}

absl::Status RingAllReduce(Transport& t, absl::Span<float> grad,
                           int64_t* count, const AllReduceOptions& options) {
  RingAllReducer reducer(&t);
  return reducer.AllReduce(grad, count, options);
}

}  // namespace lockstep
