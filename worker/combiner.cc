#include "worker/combiner.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace lockstep {

std::vector<Range> PlanGradBuckets(int64_t n, absl::Span<const int64_t> piece_starts,
                                   int64_t bucket_floats) {
  if (bucket_floats <= 0 || n <= 0) return {Range{0, std::max<int64_t>(n, 0)}};
  std::vector<Range> buckets;
  Range cur{n, n};  // grows downwards
  auto add = [&](int64_t begin) {
    if (begin >= cur.begin) return;  // empty piece (or out of order): skip
    if (cur.size() > 0 && cur.end - begin > bucket_floats) {
      buckets.push_back(cur);
      cur = Range{cur.begin, cur.begin};
    }
    cur.begin = begin;
  };
  for (int64_t s : piece_starts) add(std::clamp<int64_t>(s, 0, n));
  add(0);
  buckets.push_back(cur);
  return buckets;
}

absl::Status GradientCombiner::CombineBucket(const BucketCall& call, absl::Span<float> data,
                                             int64_t* count, double* peer_wait_seconds) {
  (void)peer_wait_seconds;
  if (call.num_buckets != 1 || call.wire != WireFormat::kFloat32 || !call.with_count) {
    return absl::UnimplementedError(
        "this combiner combines one float32 bucket per step only");
  }
  const absl::Duration left = call.deadline - absl::Now();
  if (left <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "combine of job %d step %d: deadline passed before it started", call.job, call.step));
  }
  return Combine(call.job, call.step, data, count, left);
}

absl::Status RingCombiner::CheckDirectFits(size_t floats, WireFormat wire) const {
  if (algorithm_ != AllReduceAlgorithm::kDirect || world_ < 2) return absl::OkStatus();
  // The direct message: the count, then the values (ring_allreduce.cc),
  // at most kMaxSegmentBytes on any transport and at most the transport's
  // own limit.
  int64_t limit = kMaxSegmentBytes;
  if (max_message_bytes_ > 0) limit = std::min(limit, max_message_bytes_);
  const int64_t bytes = static_cast<int64_t>(sizeof(int64_t)) +
                        static_cast<int64_t>(floats) * WireBytesPerFloat(wire);
  if (bytes <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "spec.ring_algorithm: direct sends each gradient buffer in one message of %d bytes, "
      "more than the %d bytes one direct message may hold on this transport: use ring (or "
      "auto), or overlap buckets (spec.bucket_bytes) small enough to fit",
      bytes, limit));
}

absl::Status RingCombiner::Combine(uint64_t job, int64_t step, absl::Span<float> buffer,
                                   int64_t* count, absl::Duration timeout) {
  if (absl::Status s = CheckDirectFits(buffer.size(), WireFormat::kFloat32); !s.ok()) return s;
  AllReduceOptions o;
  o.job = job;
  o.step = step;
  o.timeout = timeout;
  o.algorithm = algorithm_;
  return reducer_.AllReduce(buffer, count, o);
}

absl::Status RingCombiner::CombineBucket(const BucketCall& call, absl::Span<float> data,
                                         int64_t* count, double* peer_wait_seconds) {
  if (absl::Status s = CheckDirectFits(data.size(), call.wire); !s.ok()) return s;
  AllReduceOptions o;
  o.job = call.job;
  o.step = call.step;
  o.timeout = call.deadline - absl::Now();
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "ring all-reduce (job %d step %d, bucket %d of %d): deadline passed before it "
        "started",
        call.job, call.step, call.bucket, call.num_buckets));
  }
  o.algorithm = algorithm_;
  o.wire = call.wire;
  o.with_count = call.with_count;
  o.phase_base = call.bucket * 2 * world_;
  o.peer_wait_seconds = peer_wait_seconds;
  absl::Status s = reducer_.AllReduce(data, call.with_count ? count : nullptr, o);
  if (s.ok() || call.num_buckets == 1) return s;
  return absl::Status(s.code(), absl::StrFormat("bucket %d of %d [%d, %d): %s", call.bucket,
                                                call.num_buckets, call.range.begin,
                                                call.range.end, s.message()));
}

