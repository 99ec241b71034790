#include "common/optim/optimizer.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Optimizer> MustCreate(const OptimizerConfig& config,
                                      int64_t n) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(config, n);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

// Deterministic pseudo-random values in [-1, 1) (LCG; no global state).
std::vector<float> Pseudo(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp of an empty vector's data() (may be null) is undefined.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// ---------------------------------------------------------------- SGD

TEST(SgdTest, ClosedFormSingleStep) {
  auto opt = MustCreate(OptimizerConfig{}, 1);
  std::vector<float> w = {1.0f};
  const std::vector<float> g = {0.5f};
  opt->Step(absl::MakeSpan(w), g, 0.1f);
  EXPECT_FLOAT_EQ(w[0], 0.95f);
  EXPECT_EQ(w[0], 1.0f - 0.1f * 0.5f);  // exact float formula
  EXPECT_EQ(opt->steps(), 1);
  EXPECT_EQ(opt->num_slots(), 0);
}

TEST(SgdTest, MeanGradientWorkedFactAndReplicasStayBitIdentical) {
  // Gradient SUM 4.1 over COUNT 10 examples -> mean 0.41; lr 0.1 moves each
  // weight by -0.041.
  const float sum = 4.1f;
  const float count = 10.0f;
  const float mean = sum / count;
  EXPECT_NEAR(mean, 0.41f, 1e-7);

  OptimizerConfig config;
  auto a = MustCreate(config, 3);
  auto b = MustCreate(config, 3);
  std::vector<float> wa = {0.7f, -2.0f, 0.0f};
  std::vector<float> wb = wa;
  const std::vector<float> g(3, mean);
  a->Step(absl::MakeSpan(wa), g, 0.1f);
  b->Step(absl::MakeSpan(wb), g, 0.1f);
  EXPECT_NEAR(wa[0] - 0.7f, -0.041f, 1e-7);
  EXPECT_NEAR(wa[1] - -2.0f, -0.041f, 2e-7);
  EXPECT_NEAR(wa[2], -0.041f, 1e-8);
  EXPECT_TRUE(SameBits(wa, wb));
}

TEST(SgdTest, ReplicasWithMomentumStayBitIdenticalOverManySteps) {
  OptimizerConfig config;
  config.momentum = 0.9f;
  config.nesterov = true;
  config.weight_decay = 1e-4f;
  const size_t n = 4097;
  auto a = MustCreate(config, n);
  auto b = MustCreate(config, n);
  std::vector<float> wa = Pseudo(n, 1);
  std::vector<float> wb = wa;
  for (uint32_t step = 0; step < 20; ++step) {
    const std::vector<float> g = Pseudo(n, 100 + step);
    a->Step(absl::MakeSpan(wa), g, 0.05f);
    b->Step(absl::MakeSpan(wb), g, 0.05f);
  }
  EXPECT_TRUE(SameBits(wa, wb));
  EXPECT_TRUE(SameBits(a->State().slots, b->State().slots));
  EXPECT_EQ(a->steps(), 20);
}

TEST(SgdTest, MomentumThreeStepsMatchHandComputation) {
  OptimizerConfig config;
  config.momentum = 0.9f;
  auto opt = MustCreate(config, 1);
  EXPECT_EQ(opt->num_slots(), 1);
  std::vector<float> w = {1.0f};
  // v1 = 1            w1 = 1    - 0.1*1    = 0.9
  // v2 = 0.9*1 + 0.5  = 1.4     w2 = 0.9  - 0.14  = 0.76
  // v3 = 0.9*1.4-0.25 = 1.01    w3 = 0.76 - 0.101 = 0.659
  const float grads[] = {1.0f, 0.5f, -0.25f};
  const float want_w[] = {0.9f, 0.76f, 0.659f};
  const float want_v[] = {1.0f, 1.4f, 1.01f};
  for (int i = 0; i < 3; ++i) {
    opt->Step(absl::MakeSpan(w), {grads[i]}, 0.1f);
    EXPECT_NEAR(w[0], want_w[i], 1e-6) << "step " << i;
    EXPECT_NEAR(opt->slots()[0], want_v[i], 1e-6) << "step " << i;
  }
}

TEST(SgdTest, FirstMomentumStepIgnoresStaleBuffer) {
  // PyTorch initialises the buffer to the first gradient; a state restored
  // with steps == 0 must behave the same whatever the buffer holds.
  OptimizerConfig config;
  config.momentum = 0.5f;
  auto opt = MustCreate(config, 1);
  ASSERT_TRUE(opt->SetState(OptimizerState{0, {123.0f}}).ok());
  std::vector<float> w = {0.0f};
  opt->Step(absl::MakeSpan(w), {2.0f}, 0.25f);
  EXPECT_EQ(w[0], -0.5f);
  EXPECT_EQ(opt->slots()[0], 2.0f);
}

TEST(SgdTest, WeightDecayAddsL2ToGradient) {
  OptimizerConfig config;
  config.weight_decay = 0.1f;
  auto opt = MustCreate(config, 2);
  std::vector<float> w = {2.0f, -1.0f};
  // g' = g + 0.1 * w: {0.5 + 0.2, 0 - 0.1}; w -= 0.1 * g'.
  opt->Step(absl::MakeSpan(w), {0.5f, 0.0f}, 0.1f);
  EXPECT_NEAR(w[0], 1.93f, 1e-6);
  EXPECT_NEAR(w[1], -0.99f, 1e-6);
}

TEST(SgdTest, NesterovTwoSteps) {
  OptimizerConfig config;
  config.momentum = 0.9f;
  config.nesterov = true;
  auto opt = MustCreate(config, 1);
  std::vector<float> w = {1.0f};
  // step 1: v = 1,   g = 1 + 0.9*1   = 1.9,  w = 1    - 0.19  = 0.81
  opt->Step(absl::MakeSpan(w), {1.0f}, 0.1f);
  EXPECT_NEAR(w[0], 0.81f, 1e-6);
  // step 2: v = 1.9, g = 1 + 0.9*1.9 = 2.71, w = 0.81 - 0.271 = 0.539
  opt->Step(absl::MakeSpan(w), {1.0f}, 0.1f);
  EXPECT_NEAR(w[0], 0.539f, 1e-6);
  EXPECT_NEAR(opt->slots()[0], 1.9f, 1e-6);
}

TEST(SgdTest, EmptyParameterVector) {
  OptimizerConfig config;
  config.momentum = 0.9f;
  auto opt = MustCreate(config, 0);
  std::vector<float> w;
  opt->Step(absl::MakeSpan(w), {}, 0.1f);
  EXPECT_EQ(opt->steps(), 1);
  EXPECT_EQ(opt->num_slots(), 0);
}

// Records the chunks an observed Step reports.
class ChunkRecorder : public UpdateObserver {
 public:
  void Updated(int64_t begin, int64_t end) override { chunks.push_back({begin, end}); }
  std::vector<std::pair<int64_t, int64_t>> chunks;
};

TEST(UpdateObserverTest, ObservedStepsAreBitIdenticalAndCoverEveryParameterOnce) {
  // Every kind and variant: the chunked update with an observer gives the
  // same bits as the one-piece update, over several steps (momentum's first
  // step differs), and the chunks are consecutive, <= kChunkFloats, from 0
  // to N (N not a multiple of the chunk).
  const int64_t n = 3 * UpdateObserver::kChunkFloats + 5;
  std::vector<OptimizerConfig> configs(6);
  configs[1].momentum = 0.9f;
  configs[2].momentum = 0.9f;
  configs[2].nesterov = true;
  configs[2].weight_decay = 0.01f;
  configs[3].weight_decay = 0.001f;
  configs[4].kind = "adam";
  configs[5].kind = "adamw";
  configs[5].weight_decay = 0.02f;
  for (size_t c = 0; c < configs.size(); ++c) {
    auto plain = Optimizer::Create(configs[c], n);
    auto observed = Optimizer::Create(configs[c], n);
    ASSERT_TRUE(plain.ok() && observed.ok());
    std::vector<float> wa = Pseudo(n, 1), wb = wa;
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = Pseudo(n, 10 + step);
      ChunkRecorder rec;
      (*plain)->Step(absl::MakeSpan(wa), g, 0.05f);
      (*observed)->Step(absl::MakeSpan(wb), g, 0.05f, &rec);
      EXPECT_TRUE(SameBits(wa, wb)) << "config " << c << " step " << step;
      EXPECT_TRUE(SameBits((*plain)->State().slots, (*observed)->State().slots))
          << "config " << c << " step " << step;
      ASSERT_FALSE(rec.chunks.empty());
      int64_t next = 0;
      for (const auto& [b, e] : rec.chunks) {
        EXPECT_EQ(b, next);
        EXPECT_GT(e, b);
        EXPECT_LE(e - b, UpdateObserver::kChunkFloats);
        next = e;
      }
      EXPECT_EQ(next, n);
    }
    EXPECT_EQ((*observed)->steps(), 3);
  }
  // No parameters: no call.
  auto empty = Optimizer::Create(configs[1], 0);
  ASSERT_TRUE(empty.ok());
  ChunkRecorder rec;
  std::vector<float> none;
  (*empty)->Step(absl::MakeSpan(none), none, 0.1f, &rec);
  EXPECT_TRUE(rec.chunks.empty());
}

