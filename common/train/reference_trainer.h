// The single-process reference trainer: the same arithmetic a distributed
// job performs, on one machine, on the whole global batch of every step.
// Distributed runs are checked against it.
#ifndef LOCKSTEP_COMMON_TRAIN_REFERENCE_TRAINER_H_
#define LOCKSTEP_COMMON_TRAIN_REFERENCE_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"
#include "common/train/nonfinite.h"
#include "common/train/replica.h"
#include "common/train/train_spec.h"

namespace lockstep {

struct EpochReport {
  int64_t epoch = 0;           // 1-based epoch just finished
  int64_t step = 0;            // steps completed so far
  double train_loss = 0;       // mean training loss over this epoch's examples
  bool has_test = false;
  double test_accuracy = 0;    // classification; 0 for regression
  double test_loss = 0;        // mean loss on the test split
  double examples_per_second = 0;  // training throughput this epoch (no eval)
};

struct TrainResult {
  int64_t steps = 0;
  double final_loss = 0;       // mean training loss over the last epoch
  bool has_test = false;
  double test_accuracy = 0;
  double test_loss = 0;
  double examples_per_second = 0;  // over the whole run, eval excluded
  std::string weights_hash;        // 32 hex digits
  // Steps whose update was left out for a non-finite gradient or loss
  // (on_nonfinite = skip), and the last of them (-1 = none).
  int64_t skipped_steps = 0, last_skipped_step = -1;
  std::unique_ptr<Replica> replica;  // final weights and optimizer state
};

// Trains spec.model on `train`, evaluating on `test` (may be empty) after
// every epoch and at the end; `on_epoch` (may be empty) sees each report.
// Errors: invalid spec or
// model/data mismatch (InvalidArgument naming the field).
//
// `on_nonfinite` (lockstep-train --on_nonfinite; nullopt = no check, the
// plain arithmetic tests compare against): after each step's gradient, the
// same check a worker makes (common/train/nonfinite.h: the gradient and the
// loss sum, one vectorised pass). kFail: ABORTED "non-finite gradient at
// step 7 (--on_nonfinite: fail)" (or "non-finite loss"); kSkip: that step's
// update is left out (weights and optimizer state unchanged; the sampler
// and the learning-rate schedule move on), counted in skipped_steps, and
// its loss is left out of the epoch's train_loss.
//
// `eval_each_epoch` (lockstep-train --eval_each_epoch, as a job's): false
// evaluates on `test` after the last step only; the other epoch reports
// then have has_test false. Evaluation is never inside the timed steps.
absl::StatusOr<TrainResult> TrainReference(
    const TrainSpec& spec, const Dataset& train, const Dataset& test,
    const std::function<void(const EpochReport&)>& on_epoch,
    std::optional<NonFinitePolicy> on_nonfinite = std::nullopt, bool eval_each_epoch = true);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_REFERENCE_TRAINER_H_
