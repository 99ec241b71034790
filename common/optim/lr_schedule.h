// Learning-rate schedule: a pure function of (config, global batch, step), so
// every replica computes the same bits for the same step. All arithmetic is
// IEEE double +,-,*,/ (and the deterministic CosPi/IntPow of det_math.h, not
// libm) with one final rounding to float.
//
// Let B = global batch size, s = 0-based index of the step about to be applied
// (the optimizer's steps() before the call), W = warmup_steps.
//
//   peak = base_lr * B / reference_batch   if linear_scaling (Goyal et al.)
//        = base_lr                         otherwise
//
//   Warm-up, s < W (PyTorch LinearLR semantics):
//     lr(s) = peak * (f + (1 - f) * s / W),   f = warmup_start_factor
//   so lr(0) = peak * f, lr rises by peak*(1-f)/W per step, lr(W-1) is one
//   increment short of peak, and lr(W) = peak (first post-warm-up step).
//   Goyal et al. ramp from base_lr to the scaled peak: get exactly that with
//   linear_scaling = true and warmup_start_factor = reference_batch / B.
//   The default f = 0 ramps from 0.
//
//   After warm-up, with u = s - W (steps since the end of warm-up):
//     "constant": lr = peak
//     "step":     lr = peak * gamma^floor(u / step_size)
//                 (first decay at s = W + step_size)
//     "cosine":   lr = min_lr + (peak - min_lr) * (1 + cos(pi * u / T)) / 2,
//                 T = total_steps - W; lr = min_lr for s >= total_steps.
//                 (peak at s = W, (peak+min_lr)/2 at u = T/2.)
//   min_lr is used only by "cosine".
//
// Thread-safety: pure functions, safe to call concurrently.
#ifndef LOCKSTEP_COMMON_OPTIM_LR_SCHEDULE_H_
#define LOCKSTEP_COMMON_OPTIM_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace lockstep {

struct LrScheduleConfig {
  float base_lr = 0.1f;            // > 0
  bool linear_scaling = false;     // peak = base_lr * B / reference_batch
  int64_t reference_batch = 256;   // > 0 (checked when linear_scaling)
  int64_t warmup_steps = 0;        // >= 0
  float warmup_start_factor = 0;   // in [0, 1]: warm-up starts at peak*factor
  std::string decay = "constant";  // "constant" | "step" | "cosine"
  int64_t step_size = 0;           // "step": > 0
  float gamma = 0.1f;              // "step": in (0, 1]
  int64_t total_steps = 0;         // "cosine": > warmup_steps
  float min_lr = 0;                // "cosine": in [0, peak]
};

// OK, or InvalidArgument naming the field ("lr_schedule.<field>") and what was
// expected, e.g. "lr_schedule.base_lr: expected finite and > 0, got -0.1".
// global_batch must be > 0 ("lr_schedule.global_batch: ...").
absl::Status ValidateLrSchedule(const LrScheduleConfig& config,
                                int64_t global_batch);

// Peak learning rate (after warm-up, before decay), rounded to float.
// Precondition: ValidateLrSchedule(config, global_batch).ok().
float PeakLearningRate(const LrScheduleConfig& config, int64_t global_batch);

// Learning rate for 0-based step `step` (see formulas above). Pure.
// Preconditions: ValidateLrSchedule(config, global_batch).ok() (otherwise the
// result is unspecified but no UB) and step >= 0 (aborts otherwise).
float LearningRate(const LrScheduleConfig& config, int64_t global_batch,
                   int64_t step);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_LR_SCHEDULE_H_