absl::Status PsCombiner::Connected(int64_t n) {
  if (!shards_.empty() && n_ == n) return absl::OkStatus();
  auto shards = connect_(n);
  if (!shards.ok()) return shards.status();
  shards_ = *std::move(shards);
  n_ = n;
  return absl::OkStatus();
}

absl::Status PsCombiner::Combine(uint64_t job, int64_t step, absl::Span<float> buffer,
                                 int64_t* count, absl::Duration timeout) {
  if (absl::Status s = Connected(static_cast<int64_t>(buffer.size())); !s.ok()) return s;
  PsAllReduceOptions o;
  o.job = job;
  o.step = step;
  o.worker = rank_;
  o.timeout = timeout;
  return PsAllReduce(shards_, buffer, count, o);
}

absl::StatusOr<std::vector<Range>> PsCombiner::PlanBuckets(
    int64_t n, absl::Span<const int64_t> piece_starts, int64_t bucket_floats) {
  (void)piece_starts;
  if (bucket_floats <= 0) return std::vector<Range>{Range{0, n}};
  if (absl::Status s = Connected(n); !s.ok()) return s;
  const int shards = static_cast<int>(shards_.size());
  std::vector<Range> buckets;
  for (int s = shards - 1; s >= 0; --s) buckets.push_back(ShardBounds(n, shards, s));
  return buckets;
}

absl::Status PsCombiner::CombineBucket(const BucketCall& call, absl::Span<float> data,
                                       int64_t* count, double* peer_wait_seconds) {
  if (absl::Status s = Connected(call.buffer_size); !s.ok()) return s;
  const int shards = static_cast<int>(shards_.size());
  const absl::Duration left = call.deadline - absl::Now();
  // Formatted only for an error (no allocation on a step's hot path).
  auto where = [&] {
    return absl::StrFormat("ps all-reduce (job %d step %d, worker %d, %d shards)", call.job,
                           call.step, rank_, shards);
  };
  if (left <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(where() + ": deadline passed before it started");
  }
  if (call.num_buckets == 1) {
    PsAllReduceOptions o;
    o.job = call.job;
    o.step = call.step;
    o.worker = rank_;
    o.timeout = left;
    o.wire = call.wire;
    int64_t c = *count;
    absl::Status s = PsAllReduce(shards_, data, &c, o);
    if (s.ok() && call.with_count) *count = c;
    return s;
  }
  // Bucket b is shard S-1-b (PlanBuckets).
  const int s = shards - 1 - call.bucket;
  if (call.num_buckets != shards || s < 0 || !(call.range == ShardBounds(call.buffer_size, shards, s))) {
    return absl::InternalError(absl::StrFormat(
        "%s: bucket %d of %d [%d, %d) is not a shard of the plan", where(), call.bucket,
        call.num_buckets, call.range.begin, call.range.end));
  }
  // StartRound/FinishRound: a push then a pull, which a client may send as
  // one message (the raw-TCP ps data plane does).
  if (absl::Status st =
          shards_[s]->StartRound(call.job, call.step, rank_, data, *count, call.deadline,
                                 call.wire);
      !st.ok()) {
    return absl::Status(st.code(), absl::StrFormat("%s: push to shard %d: %s", where(), s,
                                                   st.message()));
  }
  int64_t total = 0;
  const absl::Time t0 = absl::Now();
  absl::Status st =
      shards_[s]->FinishRound(call.job, call.step, rank_, data, &total, call.deadline,
                              call.wire);
  if (peer_wait_seconds != nullptr) *peer_wait_seconds += absl::ToDoubleSeconds(absl::Now() - t0);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrFormat("%s: pull from shard %d: %s", where(), s,
                                                   st.message()));
  }
  if (call.with_count) *count = total;
  return absl::OkStatus();
}

}  // namespace lockstep
