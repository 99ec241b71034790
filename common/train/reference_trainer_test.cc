#include "common/train/reference_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/data/sampler.h"

#include "common/rng.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// y = 2*x0 - 3*x1 + 0.5 exactly (no noise): linear regression must find it.
Dataset LinearData(int64_t n) {
  Dataset d;
  d.name = "synthetic-linear";
  d.num_examples = n;
  d.dim = 2;
  SplitMix64 r(3);
  for (int64_t i = 0; i < n; ++i) {
    float a = 2 * r.NextFloat() - 1, b = 2 * r.NextFloat() - 1;
    d.x.push_back(a);
    d.x.push_back(b);
    d.y.push_back(2 * a - 3 * b + 0.5f);
  }
  return d;
}

// Three Gaussian-ish blobs in 4-D: softmax and the MLP separate them.
Dataset Blobs(int64_t n, uint64_t seed) {
  Dataset d;
  d.name = "synthetic-blobs";
  d.num_examples = n;
  d.dim = 4;
  d.num_classes = 3;
  SplitMix64 r(seed);
  for (int64_t i = 0; i < n; ++i) {
    int c = static_cast<int>(r.Next() % 3);
    for (int j = 0; j < 4; ++j) {
      float center = (j == c) ? 2.0f : 0.0f;
      d.x.push_back(center + (r.NextFloat() - 0.5f));
    }
    d.y.push_back(static_cast<float>(c));
  }
  return d;
}

// `epochs` epochs of `model` at batch `batch`, lr 0.1, no momentum.
TrainSpec EpochSpec(const char* model, int64_t batch, int64_t epochs) {
  TrainSpec spec;
  spec.model = model;
  spec.global_batch = batch;
  spec.epochs = epochs;
  spec.lr.base_lr = 0.1f;
  return spec;
}

TEST(ReferenceTrainerTest, LinearRegressionRecoversTheTrueWeights) {
  TrainSpec spec = EpochSpec("linear", 16, 60);
  Dataset train = LinearData(200), test;
  auto r = TrainReference(spec, train, test, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  auto w = r->replica->params();
  EXPECT_NEAR(w[0], 2.0f, 1e-3);
  EXPECT_NEAR(w[1], -3.0f, 1e-3);
  EXPECT_NEAR(w[2], 0.5f, 1e-3);
  EXPECT_EQ(r->steps, 60 * 13);  // ceil(200/16) = 13 steps per epoch
  EXPECT_LT(r->final_loss, 1e-5);
}

TEST(ReferenceTrainerTest, SoftmaxAndMlpLearnBlobsAndReportEachEpoch) {
  for (const char* model : {"softmax", "mlp:16"}) {
    SCOPED_TRACE(model);
    TrainSpec spec;
    spec.model = model;
    spec.global_batch = 10;  // does not divide 301
    spec.epochs = 3;
    spec.lr.base_lr = 0.1f;
    spec.optimizer.momentum = 0.9f;
    std::vector<EpochReport> reports;
    auto r = TrainReference(spec, Blobs(301, 1), Blobs(100, 2),
                            [&](const EpochReport& e) { reports.push_back(e); });
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(reports.size(), 3u);
    EXPECT_EQ(reports[2].step, 3 * 31);
    EXPECT_GT(reports[0].train_loss, reports[2].train_loss);
    EXPECT_GE(r->test_accuracy, 0.95);
    EXPECT_TRUE(r->has_test);
  }
}

// lockstep-train --eval_each_epoch=false (as a job's): the test split is
// evaluated after the last step only, and the training is the same.
TEST(ReferenceTrainerTest, EvalEachEpochFalseEvaluatesAfterTheLastStepOnly) {
  TrainSpec spec = EpochSpec("softmax", 10, 3);
  Dataset train = Blobs(301, 1), test = Blobs(100, 2);
  std::vector<EpochReport> each, last;
  auto a = TrainReference(spec, train, test, [&](const EpochReport& e) { each.push_back(e); });
  auto b = TrainReference(spec, train, test, [&](const EpochReport& e) { last.push_back(e); },
                          std::nullopt, /*eval_each_epoch=*/false);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(each.size(), 3u);
  ASSERT_EQ(last.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(each[i].has_test);
    EXPECT_EQ(last[i].has_test, i == 2);
    EXPECT_EQ(last[i].train_loss, each[i].train_loss);
  }
  EXPECT_EQ(last[2].test_accuracy, each[2].test_accuracy);
  EXPECT_TRUE(b->has_test);
  EXPECT_EQ(b->test_accuracy, a->test_accuracy);
  EXPECT_EQ(b->weights_hash, a->weights_hash);
}

TEST(ReferenceTrainerTest, SameSpecSameHashOtherSeedOtherHash) {
  TrainSpec spec;
  spec.model = "mlp:8";
  spec.global_batch = 7;
  spec.steps = 25;
  spec.optimizer.kind = "adam";
  spec.lr.base_lr = 0.01f;
  Dataset train = Blobs(50, 4), test;
  auto a = TrainReference(spec, train, test, nullptr);
  auto b = TrainReference(spec, train, test, nullptr);
  spec.seed = 2;
  auto c = TrainReference(spec, train, test, nullptr);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->steps, 25);
  EXPECT_EQ(a->weights_hash, b->weights_hash);
  EXPECT_EQ(a->weights_hash.size(), 32u);
  EXPECT_NE(a->weights_hash, c->weights_hash);
  EXPECT_EQ(std::memcmp(a->replica->params().data(), b->replica->params().data(),
                        a->replica->num_params() * sizeof(float)),
            0);
}

