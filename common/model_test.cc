#include "common/model.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

struct Data {
  std::vector<float> x, y;
};

Data MakeData(int64_t n, int64_t d, int num_classes, uint64_t seed) {
  SplitMix64 rng(seed);
  Data data;
  for (int64_t i = 0; i < n * d; ++i) data.x.push_back(2 * rng.NextFloat() - 1);
  for (int64_t i = 0; i < n; ++i) {
    data.y.push_back(num_classes == 0 ? 3 * rng.NextFloat() - 1.5f
                                      : static_cast<float>(rng.Next() % num_classes));
  }
  return data;
}

// Central finite differences of the loss sum against the analytic gradient,
// for every parameter.
void CheckGradient(const std::string& spec, int64_t d, int classes) {
  SCOPED_TRACE(spec);
  auto model_or = CreateModel(spec, d, classes);
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  Model& model = **model_or;
  const int64_t n = 6;
  Data data = MakeData(n, d, classes, 42);
  std::vector<float> w(model.num_params()), g(model.num_params());
  model.Init(7, absl::MakeSpan(w));
  // Non-zero biases so they matter.
  for (const ParamBlock& b : model.layout())
    if (b.name[0] == 'b')
      for (int64_t i = 0; i < b.shape.num_elements(); ++i) w[b.offset + i] = 0.05f * (i % 3) - 0.02f;
  BatchStats s = model.LossAndGradSum(w, data.x.data(), data.y.data(), n, absl::MakeSpan(g));
  EXPECT_EQ(s.count, n);
  EXPECT_NEAR(s.loss_sum, model.Evaluate(w, data.x.data(), data.y.data(), n).loss_sum, 1e-5);
  const float eps = 1e-3f;
  int checked = 0;
  for (int64_t i = 0; i < model.num_params(); ++i) {
    const float orig = w[i];
    w[i] = orig + eps;
    double up = model.Evaluate(w, data.x.data(), data.y.data(), n).loss_sum;
    w[i] = orig - eps;
    double down = model.Evaluate(w, data.x.data(), data.y.data(), n).loss_sum;
    w[i] = orig;
    double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(g[i], fd, 5e-3 + 5e-3 * std::fabs(fd)) << "param " << i;
    ++checked;
  }
  EXPECT_EQ(checked, model.num_params());
}

TEST(ModelTest, GradientCheckLinear) { CheckGradient("linear", 5, 0); }
TEST(ModelTest, GradientCheckLogistic) { CheckGradient("logistic", 5, 2); }
TEST(ModelTest, GradientCheckSoftmax) { CheckGradient("softmax", 5, 4); }
TEST(ModelTest, GradientCheckMlpOneHidden) { CheckGradient("mlp:7", 5, 3); }
TEST(ModelTest, GradientCheckMlpTwoHidden) { CheckGradient("mlp:6,4", 5, 3); }

TEST(ModelTest, LayoutOfMlp784_256_10) {
  auto m = CreateModel("mlp:256", 784, 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->num_params(), 784 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ((*m)->Describe(), "mlp 784-256-10");
  ASSERT_EQ((*m)->layout().size(), 4u);
  EXPECT_EQ((*m)->layout()[2].name, "W1");
  EXPECT_EQ((*m)->layout()[2].offset, 784 * 256 + 256);
  auto deep = CreateModel("mlp:512,256", 784, 10);
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ((*deep)->Describe(), "mlp 784-512-256-10");
}

// The property data parallelism stands on: gradient sums of disjoint slices
// add up to the full batch's gradient sum, whatever the slice sizes.
TEST(ModelTest, SliceSumsAddUpToFullBatch) {
  auto m = CreateModel("mlp:8", 6, 3);
  ASSERT_TRUE(m.ok());
  Model& model = **m;
  const int64_t n = 11;
  Data data = MakeData(n, 6, 3, 5);
  std::vector<float> w(model.num_params()), full(model.num_params()), part(model.num_params()),
      acc(model.num_params(), 0.0f);
  model.Init(1, absl::MakeSpan(w));
  BatchStats whole = model.LossAndGradSum(w, data.x.data(), data.y.data(), n, absl::MakeSpan(full));
  double loss = 0;
  int64_t count = 0;
  const int64_t cuts[] = {0, 1, 1, 5, 11};  // slices of 1, 0, 4, 6 examples
  for (int s = 0; s + 1 < 5; ++s) {
    int64_t b = cuts[s], e = cuts[s + 1];
    BatchStats st = model.LossAndGradSum(w, data.x.data() + b * 6, data.y.data() + b, e - b,
                                         absl::MakeSpan(part));
    for (size_t i = 0; i < part.size(); ++i) acc[i] += part[i];
    loss += st.loss_sum;
    count += st.count;
  }
  EXPECT_EQ(count, n);
  EXPECT_NEAR(loss, whole.loss_sum, 1e-4);
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], full[i], 1e-4) << i;
}

