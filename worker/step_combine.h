// StepCombiner: one step's gradient computation and combine, overlapped as
// PyTorch DDP does with gradient buckets.
//
// Backward finishes the flat gradient from its end towards its start (the
// last layer first; the first layer's weight gradient, the largest, last,
// computed in row panels: common/model.h). The combine buffer [gradient |
// loss] is cut into buckets of about bucket_bytes (GradientCombiner::
// PlanBuckets; ps: one per shard), bucket 0 being the tail with the loss
// slot, which also carries the example count. A combine thread owned by
// this object combines bucket 0, 1, ... in that fixed order on every rank,
// each as soon as backward has finished it, while the compute thread goes
// on with the next panels. After backward the compute thread waits for the
// last bucket (the exposed communication).
//
// Every rank uses the same buckets and panels (both follow from the job
// spec and the model), each bucket's all-reduce gives every rank the same
// bits, so replicas stay bit-identical. Overlap changes the summation
// grouping (per bucket, and one Gemm per panel) compared with one combine
// of the whole buffer, so it may differ from it in the last bits.
//
// K = 1, or bucket_bytes = -1: no thread; backward, then one combine of the
// whole buffer on the calling thread (the path without overlap).
//
// Non-finite flags (issue 10; common/train/nonfinite.h): when the replica
// has flag slots (Replica::Create with flag_slots = K), this rank checks
// its local gradient sum before the combine and writes 1 (not finite) or 0
// in slot `rank`, 0 in every other slot of the buffer's front; the combine
// sums the slots, so after it every rank reads every rank's flag
// (Replica::flags()). Without overlap the check is one pass after
// backward; with overlap each piece is checked on the compute thread as
// backward announces it (while it is in cache), and the flags are written
// before the last bucket, which carries them, is released to the combine
// thread.
//
// Thread-compatible: one ComputeAndCombine at a time (the job's thread).
#ifndef LOCKSTEP_WORKER_STEP_COMBINE_H_
#define LOCKSTEP_WORKER_STEP_COMBINE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/wire_format.h"
#include "common/train/replica.h"
#include "proto/job.pb.h"
#include "worker/combiner.h"

namespace lockstep {

// The bucket size a CombineConfig with bucket_bytes = 0 uses (a JobSpec's
// 0 means no overlap, see CombineConfigFromSpec). The best of the sizes
// measured on the 2-core development host (README, "Overlap"): 4 buckets
// for the main job's MLP 784-256-10.
inline constexpr int64_t kDefaultBucketBytes = 256 << 10;

struct CombineConfig {
  // -1 = no overlap, > 0 = bucket bytes, 0 = kDefaultBucketBytes.
  int64_t bucket_bytes = 0;
  WireFormat wire = WireFormat::kFloat32;  // JobSpec.compression
};

// From the job spec, with JobSpec.bucket_bytes = 0 resolved to -1 (no
// overlap: the default, measured in the README, "Overlap").
// InvalidArgument naming spec.bucket_bytes (expected -1, 0 or > 0) or
// spec.compression (expected none, bf16 or fp16).
absl::StatusOr<CombineConfig> CombineConfigFromSpec(const v1::JobSpec& spec);

class StepCombiner : private GradReadyListener {
 public:
  // `combiner` is not owned and must outlive this; world = K; rank = this
  // rank (its flag slot).
  StepCombiner(GradientCombiner* combiner, CombineConfig config, int world, int rank = 0);
  ~StepCombiner() override;  // stops and joins the combine thread
  StepCombiner(const StepCombiner&) = delete;
  StepCombiner& operator=(const StepCombiner&) = delete;

  bool overlapped() const { return overlap_; }

  // Computes r's gradient sum over `indices` of `data` (into
  // r.combine_buffer(), with the loss) and combines it over all ranks under
  // the wire key `job`: on success the buffer holds the global sums,
  // *count the global example count and *local this rank's stats. Every
  // rank must call with the same job, step and spec. Returns within about
  // `timeout` (plus this rank's compute): errors name the peer, shard or
  // bucket. *timing is filled on success and failure.
  absl::Status ComputeAndCombine(Replica& r, const Dataset& data,
                                 absl::Span<const int64_t> indices, uint64_t job,
                                 int64_t step, absl::Duration timeout, BatchStats* local,
                                 int64_t* count, CombineTiming* timing);

