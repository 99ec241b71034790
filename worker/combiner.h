// GradientCombiner: how one step's K gradient sums become the same global
// sum on every rank. Ring mode all-reduces among the workers; ps mode goes
// through parameter-server shards. The job runner sees only this interface
// (through StepCombiner, step_combine.h, which overlaps the combine with
// backward in buckets).
#ifndef LOCKSTEP_WORKER_COMBINER_H_
#define LOCKSTEP_WORKER_COMBINER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/chunking.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/ring_allreduce.h"
#include "common/collective/transport.h"
#include "common/collective/wire_format.h"

namespace lockstep {

// One step's combine, as the combiner saw it (StepCombiner fills it; the
// job runner reads it after each step). Seconds of wall time:
//   compute_seconds        forward + backward on the compute thread (with
//                          overlap, the combine thread ran alongside);
//   communication_seconds  buckets in flight: the sum over buckets of
//                          the time from a bucket's combine call to its
//                          return (buckets run one at a time);
//   exposed_seconds        communication not hidden behind backward: the
//                          time the compute thread blocked, after backward
//                          ended, until the last bucket was combined
//                          (without overlap, the whole combine);
//   peer_wait_seconds      the part of communication_seconds spent blocked
//                          until peers' data for a bucket started
//                          arriving: ring, the bucket's first receive from
//                          the left neighbour (it sends nothing of a bucket
//                          before it has computed that bucket itself);
//                          direct exchange, receiving every peer's message;
//                          ps, the pulls (a shard answers once all K
//                          workers pushed). It contains about one message
//                          latency per bucket besides the wait for the
//                          slowest peer.
struct CombineTiming {
  double compute_seconds = 0;
  double communication_seconds = 0;
  double exposed_seconds = 0;
  double peer_wait_seconds = 0;
  int buckets = 0;  // buckets this step was combined in
};

// One bucket of a step's combine.
struct BucketCall {
  uint64_t job = 0;
  int64_t step = 0;
  int bucket = 0;       // index in combine order, [0, num_buckets)
  int num_buckets = 1;
  Range range;          // the bucket's place in the step's whole buffer
  int64_t buffer_size = 0;  // the step's whole buffer (floats)
  bool with_count = true;   // this bucket carries the step's count
  WireFormat wire = WireFormat::kFloat32;
  absl::Time deadline = absl::InfiniteFuture();
};

// Buckets over a buffer of n floats whose pieces become final in the order
// of `piece_starts` (strictly decreasing, piece i = [piece_starts[i],
// piece_starts[i-1]), piece 0 ends at n; a last piece down to 0 is implied):
// consecutive pieces are grouped, from the end, into buckets of at most
// bucket_floats (a larger piece is a bucket alone). Bucket 0 is the tail
// (it becomes final first); the last bucket begins at 0. bucket_floats <= 0:
// one bucket [0, n).
std::vector<Range> PlanGradBuckets(int64_t n, absl::Span<const int64_t> piece_starts,
                                   int64_t bucket_floats);

class GradientCombiner {
 public:
  virtual ~GradientCombiner() = default;
  // In place: `buffer` (this rank's sums) becomes the sum over all ranks and
  // *count the total count, bit-identical on every rank. Errors name the
  // peer or shard that failed; every call returns within `timeout`.
  virtual absl::Status Combine(uint64_t job, int64_t step, absl::Span<float> buffer,
                               int64_t* count, absl::Duration timeout) = 0;

  // The buckets a step's buffer of n floats is combined in, in combine
  // order (see PlanGradBuckets; every rank gets the same plan from the same
  // arguments). bucket_floats <= 0 asks for one bucket.
  virtual absl::StatusOr<std::vector<Range>> PlanBuckets(
      int64_t n, absl::Span<const int64_t> piece_starts, int64_t bucket_floats) {
    return PlanGradBuckets(n, piece_starts, bucket_floats);
  }

  // Combines one bucket in place: `data` (= the whole buffer's
  // call.range) becomes the sum over ranks; with call.with_count, *count
  // becomes the total count (else it is left alone). Buckets of a step are
  // combined in bucket order on every rank, and their messages are keyed
  // apart. Adds its blocked-on-peers time to *peer_wait_seconds (may be
  // null). Returns by call.deadline. The default handles one float32
  // bucket with Combine().
  virtual absl::Status CombineBucket(const BucketCall& call, absl::Span<float> data,
                                     int64_t* count, double* peer_wait_seconds);
};

// Ring all-reduce over a Transport (not owned; must outlive this).
// `algorithm`: JobSpec.ring_algorithm (kAuto picks by size). With kDirect
// forced, a gradient (or bucket) whose one direct message would exceed
// kMaxSegmentBytes (2 MiB, the direct algorithm's own cap) or the
// transport's limit (Transport::max_message_bytes) fails the call with
// InvalidArgumentError naming spec.ring_algorithm, the size and the limit,
// before anything is sent.
class RingCombiner : public GradientCombiner {
 public:
  explicit RingCombiner(Transport* transport,
                        AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto)
      : reducer_(transport),
        algorithm_(algorithm),
        max_message_bytes_(transport->max_message_bytes()),
        world_(transport->world_size()) {}
  absl::Status Combine(uint64_t job, int64_t step, absl::Span<float> buffer, int64_t* count,
                       absl::Duration timeout) override;
  // Bucket b is one all-reduce whose messages use phases [2Kb, 2Kb + 2K - 2);
  // the count travels only with the bucket that carries it.
  absl::Status CombineBucket(const BucketCall& call, absl::Span<float> data, int64_t* count,
                             double* peer_wait_seconds) override;

 private:
  // OK unless kDirect's one message of `floats` would exceed the limit.
  absl::Status CheckDirectFits(size_t floats, WireFormat wire) const;

  RingAllReducer reducer_;
  const AllReduceAlgorithm algorithm_;
  const int64_t max_message_bytes_;
  const int world_;
};

// Push to / pull from S parameter-server shards. The shard clients depend
// on the buffer length (shard s covers ShardBounds(n, S, s)), which is
// known at the first Combine: `connect(n)` is called then and returns the
// S clients, owned by whoever made them and alive while this is used.
//
// Buckets: a shard is sized from the job, so a bucket is a whole shard:
// asked for more than one bucket, PlanBuckets gives the S shards, last
// shard first (it holds the loss slot and the last layers, which backward
// finishes first); each bucket pushes its shard as soon as it is final and
// pulls it back, while backward computes the next. One bucket is
// PsAllReduce (push every shard, then pull every shard). Float32 only.
class PsCombiner : public GradientCombiner {
 public:
  using Connect = std::function<absl::StatusOr<std::vector<PsClient*>>(int64_t n)>;
  PsCombiner(Connect connect, int rank) : connect_(std::move(connect)), rank_(rank) {}
  absl::Status Combine(uint64_t job, int64_t step, absl::Span<float> buffer, int64_t* count,
                       absl::Duration timeout) override;
  absl::StatusOr<std::vector<Range>> PlanBuckets(int64_t n,
                                                 absl::Span<const int64_t> piece_starts,
                                                 int64_t bucket_floats) override;
  absl::Status CombineBucket(const BucketCall& call, absl::Span<float> data, int64_t* count,
                             double* peer_wait_seconds) override;

 private:
  absl::Status Connected(int64_t n);

  Connect connect_;
  int rank_;
  int64_t n_ = -1;
  std::vector<PsClient*> shards_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_COMBINER_H_
