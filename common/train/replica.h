// Replica: one full copy of the model, its optimizer state and the scratch
// buffers of a training step. Every worker holds one; the reference trainer
// holds one. A step is split in two so the caller can combine gradients in
// between:
//
//   BatchStats s = replica.ComputeGradSum(data, my_slice);   // local sum
//   ... all-reduce replica.grad() and the count over all ranks ...
//   replica.Apply(step, total_count);                         // mean, update
//
// Apply divides the combined sum once by the combined count, so uneven
// slices (even empty ones) give the exact full-batch mean.
//
// Thread safety: a Replica is used by one thread at a time.
#ifndef LOCKSTEP_COMMON_TRAIN_REPLICA_H_
#define LOCKSTEP_COMMON_TRAIN_REPLICA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/data/dataset.h"
#include "common/model.h"
#include "common/optim/hash.h"
#include "common/optim/optimizer.h"
#include "common/train/train_spec.h"

namespace lockstep {

class Replica {
 public:
  // Builds the model for data of `input_dim` features and `num_classes`
  // classes and initialises it from spec.seed. InvalidArgument naming the
  // field when the spec or the model does not fit. `flag_slots` (a job's K;
  // 0 for a replica that is never combined) reserves that many floats at
  // the front of combine_buffer() for the non-finite flags (flags()).
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const TrainSpec& spec,
                                                         int64_t input_dim,
                                                         int num_classes,
                                                         int flag_slots = 0,
                                                         int id_slots = 0);

  // Loss sum and gradient SUM over the examples `indices` of `data`, into
  // grad() (overwritten). `data` must match the model's input dimension.
  BatchStats ComputeGradSum(const Dataset& data, absl::Span<const int64_t> indices);

  // The same, with backward in pieces (Model::LossAndGradSum with a
  // listener): `listener` is told in combine_buffer() coordinates, first
  // ReadyFrom(grad_offset() + num_params()) once the loss slot holds the
  // loss sum, then each piece of the gradient as it becomes final, down to
  // ReadyFrom(grad_offset()) (the whole gradient; the flags in front are
  // the caller's to fill, see flags()). Its LossReady is called before
  // that with the loss sum.
  BatchStats ComputeGradSum(const Dataset& data, absl::Span<const int64_t> indices,
                            int64_t panel_floats, GradReadyListener* listener);
  // Where the pieces of the call above begin in combine_buffer(), in the
  // order they become final: the loss slot, then Model::GradPieceStarts
  // shifted by grad_offset() (the first piece of the gradient runs down to
  // 0 and so takes the flags in front with it: they travel in the last
  // bucket).
  std::vector<int64_t> CombinePieceStarts(int64_t panel_floats) const;

  // The gradient buffer (length num_params()): the local sum after
  // ComputeGradSum, to be replaced in place by the combined sum.
  absl::Span<float> grad() { return absl::MakeSpan(grad_.data() + grad_offset_, num_params()); }

  // The buffer a step combines: [flags | grad() | loss sum]. The trailing
  // float holds the batch's loss sum (set by ComputeGradSum): all-reducing
  // this buffer combines the loss for free, so every rank learns the global
  // batch's loss. After combining, loss_sum() reads the combined value.
  // The front holds grad_offset() floats: the flag_slots non-finite flags
  // (rank r's local gradient not finite: 1 in slot r; summed, every rank
  // sees every rank's flag) and zero padding to a multiple of 16 floats, so
  // grad() keeps the buffer's 64-byte alignment. No flag slots: no front.
  absl::Span<float> combine_buffer() { return absl::MakeSpan(grad_); }
  float loss_sum() const { return grad_.back(); }
  absl::Span<float> flags() { return absl::MakeSpan(grad_.data(), flag_slots_); }
  // Divergence (issue 10): `id_slots` floats after the flags, in the same
  // front, where each rank writes its state identity (worker/job_runner.cc:
  // 8 byte-valued floats per rank); summed by the combine like the flags.
  absl::Span<float> ids() { return absl::MakeSpan(grad_.data() + flag_slots_, id_slots_); }
  int64_t id_slots() const { return id_slots_; }
  int64_t grad_offset() const { return grad_offset_; }

  // Divides grad() by total_count, applies the learning rate of `step` and
  // one optimizer step, telling `observer` (not owned; nullptr = none) as each
  // chunk of the update is final (Optimizer::Step). Returns the learning rate
  // used.
  float Apply(int64_t step, int64_t total_count, UpdateObserver* observer = nullptr);

  absl::Span<const float> params() const { return absl::MakeConstSpan(params_); }
  absl::Span<float> mutable_params() { return absl::MakeSpan(params_); }
  WeightHash Hash() const { return HashWeights(params_); }
  EvalStats Evaluate(const Dataset& data);

  // Replaces the weights and the optimizer state (a checkpoint or a peer's
  // state): afterwards the replica computes exactly what the replica it was
  // taken from would. InvalidArgument (nothing changed) naming num_params or
  // the optimizer field when a size does not fit.
  absl::Status Restore(absl::Span<const float> params, const OptimizerState& optimizer);

  const Model& model() const { return *model_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  Optimizer& mutable_optimizer() { return *optimizer_; }
  const TrainSpec& spec() const { return spec_; }
  int64_t num_params() const { return model_->num_params(); }

 private:
  Replica(TrainSpec spec, std::unique_ptr<Model> model,
          std::unique_ptr<Optimizer> optimizer, int flag_slots, int id_slots);

  TrainSpec spec_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  int flag_slots_ = 0;
  int id_slots_ = 0;
  int64_t grad_offset_ = 0;  // flag_slots_ + id_slots_ rounded up to 16 floats
  std::vector<float> params_, grad_;
  std::vector<float> batch_x_, batch_y_;  // reused gather buffers
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_REPLICA_H_