  // The buckets of the last overlapped step (empty before), for tests.
  std::vector<Range> buckets() const { return buckets_; }

  // Fault injection for tests (lockstep-worker --fault_nan_step): at step
  // `step`, this rank's local gradient gets a NaN in its first element
  // before the check (-1 = off); SetInjectedValue puts that value there
  // instead (a large finite one makes the SUM overflow).
  void InjectNanAtStep(int64_t step) { nan_at_step_ = step; }
  void SetInjectedValue(float value, bool into_loss = false) {
    inject_value_ = value;
    inject_loss_ = into_loss;  // the local loss sum instead of the gradient
  }

  // After a successful ComputeAndCombine with flag slots: whether the
  // combined gradient and loss sum are all finite (K > 1; always true at
  // K = 1, where the local check is the whole story). Every rank holds the
  // same combined bytes, so every rank reads the same verdict: false with
  // no rank's flag set means the sum overflowed (nonfinite.h).
  bool combined_finite() const { return combined_finite_; }

  // Divergence (issue 10): called on the compute thread with the replica's
  // ids() each time the flags are written (just before the last bucket is
  // released), to write this rank's state identity there. Empty = none.
  void SetIdWriter(std::function<void(absl::Span<float> ids)> writer) {
    id_writer_ = std::move(writer);
  }

 private:
  void LossReady(double) override {}
  void ReadyFrom(int64_t begin) override;
  void Loop();

  // Starts a step's non-finite check of r's gradient (compute thread).
  void BeginCheck(Replica& r, int64_t step);
  // Checks buffer [lo, hi) (inside the gradient) for non-finite values.
  void CheckPiece(int64_t lo, int64_t hi);
  // Checks this rank's loss slot once per step (before it is combined).
  void CheckLoss();
  // Writes the buffer's front: this rank's flag in slot rank_, 0 elsewhere.
  void WriteFlags();

  GradientCombiner* const combiner_;
  const CombineConfig config_;
  const int world_;
  const int rank_;
  int64_t nan_at_step_ = -1;
  float inject_value_ = std::numeric_limits<float>::quiet_NaN();
  bool inject_loss_ = false;
  std::function<void(absl::Span<float>)> id_writer_;
  absl::Span<float> ids_;  // the step's replica's ids()
  // The step's check, compute thread only: the buffer, where the gradient
  // begins and ends in it, the flag slots, what is left unchecked
  // [grad_begin_, check_from_), and the verdict so far.
  float* check_buffer_ = nullptr;
  int64_t grad_begin_ = 0, grad_end_ = 0, check_from_ = 0;
  int flag_slots_ = 0;
  bool inject_nan_ = false;
  bool local_finite_ = true;
  // This rank's local loss sum, checked when the loss slot is final (before
  // the slot is released to the combine), and the combined verdict.
  bool loss_checked_ = false, local_loss_finite_ = true;
  bool combined_finite_ = true;
  const bool overlap_;
  const int64_t bucket_floats_;
  // The plan, made at the first step (and again if the buffer's length
  // changes); read by the combine thread only while a step is active.
  std::vector<Range> buckets_;
  int64_t planned_n_ = -1;

  absl::Mutex mu_;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  bool active_ ABSL_GUARDED_BY(mu_) = false;  // a step is being combined
  bool done_ ABSL_GUARDED_BY(mu_) = false;    // ... and the thread finished it
  BucketCall call_ ABSL_GUARDED_BY(mu_);      // job, step, wire, deadline
  absl::Span<float> buffer_ ABSL_GUARDED_BY(mu_);
  int64_t local_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t total_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ready_from_ ABSL_GUARDED_BY(mu_) = 0;  // buffer[ready_from_, n) final
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  double communication_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double peer_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  bool buckets_finite_ ABSL_GUARDED_BY(mu_) = true;  // the step's combined buckets
  // Where the combined check starts in the buffer (the gradient's start;
  // the buffer's length = no check).
  int64_t combined_check_begin_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last member: started after everything above
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_STEP_COMBINE_H_
