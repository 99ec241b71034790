// Deterministic first-order optimizers over lockstep's flat parameter vector.
//
// Every model's parameters live in ONE contiguous float32 vector. After the
// gradient SUM and example COUNT are combined across workers, each replica
// calls Step() with the MEAN gradient (sum / count). Step() is a plain scalar
// loop in float32 arithmetic with scalar coefficients computed in double from
// deterministic helpers (no libm pow), compiled with -ffp-contract=off and no
// -ffast-math: identical inputs (params, optimizer state, grad, lr) give
// bit-identical outputs on every replica running the same binary.
//
// Formulas (per element i; t = steps() + 1 is the 1-based index of the step
// being applied; g = mean_grad[i], w = params[i]; all products are rounded to
// float unless noted "(double)"):
//
//   kind "sgd" (PyTorch torch.optim.SGD, dampening = 0):
//     if weight_decay != 0:  g = g + weight_decay * w          (L2 in the grad)
//     if momentum != 0:
//       t == 1:  v = g                                          (PyTorch init)
//       t >  1:  v = momentum * v + g
//       nesterov: g = g + momentum * v   else: g = v
//     w = w - lr * g
//
//   kind "adam" (PyTorch torch.optim.Adam, amsgrad = False):
//     if weight_decay != 0:  g = g + weight_decay * w          (L2 in the grad)
//     m = beta1 * m + (1 - beta1) * g
//     s = beta2 * s + (1 - beta2) * (g * g)
//     bc1 = 1 - beta1^t, bc2 = 1 - beta2^t                      (double)
//     step_size = lr / bc1, sqrt_bc2 = sqrt(bc2)          (double, then float)
//     w = w - step_size * (m / (sqrt(s) / sqrt_bc2 + eps))
//   kind "adamw" (PyTorch torch.optim.AdamW): as "adam" but the decay is
//     decoupled and applied first instead of being added to the gradient:
//     w = w * (1 - lr * weight_decay)               (coefficient in double)
//   (1 - beta1) and (1 - beta2) are computed in double and rounded to float.
//
// Thread-safety: an Optimizer is not thread-safe; Step/SetState must not run
// concurrently with any other call on the same instance. Distinct instances
// are independent (no shared or global state).
#ifndef LOCKSTEP_COMMON_OPTIM_OPTIMIZER_H_
#define LOCKSTEP_COMMON_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lockstep {

struct OptimizerConfig {
  std::string kind = "sgd";  // "sgd" | "adam" | "adamw"
  float momentum = 0;        // sgd only, in [0, 1)
  bool nesterov = false;     // sgd only, requires momentum > 0
  float weight_decay = 0;    // >= 0; L2 for sgd/adam, decoupled for adamw
  float beta1 = 0.9f;        // adam/adamw, in [0, 1)
  float beta2 = 0.999f;      // adam/adamw, in [0, 1)
  float eps = 1e-8f;         // adam/adamw, > 0
};

// OK, or InvalidArgument naming the field and what was expected, e.g.
// "optimizer.momentum: expected in [0, 1), got 1.5". Non-finite values are
// rejected. momentum/nesterov set with an Adam kind are rejected (they would be
// silently ignored). beta1/beta2/eps are only checked for Adam kinds.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// Everything a replica holds besides the parameters. Layout of `slots`:
//   sgd, momentum == 0 : empty
//   sgd, momentum >  0 : momentum buffer v[0..N)
//   adam / adamw       : first moment m[0..N) followed by second moment s[0..N)
// `steps` is the number of Step() calls applied so far (>= 0).
struct OptimizerState {
  int64_t steps = 0;
  std::vector<float> slots;
};

// Told, while Step runs, as each chunk of the update is final: a caller
// hashes what the update just wrote while it is still in this core's cache
// (the step report's weights and optimizer hashes, worker/step_reporter.h)
// instead of reading the weights from L2/RAM again afterwards.
class UpdateObserver {
 public:
  // Chunks of at most this many parameters.
  static constexpr int64_t kChunkFloats = 2048;  // 8 KiB
  virtual ~UpdateObserver() = default;
  // [begin, end) of the parameters, and of every per-parameter slot (the
  // momentum v, or Adam's m and s), hold their values after this step.
  // Called on Step's thread, in ascending order; the chunks are consecutive
  // and cover [0, num_params()) exactly once (no call when it is 0).
  // steps() is still the count before this step during the calls.
  virtual void Updated(int64_t begin, int64_t end) = 0;
};

class Optimizer {
 public:
  // Validates `config` (see ValidateOptimizerConfig) and num_params >= 0
  // (InvalidArgument "optimizer.num_params: ..."). State starts zeroed with
  // steps() == 0.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerConfig& config, int64_t num_params);

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update in place: params -= update(mean_grad, lr), per the
  // formulas above, and increments steps(). `mean_grad` is the MEAN gradient
  // (the caller divided the combined sum by the combined count). Both spans
  // must have exactly num_params() elements and must not overlap each other
  // or this optimizer's state (aborts on a size mismatch: programming error).
  // Deterministic. Non-finite inputs propagate (no checks on the hot path).
  void Step(absl::Span<float> params, absl::Span<const float> mean_grad, float lr) {
    Step(params, mean_grad, lr, nullptr);
  }
  // The same, chunk by chunk, telling `observer` (not owned; nullptr = none)
  // as each chunk is final. The result is bit-identical to Step without one
  // (the update is elementwise; chunking changes no operation).
  virtual void Step(absl::Span<float> params, absl::Span<const float> mean_grad, float lr,
                    UpdateObserver* observer) = 0;

  // Copy of the full optimizer state (for checkpoints, repair, hashing).
  OptimizerState State() const;
  // Replaces the state. InvalidArgument (state unchanged) if steps < 0 or
  // slots.size() != num_slots(), naming the field and expected size.
  absl::Status SetState(const OptimizerState& state);

  // Zero-copy view of the state slots (layout as in OptimizerState); valid
  // until the next non-const call.
  absl::Span<const float> slots() const { return slots_; }
  int64_t steps() const { return steps_; }
  int64_t num_params() const { return num_params_; }
  // Number of floats in slots(): 0, N or 2N depending on kind (see above).
  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  const OptimizerConfig& config() const { return config_; }

 protected:
  Optimizer(const OptimizerConfig& config, int64_t num_params,
            int64_t num_slots);
  // Aborts unless both spans have num_params() elements.
  void CheckSizes(absl::Span<float> params,
                  absl::Span<const float> mean_grad) const;

  const OptimizerConfig config_;
  const int64_t num_params_;
  int64_t steps_ = 0;
  std::vector<float> slots_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_OPTIMIZER_H_
