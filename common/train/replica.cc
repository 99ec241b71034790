#include "common/train/replica.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/optim/lr_schedule.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const TrainSpec& spec,
                                                         int64_t input_dim,
                                                         int num_classes,
                                                         int flag_slots, int id_slots) {
  if (absl::Status s = ValidateTrainSpec(spec, 1); !s.ok()) return s;
  auto model = CreateModel(spec.model, input_dim, num_classes);
  if (!model.ok()) return model.status();
  auto optimizer = Optimizer::Create(spec.optimizer, (*model)->num_params());
  if (!optimizer.ok()) return optimizer.status();
  if (flag_slots < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag_slots: expected >= 0 (the job's K), got ", flag_slots));
  }
  if (id_slots < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("id_slots: expected >= 0, got ", id_slots));
  }
  return std::unique_ptr<Replica>(
      new Replica(spec, *std::move(model), *std::move(optimizer), flag_slots, id_slots));
}

Replica::Replica(TrainSpec spec, std::unique_ptr<Model> model,
                 std::unique_ptr<Optimizer> optimizer, int flag_slots, int id_slots)
    : spec_(std::move(spec)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      flag_slots_(flag_slots),
      id_slots_(id_slots),
      grad_offset_((static_cast<int64_t>(flag_slots) + id_slots + 15) / 16 * 16),
      params_(model_->num_params()),
      grad_(grad_offset_ + model_->num_params() + 1) {
  model_->Init(spec_.seed, absl::MakeSpan(params_));
}

BatchStats Replica::ComputeGradSum(const Dataset& data,
                                   absl::Span<const int64_t> indices) {
  GatherRows(data, indices, &batch_x_, &batch_y_);
  BatchStats stats = model_->LossAndGradSum(params_, batch_x_.data(), batch_y_.data(),
                                            static_cast<int64_t>(indices.size()), grad());
  grad_.back() = static_cast<float>(stats.loss_sum);
  return stats;
}

namespace {

// Writes the loss into the combine buffer's last slot before passing the
// gradient's progress on, in combine-buffer coordinates (the gradient
// begins at `offset`).
class LossSlotListener : public GradReadyListener {
 public:
  LossSlotListener(float* slot, int64_t offset, int64_t n, GradReadyListener* out)
      : slot_(slot), offset_(offset), n_(n), out_(out) {}
  void LossReady(double loss_sum) override {
    *slot_ = static_cast<float>(loss_sum);
    out_->LossReady(loss_sum);
    out_->ReadyFrom(offset_ + n_);
  }
  void ReadyFrom(int64_t begin) override { out_->ReadyFrom(offset_ + begin); }

 private:
  float* const slot_;
  const int64_t offset_;
  const int64_t n_;
  GradReadyListener* const out_;
};

}  // namespace

BatchStats Replica::ComputeGradSum(const Dataset& data,
                                   absl::Span<const int64_t> indices,
                                   int64_t panel_floats, GradReadyListener* listener) {
  GatherRows(data, indices, &batch_x_, &batch_y_);
  LossSlotListener slot(&grad_.back(), grad_offset_, num_params(), listener);
  return model_->LossAndGradSum(params_, batch_x_.data(), batch_y_.data(),
                                static_cast<int64_t>(indices.size()), grad(),
                                panel_floats, &slot);
}

std::vector<int64_t> Replica::CombinePieceStarts(int64_t panel_floats) const {
  std::vector<int64_t> starts = {grad_offset_ + num_params()};
  for (int64_t s : model_->GradPieceStarts(panel_floats)) {
    // The gradient's first piece also takes the flags in front (to 0).
    if (s > 0 || grad_offset_ == 0) starts.push_back(grad_offset_ + s);
  }
  return starts;
}

float Replica::Apply(int64_t step, int64_t total_count, UpdateObserver* observer) {
  SumToMean(grad(), total_count);
  const float lr = LearningRate(spec_.lr, spec_.global_batch, step);
  optimizer_->Step(absl::MakeSpan(params_), grad(), lr, observer);
  return lr;
}

absl::Status Replica::Restore(absl::Span<const float> params,
                              const OptimizerState& optimizer) {
  if (static_cast<int64_t>(params.size()) != num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("num_params: expected ", num_params(),
                                                   " for model ", spec_.model, ", got ",
                                                   params.size()));
  }
  if (absl::Status s = optimizer_->SetState(optimizer); !s.ok()) return s;
  std::copy(params.begin(), params.end(), params_.begin());
  return absl::OkStatus();
}

EvalStats Replica::Evaluate(const Dataset& data) {
  return model_->Evaluate(params_, data.x.data(), data.y.data(), data.num_examples);
}

}  // namespace lockstep
