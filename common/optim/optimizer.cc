#include "common/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"
#include "common/optim/det_math.h"

namespace lockstep {
namespace {

bool IsAdamKind(const std::string& kind) {
  return kind == "adam" || kind == "adamw";
}

absl::Status FieldError(const char* field, const char* expected, double got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("optimizer.%s: expected %s, got %g", field, expected, got));
}

// Half-open unit interval [0, 1); false for NaN.
bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }

// w -= lr * (g [+ wd * w])
template <bool kDecay>
void PlainSgd(float* w, const float* grad, size_t n, float wd, float lr) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (kDecay) g = g + wd * w[i];
    w[i] = w[i] - lr * g;
  }
}

// v = first ? g : mu * v + g;  w -= lr * (nesterov ? g + mu * v : v)
template <bool kDecay, bool kFirst, bool kNesterov>
void MomentumSgd(float* w, float* v, const float* grad, size_t n, float wd, float mu,
                 float lr) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (kDecay) g = g + wd * w[i];
    const float vi = kFirst ? g : mu * v[i] + g;
    v[i] = vi;
    g = kNesterov ? g + mu * vi : vi;
    w[i] = w[i] - lr * g;
  }
}

// Runs fn(begin, count) over [0, total): in one piece without an observer,
// otherwise in UpdateObserver::kChunkFloats pieces, telling the observer
// after each.
template <typename Fn>
void ForEachChunk(size_t total, UpdateObserver* observer, Fn fn) {
  if (observer == nullptr) {
    if (total > 0) fn(size_t{0}, total);
    return;
  }
  const size_t chunk = static_cast<size_t>(UpdateObserver::kChunkFloats);
  for (size_t b = 0; b < total; b += chunk) {
    const size_t n = std::min(chunk, total - b);
    fn(b, n);
    observer->Updated(static_cast<int64_t>(b), static_cast<int64_t>(b + n));
  }
}

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerConfig& config, int64_t num_params)
      : Optimizer(config, num_params,
                  config.momentum != 0.0f ? num_params : 0) {}

  void Step(absl::Span<float> params, absl::Span<const float> mean_grad, float lr,
            UpdateObserver* observer) override {
    CheckSizes(params, mean_grad);
    const float wd = config_.weight_decay;
    const float mu = config_.momentum;
    const bool nesterov = config_.nesterov;
    const bool first = (steps_ == 0);
    const size_t total = params.size();
    // The flags pick one branch-free loop (so -O2 vectorises it); every
    // instantiation performs exactly the scalar operations of the formula.
    const int variant = (mu == 0.0f ? 8 : 0) | (wd != 0.0f ? 4 : 0) | (first ? 2 : 0) |
                        (nesterov ? 1 : 0);
    ForEachChunk(total, observer, [&](size_t b, size_t n) {
      float* w = params.data() + b;
      const float* grad = mean_grad.data() + b;
      float* v = slots_.data() + (mu == 0.0f ? 0 : b);
      switch (variant) {
        case 0: MomentumSgd<false, false, false>(w, v, grad, n, wd, mu, lr); break;
        case 1: MomentumSgd<false, false, true>(w, v, grad, n, wd, mu, lr); break;
        case 2: MomentumSgd<false, true, false>(w, v, grad, n, wd, mu, lr); break;
        case 3: MomentumSgd<false, true, true>(w, v, grad, n, wd, mu, lr); break;
        case 4: MomentumSgd<true, false, false>(w, v, grad, n, wd, mu, lr); break;
        case 5: MomentumSgd<true, false, true>(w, v, grad, n, wd, mu, lr); break;
        case 6: MomentumSgd<true, true, false>(w, v, grad, n, wd, mu, lr); break;
        case 7: MomentumSgd<true, true, true>(w, v, grad, n, wd, mu, lr); break;
        default:
          if (wd != 0.0f) {
            PlainSgd<true>(w, grad, n, wd, lr);
          } else {
            PlainSgd<false>(w, grad, n, wd, lr);
          }
          break;
      }
    });
    ++steps_;
  }
};

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerConfig& config, int64_t num_params)
      : Optimizer(config, num_params, 2 * num_params) {}

  void Step(absl::Span<float> params, absl::Span<const float> mean_grad, float lr,
            UpdateObserver* observer) override {
    CheckSizes(params, mean_grad);
    const int64_t t = steps_ + 1;
    const double b1 = config_.beta1;
    const double b2 = config_.beta2;
    const float beta1 = config_.beta1;
    const float beta2 = config_.beta2;
    const float one_minus_b1 = static_cast<float>(1.0 - b1);
    const float one_minus_b2 = static_cast<float>(1.0 - b2);
    const double bc1 = 1.0 - IntPow(b1, t);
    const double bc2 = 1.0 - IntPow(b2, t);
    const float step_size = static_cast<float>(static_cast<double>(lr) / bc1);
    const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));  // IEEE exact
    const float eps = config_.eps;
    const bool decoupled = (config_.kind == "adamw");
    const float wd = config_.weight_decay;
    const float decay_factor = static_cast<float>(
        1.0 - static_cast<double>(lr) * static_cast<double>(wd));

    const size_t total = params.size();
    ForEachChunk(total, observer, [&](size_t b, size_t n) {
      float* w = params.data() + b;
      const float* grad = mean_grad.data() + b;
      float* m = slots_.data() + b;
      float* s = slots_.data() + total + b;
      AdamChunk(w, m, s, grad, n, wd, decoupled, decay_factor, beta1, beta2, one_minus_b1,
                one_minus_b2, sqrt_bc2, eps, step_size);
    });
    ++steps_;
  }

 private:
  static void AdamChunk(float* w, float* m, float* s, const float* grad, size_t n, float wd,
                        bool decoupled, float decay_factor, float beta1, float beta2,
                        float one_minus_b1, float one_minus_b2, float sqrt_bc2, float eps,
                        float step_size) {
    for (size_t i = 0; i < n; ++i) {
      float g = grad[i];
      if (wd != 0.0f) {
        if (decoupled) {
          w[i] = w[i] * decay_factor;
        } else {
          g = g + wd * w[i];
        }
      }
      m[i] = beta1 * m[i] + one_minus_b1 * g;
      s[i] = beta2 * s[i] + one_minus_b2 * (g * g);
      const float denom = std::sqrt(s[i]) / sqrt_bc2 + eps;
      w[i] = w[i] - step_size * (m[i] / denom);
    }
  }
};

}  // namespace

