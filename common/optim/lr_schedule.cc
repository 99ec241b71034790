#include "common/optim/lr_schedule.h"

#include <cmath>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"
#include "common/optim/det_math.h"

namespace lockstep {
namespace {

double PeakDouble(const LrScheduleConfig& c, int64_t global_batch) {
  double peak = c.base_lr;
  if (c.linear_scaling && c.reference_batch > 0) {
    peak = peak * static_cast<double>(global_batch) /
           static_cast<double>(c.reference_batch);
  }
  return peak;
}

absl::Status FloatError(const char* field, const char* expected, double got) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "lr_schedule.%s: expected %s, got %g", field, expected, got));
}

absl::Status IntError(const char* field, const char* expected, int64_t got) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "lr_schedule.%s: expected %s, got %d", field, expected, got));
}

}  // namespace

absl::Status ValidateLrSchedule(const LrScheduleConfig& c,
                                int64_t global_batch) {
  if (global_batch <= 0) return IntError("global_batch", "> 0", global_batch);
  if (!(std::isfinite(c.base_lr) && c.base_lr > 0.0f)) {
    return FloatError("base_lr", "finite and > 0", c.base_lr);
  }
  if (c.linear_scaling && c.reference_batch <= 0) {
    return IntError("reference_batch", "> 0 when linear_scaling is enabled",
                    c.reference_batch);
  }
  const double peak = PeakDouble(c, global_batch);
  if (!std::isfinite(static_cast<float>(peak))) {
    return FloatError("base_lr",
                      "base_lr * global_batch / reference_batch to be a "
                      "finite float",
                      peak);
  }
  if (c.warmup_steps < 0) return IntError("warmup_steps", ">= 0", c.warmup_steps);
  if (!(c.warmup_start_factor >= 0.0f && c.warmup_start_factor <= 1.0f)) {
    return FloatError("warmup_start_factor", "in [0, 1]",
                      c.warmup_start_factor);
  }
  if (c.decay == "constant") return absl::OkStatus();
  if (c.decay == "step") {
    if (c.step_size <= 0) {
      return IntError("step_size", "> 0 for decay \"step\"", c.step_size);
    }
    if (!(c.gamma > 0.0f && c.gamma <= 1.0f)) {
      return FloatError("gamma", "in (0, 1] for decay \"step\"", c.gamma);
    }
    return absl::OkStatus();
  }
  if (c.decay == "cosine") {
    if (c.total_steps <= c.warmup_steps) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "lr_schedule.total_steps: expected > warmup_steps (%d) for decay "
          "\"cosine\", got %d",
          c.warmup_steps, c.total_steps));
    }
    if (!(c.min_lr >= 0.0f && static_cast<double>(c.min_lr) <= peak)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "lr_schedule.min_lr: expected in [0, peak lr %g] for decay "
          "\"cosine\", got %g",
          peak, c.min_lr));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "lr_schedule.decay: expected one of \"constant\", \"step\", \"cosine\", "
      "got \"%s\"",
      c.decay));
}

float PeakLearningRate(const LrScheduleConfig& c, int64_t global_batch) {
  return static_cast<float>(PeakDouble(c, global_batch));
}

float LearningRate(const LrScheduleConfig& c, int64_t global_batch,
                   int64_t step) {
  ABSL_RAW_CHECK(step >= 0, "LearningRate: step must be >= 0");
  const double peak = PeakDouble(c, global_batch);
  if (step < c.warmup_steps) {
    const double f = c.warmup_start_factor;
    const double progress =
        static_cast<double>(step) / static_cast<double>(c.warmup_steps);
    return static_cast<float>(peak * (f + (1.0 - f) * progress));
  }
  const int64_t u = step - (c.warmup_steps > 0 ? c.warmup_steps : 0);
  if (c.decay == "step" && c.step_size > 0) {
    return static_cast<float>(peak * IntPow(c.gamma, u / c.step_size));
  }
  if (c.decay == "cosine") {
    const int64_t span = c.total_steps - c.warmup_steps;
    if (span <= 0 || u >= span) return c.min_lr;
    const double min_lr = c.min_lr;
    const double x = static_cast<double>(u) / static_cast<double>(span);
    return static_cast<float>(min_lr +
                              (peak - min_lr) * (1.0 + CosPi(x)) * 0.5);
  }
  return static_cast<float>(peak);
}

}  // namespace lockstep
