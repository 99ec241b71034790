#include "common/train/train_spec.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status ValidateTrainSpec(const TrainSpec& spec, int world) {
  if (world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers: expected >= 1, got ", world));
  }
  if (spec.global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch: expected >= 1, got ", spec.global_batch));
  }
  if (spec.global_batch < world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch: expected >= number of workers (", world, "), got ",
        spec.global_batch));
  }
  if (spec.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("steps: expected >= 0, got ", spec.steps));
  }
  if (spec.steps == 0 && spec.epochs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("epochs: expected >= 1 when steps is 0, got ", spec.epochs));
  }
  if (absl::Status s = ValidateOptimizerConfig(spec.optimizer); !s.ok()) return s;
  return ValidateLrSchedule(spec.lr, spec.global_batch);
}

int64_t TotalSteps(const TrainSpec& spec, int64_t num_examples) {
  if (spec.steps > 0) return spec.steps;
  const int64_t per_epoch = (num_examples + spec.global_batch - 1) / spec.global_batch;
  return per_epoch * spec.epochs;
}

}  // namespace lockstep
