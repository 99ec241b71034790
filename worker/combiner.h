// GradientCombiner: how one step's K gradient sums become the same global
// sum on every rank. Ring mode all-reduces among the workers; ps mode goes
// through parameter-server shards. The job runner sees only this interface.
#ifndef LOCKSTEP_WORKER_COMBINER_H_
#define LOCKSTEP_WORKER_COMBINER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/ring_allreduce.h"
#include "common/collective/transport.h"

namespace lockstep {

class GradientCombiner {
 public:
  virtual ~GradientCombiner() = default;
  // In place: `buffer` (this rank's sums) becomes the sum over all ranks and
  // *count the total count, bit-identical on every rank. Errors name the
  // peer or shard that failed; every call returns within `timeout`.
  virtual absl::Status Combine(uint64_t job, int64_t step, absl::Span<float> buffer,
                               int64_t* count, absl::Duration timeout) = 0;
};

// Ring all-reduce over a Transport (not owned; must outlive this).
class RingCombiner : public GradientCombiner {
 public:
  explicit RingCombiner(Transport* transport) : reducer_(transport) {}
  absl::Status Combine(uint64_t job, int64_t step, absl::Span<float> buffer, int64_t* count,
                       absl::Duration timeout) override {
    AllReduceOptions o;
    o.job = job;
    o.step = step;
    o.timeout = timeout;
    return reducer_.AllReduce(buffer, count, o);
  }

 private:
  RingAllReducer reducer_;
};

// Push to / pull from S parameter-server shards. The shard clients depend
// on the buffer length (shard s covers ShardBounds(n, S, s)), which is
// known at the first Combine: `connect(n)` is called then and returns the
// S clients, owned by whoever made them and alive while this is used.
class PsCombiner : public GradientCombiner {
 public:
  using Connect = std::function<absl::StatusOr<std::vector<PsClient*>>(int64_t n)>;
  PsCombiner(Connect connect, int rank) : connect_(std::move(connect)), rank_(rank) {}
  absl::Status Combine(uint64_t job, int64_t step, absl::Span<float> buffer, int64_t* count,
                       absl::Duration timeout) override {
    if (shards_.empty() || n_ != static_cast<int64_t>(buffer.size())) {
      auto shards = connect_(static_cast<int64_t>(buffer.size()));
      if (!shards.ok()) return shards.status();
      shards_ = *std::move(shards);
      n_ = static_cast<int64_t>(buffer.size());
    }
    PsAllReduceOptions o;
    o.job = job;
    o.step = step;
    o.worker = rank_;
    o.timeout = timeout;
    return PsAllReduce(shards_, buffer, count, o);
  }

 private:
  Connect connect_;
  int rank_;
  int64_t n_ = -1;
  std::vector<PsClient*> shards_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_COMBINER_H_