TEST(SgdDeathTest, SizeMismatchAborts) {
  auto opt = MustCreate(OptimizerConfig{}, 2);
  std::vector<float> w = {1.0f};
  const std::vector<float> g = {1.0f};
  EXPECT_DEATH(opt->Step(absl::MakeSpan(w), g, 0.1f), "num_params");
}

// ---------------------------------------------------------------- Adam

// Double-precision reference implementation of the documented formulas.
struct AdamRef {
  double b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> m, s;
  int64_t t = 0;
  void Step(std::vector<double>& w, const std::vector<double>& grad,
            double lr) {
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      double g = grad[i];
      if (decoupled) {
        w[i] *= 1.0 - lr * wd;
      } else {
        g += wd * w[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      s[i] = b2 * s[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double shat = s[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(shat) + eps);
    }
  }
};

TEST(AdamTest, FirstStepMovesByLrTimesSign) {
  OptimizerConfig config;
  config.kind = "adam";
  const std::vector<float> g = {0.5f, -3.0f, 1e-3f, -1e-2f, 0.0f, 40.0f};
  const size_t n = g.size();
  auto opt = MustCreate(config, n);
  EXPECT_EQ(opt->num_slots(), 2 * static_cast<int64_t>(n));
  std::vector<float> w(n, 1.0f);
  const float lr = 0.01f;
  opt->Step(absl::MakeSpan(w), g, lr);
  for (size_t i = 0; i < n; ++i) {
    const float sign = g[i] > 0 ? 1.0f : (g[i] < 0 ? -1.0f : 0.0f);
    EXPECT_NEAR(w[i] - 1.0f, -lr * sign, 1e-6) << "i=" << i;
  }
  EXPECT_EQ(w[4], 1.0f);  // zero gradient: no movement at all
}

void CompareAdamWithReference(const OptimizerConfig& config) {
  const std::vector<float> w0 = {1.0f, -0.5f, 0.25f, 2.0f, 0.0f};
  const std::vector<std::vector<float>> grads = {
      {0.1f, -0.2f, 0.3f, -1.5f, 0.05f},
      {0.3f, 0.1f, -0.4f, 0.5f, 0.0f},
      {-0.2f, -0.6f, 0.1f, 0.25f, 2.0f},
  };
  const float lrs[] = {1e-2f, 5e-3f, 1e-2f};
  auto opt = MustCreate(config, w0.size());
  std::vector<float> w = w0;
  AdamRef ref{config.beta1, config.beta2, config.eps, config.weight_decay,
              config.kind == "adamw", std::vector<double>(w0.size(), 0.0),
              std::vector<double>(w0.size(), 0.0)};
  std::vector<double> wref(w0.begin(), w0.end());
  for (int step = 0; step < 3; ++step) {
    opt->Step(absl::MakeSpan(w), grads[step], lrs[step]);
    ref.Step(wref, std::vector<double>(grads[step].begin(), grads[step].end()),
             lrs[step]);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(w[i], wref[i], 1e-6) << "step " << step << " i " << i;
      EXPECT_NEAR(opt->slots()[i], ref.m[i], 1e-6);
      EXPECT_NEAR(opt->slots()[w.size() + i], ref.s[i], 1e-6);
    }
  }
  EXPECT_EQ(opt->steps(), 3);
}

TEST(AdamTest, ThreeStepsMatchDoubleReference) {
  OptimizerConfig config;
  config.kind = "adam";
  CompareAdamWithReference(config);
}

TEST(AdamTest, L2WeightDecayMatchesDoubleReference) {
  OptimizerConfig config;
  config.kind = "adam";
  config.weight_decay = 0.1f;
  config.beta1 = 0.8f;
  config.beta2 = 0.99f;
  CompareAdamWithReference(config);
}

TEST(AdamTest, DecoupledAdamWMatchesDoubleReference) {
  OptimizerConfig config;
  config.kind = "adamw";
  config.weight_decay = 0.5f;
  CompareAdamWithReference(config);
}

TEST(AdamTest, AdamWDiffersFromL2Adam) {
  OptimizerConfig l2;
  l2.kind = "adam";
  l2.weight_decay = 0.5f;
  OptimizerConfig decoupled = l2;
  decoupled.kind = "adamw";
  auto a = MustCreate(l2, 1);
  auto b = MustCreate(decoupled, 1);
  std::vector<float> wa = {1.0f}, wb = {1.0f};
  // Zero gradient: L2-Adam sees g = 0.5 and moves by ~lr; AdamW only decays
  // by the factor (1 - lr * wd) = 0.995.
  a->Step(absl::MakeSpan(wa), {0.0f}, 0.01f);
  b->Step(absl::MakeSpan(wb), {0.0f}, 0.01f);
  EXPECT_NEAR(wa[0], 0.99f, 1e-6);
  EXPECT_NEAR(wb[0], 0.995f, 1e-7);
}

// ---------------------------------------------------------------- state

void CheckStateRoundTrip(const OptimizerConfig& config) {
  const size_t n = 257;
  auto a = MustCreate(config, n);
  std::vector<float> wa = Pseudo(n, 7);
  for (uint32_t s = 0; s < 2; ++s) {
    a->Step(absl::MakeSpan(wa), Pseudo(n, 50 + s), 0.01f);
  }
  const OptimizerState snapshot = a->State();
  EXPECT_EQ(snapshot.steps, 2);

  auto b = MustCreate(config, n);
  ASSERT_TRUE(b->SetState(snapshot).ok());
  EXPECT_EQ(b->steps(), 2);
  std::vector<float> wb = wa;
  for (uint32_t s = 2; s < 5; ++s) {
    const std::vector<float> g = Pseudo(n, 50 + s);
    a->Step(absl::MakeSpan(wa), g, 0.01f);
    b->Step(absl::MakeSpan(wb), g, 0.01f);
  }
  EXPECT_TRUE(SameBits(wa, wb));
  EXPECT_TRUE(SameBits(a->State().slots, b->State().slots));
  EXPECT_EQ(a->steps(), 5);
  EXPECT_EQ(b->steps(), 5);
}

TEST(StateTest, SgdMomentumRoundTripIsBitIdentical) {
  OptimizerConfig config;
  config.momentum = 0.9f;
  config.weight_decay = 1e-3f;
  CheckStateRoundTrip(config);
}

TEST(StateTest, AdamRoundTripIsBitIdentical) {
  OptimizerConfig config;
  config.kind = "adam";
  CheckStateRoundTrip(config);
}

TEST(StateTest, AdamStepCounterAffectsUpdate) {
  OptimizerConfig config;
  config.kind = "adam";
  auto a = MustCreate(config, 1);
  auto b = MustCreate(config, 1);
  ASSERT_TRUE(a->SetState(OptimizerState{1, {0.1f, 0.01f}}).ok());
  ASSERT_TRUE(b->SetState(OptimizerState{5, {0.1f, 0.01f}}).ok());
  std::vector<float> wa = {1.0f}, wb = {1.0f};
  a->Step(absl::MakeSpan(wa), {0.5f}, 0.01f);
  b->Step(absl::MakeSpan(wb), {0.5f}, 0.01f);
  EXPECT_NE(wa[0], wb[0]);
}

TEST(StateTest, SetStateRejectsWrongSizeAndNegativeSteps) {
  OptimizerConfig config;
  config.kind = "adam";
  auto opt = MustCreate(config, 3);
  absl::Status s = opt->SetState(OptimizerState{0, std::vector<float>(3)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("state.slots"));
  EXPECT_THAT(s.message(), HasSubstr("expected 6"));
  s = opt->SetState(OptimizerState{-1, std::vector<float>(6)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("state.steps"));
  EXPECT_EQ(opt->steps(), 0);  // unchanged on error
  EXPECT_TRUE(opt->SetState(OptimizerState{4, std::vector<float>(6, 1.0f)}).ok());
  EXPECT_EQ(opt->steps(), 4);
  EXPECT_EQ(opt->slots()[5], 1.0f);
}

// ---------------------------------------------------------------- validation

void ExpectInvalid(const OptimizerConfig& config, const std::string& field,
                   const std::string& got) {
  const absl::Status s = ValidateOptimizerConfig(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(s.message(), HasSubstr("optimizer." + field + ":"));
  EXPECT_THAT(s.message(), HasSubstr(got));
  EXPECT_FALSE(Optimizer::Create(config, 1).ok());
}

TEST(ValidateTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateOptimizerConfig(OptimizerConfig{}).ok());
  OptimizerConfig adam;
  adam.kind = "adam";
  EXPECT_TRUE(ValidateOptimizerConfig(adam).ok());
  adam.kind = "adamw";
  adam.weight_decay = 0.01f;
  EXPECT_TRUE(ValidateOptimizerConfig(adam).ok());
}

TEST(ValidateTest, ErrorsNameTheField) {
  OptimizerConfig c;
  c.momentum = 1.5f;
  ExpectInvalid(c, "momentum", "expected in [0, 1), got 1.5");
  c.momentum = std::nanf("");
  ExpectInvalid(c, "momentum", "nan");
  c = OptimizerConfig{};
  c.kind = "rmsprop";
  ExpectInvalid(c, "kind", "\"rmsprop\"");
  c = OptimizerConfig{};
  c.nesterov = true;
  ExpectInvalid(c, "nesterov", "momentum");
  c = OptimizerConfig{};
  c.weight_decay = -0.5f;
  ExpectInvalid(c, "weight_decay", "-0.5");
  c = OptimizerConfig{};
  c.kind = "adam";
  c.beta1 = 1.0f;
  ExpectInvalid(c, "beta1", "got 1");
  c = OptimizerConfig{};
  c.kind = "adam";
  c.beta2 = -0.1f;
  ExpectInvalid(c, "beta2", "got -0.1");
  c = OptimizerConfig{};
  c.kind = "adamw";
  c.eps = 0.0f;
  ExpectInvalid(c, "eps", "got 0");
  c = OptimizerConfig{};
  c.kind = "adam";
  c.momentum = 0.9f;
  ExpectInvalid(c, "momentum", "0.9");
}

TEST(ValidateTest, CreateRejectsNegativeParamCount) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(OptimizerConfig{}, -1);
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(opt.status().message(), HasSubstr("optimizer.num_params"));
}

}  // namespace
}  // namespace lockstep