absl::Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (c.kind != "sgd" && !IsAdamKind(c.kind)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer.kind: expected one of \"sgd\", \"adam\", \"adamw\", got "
        "\"%s\"",
        c.kind));
  }
  if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0.0f)) {
    return FieldError("weight_decay", "finite and >= 0", c.weight_decay);
  }
  if (c.kind == "sgd") {
    if (!InUnitInterval(c.momentum)) {
      return FieldError("momentum", "in [0, 1)", c.momentum);
    }
    if (c.nesterov && c.momentum == 0.0f) {
      return absl::InvalidArgumentError(
          "optimizer.nesterov: expected optimizer.momentum > 0 when nesterov "
          "is enabled, got momentum 0");
    }
    return absl::OkStatus();
  }
  // Adam kinds.
  if (c.momentum != 0.0f) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer.momentum: expected 0 for kind \"%s\" (only used by "
        "\"sgd\"; use beta1), got %g",
        c.kind, c.momentum));
  }
  if (c.nesterov) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer.nesterov: expected false for kind \"%s\" (only used by "
        "\"sgd\"), got true",
        c.kind));
  }
  if (!InUnitInterval(c.beta1)) {
    return FieldError("beta1", "in [0, 1)", c.beta1);
  }
  if (!InUnitInterval(c.beta2)) {
    return FieldError("beta2", "in [0, 1)", c.beta2);
  }
  if (!(std::isfinite(c.eps) && c.eps > 0.0f)) {
    return FieldError("eps", "finite and > 0", c.eps);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerConfig& config, int64_t num_params) {
  if (absl::Status s = ValidateOptimizerConfig(config); !s.ok()) return s;
  // 2 * num_params must fit comfortably in a vector size.
  constexpr int64_t kMaxParams = int64_t{1} << 40;
  if (num_params < 0 || num_params > kMaxParams) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer.num_params: expected in [0, %d], got %d", kMaxParams,
        num_params));
  }
  if (config.kind == "sgd") {
    return std::unique_ptr<Optimizer>(new SgdOptimizer(config, num_params));
  }
  return std::unique_ptr<Optimizer>(new AdamOptimizer(config, num_params));
}

Optimizer::Optimizer(const OptimizerConfig& config, int64_t num_params,
                     int64_t num_slots)
    : config_(config),
      num_params_(num_params),
      slots_(static_cast<size_t>(num_slots), 0.0f) {}

void Optimizer::CheckSizes(absl::Span<float> params,
                           absl::Span<const float> mean_grad) const {
  ABSL_RAW_CHECK(static_cast<int64_t>(params.size()) == num_params_,
                 "Optimizer::Step: params.size() != num_params()");
  ABSL_RAW_CHECK(static_cast<int64_t>(mean_grad.size()) == num_params_,
                 "Optimizer::Step: mean_grad.size() != num_params()");
}

OptimizerState Optimizer::State() const {
  OptimizerState state;
  state.steps = steps_;
  state.slots = slots_;
  return state;
}

absl::Status Optimizer::SetState(const OptimizerState& state) {
  if (state.steps < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer state.steps: expected >= 0, got %d", state.steps));
  }
  if (state.slots.size() != slots_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "optimizer state.slots: expected %d floats for kind \"%s\" "
        "(momentum %g) with %d params, got %d",
        slots_.size(), config_.kind, config_.momentum, num_params_,
        state.slots.size()));
  }
  steps_ = state.steps;
  slots_ = state.slots;
  return absl::OkStatus();
}

}  // namespace lockstep