TEST(ModelTest, EmptyBatchGivesZeroGradient) {
  auto m = CreateModel("softmax", 3, 2);
  ASSERT_TRUE(m.ok());
  std::vector<float> w((*m)->num_params(), 0.5f), g((*m)->num_params(), 9.0f);
  BatchStats s = (*m)->LossAndGradSum(w, nullptr, nullptr, 0, absl::MakeSpan(g));
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.loss_sum, 0);
  for (float v : g) EXPECT_EQ(v, 0.0f);
}

TEST(ModelTest, InitIsDeterministicAndSeedDependent) {
  auto m = CreateModel("mlp:32", 20, 10);
  ASSERT_TRUE(m.ok());
  std::vector<float> a((*m)->num_params()), b((*m)->num_params()), c((*m)->num_params());
  (*m)->Init(123, absl::MakeSpan(a));
  (*m)->Init(123, absl::MakeSpan(b));
  (*m)->Init(124, absl::MakeSpan(c));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
  // Weights within the He bound sqrt(6/20); biases zero.
  const float limit = std::sqrt(6.0f / 20.0f);
  for (int64_t i = 0; i < 20 * 32; ++i) EXPECT_LE(std::fabs(a[i]), limit);
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(a[20 * 32 + i], 0.0f);
  // Pinned value: SplitMix64 is platform independent, so this first weight
  // is the same on every machine.
  SplitMix64 r(MixSeed(123, 0));
  EXPECT_EQ(a[0], (2.0f * r.NextFloat() - 1.0f) * limit);
}

TEST(ModelTest, EvaluateCountsCorrectPredictions) {
  // softmax with W = identity on 2 features: predicts argmax of x.
  auto m = CreateModel("softmax", 2, 2);
  ASSERT_TRUE(m.ok());
  std::vector<float> w = {1, 0, 0, 1, 0, 0};
  std::vector<float> x = {3, 1, 0, 2, 5, 4};
  std::vector<float> y = {0, 1, 1};  // third is wrong
  EvalStats e = (*m)->Evaluate(w, x.data(), y.data(), 3);
  EXPECT_EQ(e.count, 3);
  EXPECT_EQ(e.correct, 2);
  EXPECT_TRUE(e.classification);
}

TEST(ModelTest, BadSpecsNameTheField) {
  auto unknown = CreateModel("resnet", 4, 10);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("unknown model \"resnet\""), std::string::npos);
  auto width = CreateModel("mlp:12,x", 4, 10);
  EXPECT_NE(width.status().message().find("hidden layer width \"x\""), std::string::npos);
  auto binary = CreateModel("logistic", 4, 10);
  EXPECT_NE(binary.status().message().find("needs binary labels"), std::string::npos);
  auto regress = CreateModel("softmax", 4, 0);
  EXPECT_NE(regress.status().message().find("real-valued targets"), std::string::npos);
}

TEST(ModelTest, SumToMeanDividesOnce) {
  std::vector<float> g = {1.64f, 8.0f};
  SumToMean(absl::MakeSpan(g), 4);
  EXPECT_FLOAT_EQ(g[0], 0.41f);
  EXPECT_EQ(g[1], 2.0f);
  SumToMean(absl::MakeSpan(g), 0);
  EXPECT_FLOAT_EQ(g[0], 0.41f);
}

// Found by tests/fuzz/job_spec_fuzz: widths near 2^63 overflowed the
// parameter count (signed overflow in Model's constructor).
TEST(ModelTest, HugeMlpWidthsAreRefusedNotOverflowed) {
  auto m = CreateModel("mlp:9223372036854775807,9223372036854775807", 1, 10);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("more than 1099511627776 parameters"),
            std::string::npos)
      << m.status();
  EXPECT_TRUE(CreateModel("mlp:1000000", 1, 10).ok());
}

}  // namespace
}  // namespace lockstep