TEST(ReferenceTrainerTest, BadSpecsNameTheField) {
  Dataset train = Blobs(20, 1), test;
  TrainSpec spec;
  spec.model = "softmax";
  spec.global_batch = 0;
  auto r = TrainReference(spec, train, test, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("global_batch"), std::string::npos);
  spec.global_batch = 4;
  spec.lr.base_lr = -0.1f;
  r = TrainReference(spec, train, test, nullptr);
  EXPECT_NE(r.status().message().find("base_lr"), std::string::npos) << r.status();
  spec.lr.base_lr = 0.1f;
  spec.model = "logistic";
  r = TrainReference(spec, train, test, nullptr);
  EXPECT_NE(r.status().message().find("binary"), std::string::npos) << r.status();
  EXPECT_EQ(ValidateTrainSpec(spec, 5).message(),
            "global_batch: expected >= number of workers (5), got 4");
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// --on_nonfinite in the reference trainer. One training example has a NaN
// feature: exactly the steps whose batch holds it have a non-finite
// gradient. skip leaves out exactly those updates (the weights equal a
// hand-written loop that applies every other step, bit for bit); fail stops
// at the first of them, naming it; no policy trains on NaN as before.
TEST(ReferenceTrainerNonFiniteTest, SkipLeavesOutExactlyTheStepsWithTheBadExample) {
  TrainSpec spec;
  spec.model = "softmax";
  spec.global_batch = 10;
  spec.epochs = 3;
  spec.lr.base_lr = 0.1f;
  spec.optimizer.momentum = 0.9f;
  Dataset train = Blobs(60, 1), test;
  constexpr int64_t kBad = 17;
  train.x[kBad * train.dim + 2] = std::numeric_limits<float>::quiet_NaN();
  GlobalBatchSampler sampler(train.num_examples, spec.global_batch, spec.seed);
  const int64_t total = TotalSteps(spec, train.num_examples);
  std::vector<int64_t> bad_steps;
  auto want = Replica::Create(spec, train.dim, train.num_classes);
  ASSERT_TRUE(want.ok());
  for (int64_t step = 0; step < total; ++step) {
    const std::vector<int64_t> batch = sampler.Batch(step);
    BatchStats s = (*want)->ComputeGradSum(train, batch);
    if (std::find(batch.begin(), batch.end(), kBad) != batch.end()) {
      bad_steps.push_back(step);
    } else {
      (*want)->Apply(step, s.count);
    }
  }
  ASSERT_EQ(bad_steps.size(), 3u);  // once per epoch

  auto skipped = TrainReference(spec, train, test, nullptr, NonFinitePolicy::kSkip);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->skipped_steps, 3);
  EXPECT_EQ(skipped->last_skipped_step, bad_steps.back());
  EXPECT_EQ(skipped->weights_hash, (*want)->Hash().ToHex());
  EXPECT_TRUE(std::isfinite(skipped->final_loss));

  auto failed = TrainReference(spec, train, test, nullptr, NonFinitePolicy::kFail);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(failed.status().message(), absl::StrCat("non-finite gradient at step ", bad_steps[0],
                                                    " (--on_nonfinite: fail)"));

  // No policy: the plain arithmetic, which trains on the NaN.
  auto unchecked = TrainReference(spec, train, test, nullptr);
  ASSERT_TRUE(unchecked.ok());
  EXPECT_EQ(unchecked->skipped_steps, 0);
  EXPECT_NE(unchecked->weights_hash, skipped->weights_hash);
}

}  // namespace
}  // namespace lockstep
