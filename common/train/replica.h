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
  // field when the spec or the model does not fit.
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const TrainSpec& spec,
                                                         int64_t input_dim,
                                                         int num_classes);

  // Loss sum and gradient SUM over the examples `indices` of `data`, into
  // grad() (overwritten). `data` must match the model's input dimension.
  BatchStats ComputeGradSum(const Dataset& data, absl::Span<const int64_t> indices);

  // The same, with backward in pieces (Model::LossAndGradSum with a
  // listener): `listener` is told in combine_buffer() coordinates, first
  // ReadyFrom(num_params()) once the loss slot holds the loss sum, then
  // each piece of the gradient as it becomes final, down to ReadyFrom(0).
  // Its LossReady is called before that with the loss sum.
  BatchStats ComputeGradSum(const Dataset& data, absl::Span<const int64_t> indices,
                            int64_t panel_floats, GradReadyListener* listener);
  // Where the pieces of the call above begin in combine_buffer(), in the
  // order they become final: num_params() (the loss slot), then
  // Model::GradPieceStarts.
  std::vector<int64_t> CombinePieceStarts(int64_t panel_floats) const;

  // The gradient buffer (length num_params()): the local sum after
  // ComputeGradSum, to be replaced in place by the combined sum.
  absl::Span<float> grad() { return absl::MakeSpan(grad_.data(), num_params()); }

  // grad() plus one trailing float holding the batch's loss sum (set by
  // ComputeGradSum): all-reducing this buffer combines the loss for free,
  // so every rank learns the global batch's loss. After combining,
  // loss_sum() reads the combined value.
  absl::Span<float> combine_buffer() { return absl::MakeSpan(grad_); }
  float loss_sum() const { return grad_.back(); }

  // Divides grad() by total_count, applies the learning rate of `step` and
  // one optimizer step. Returns the learning rate used.
  float Apply(int64_t step, int64_t total_count);

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
          std::unique_ptr<Optimizer> optimizer);

  TrainSpec spec_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> params_, grad_;
  std::vector<float> batch_x_, batch_y_;  // reused gather buffers
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_REPLICA_H_
