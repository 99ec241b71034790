#include "common/optim/lr_schedule.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(LrScheduleTest, ConstantIsBaseLr) {
  LrScheduleConfig c;
  ASSERT_TRUE(ValidateLrSchedule(c, 1024).ok());
  EXPECT_EQ(LearningRate(c, 1024, 0), 0.1f);
  EXPECT_EQ(LearningRate(c, 1024, 1000000), 0.1f);
}

TEST(LrScheduleTest, LinearScaling) {
  LrScheduleConfig c;
  c.base_lr = 0.1f;
  c.linear_scaling = true;
  c.reference_batch = 256;
  ASSERT_TRUE(ValidateLrSchedule(c, 1024).ok());
  EXPECT_FLOAT_EQ(PeakLearningRate(c, 1024), 0.4f);
  EXPECT_FLOAT_EQ(LearningRate(c, 1024, 0), 0.4f);
  EXPECT_FLOAT_EQ(LearningRate(c, 128, 0), 0.05f);
  c.linear_scaling = false;
  EXPECT_EQ(LearningRate(c, 1024, 0), 0.1f);
}

TEST(LrScheduleTest, WarmupFromStartFactorToPeak) {
  LrScheduleConfig c;
  c.base_lr = 0.1f;
  c.linear_scaling = true;
  c.warmup_steps = 10;
  c.warmup_start_factor = 0.25f;
  const int64_t b = 1024;  // peak 0.4
  ASSERT_TRUE(ValidateLrSchedule(c, b).ok());
  EXPECT_FLOAT_EQ(LearningRate(c, b, 0), 0.1f);   // 0.4 * 0.25
  EXPECT_FLOAT_EQ(LearningRate(c, b, 5), 0.25f);  // 0.4 * (0.25 + 0.75 * 0.5)
  EXPECT_FLOAT_EQ(LearningRate(c, b, 9), 0.37f);  // 0.4 * (0.25 + 0.75 * 0.9)
  EXPECT_FLOAT_EQ(LearningRate(c, b, 10), 0.4f);  // first post-warm-up step
  EXPECT_FLOAT_EQ(LearningRate(c, b, 11), 0.4f);
  // Monotone non-decreasing through warm-up.
  for (int64_t s = 1; s <= 10; ++s) {
    EXPECT_GT(LearningRate(c, b, s), LearningRate(c, b, s - 1)) << s;
  }
}

TEST(LrScheduleTest, GoyalWarmupStartsAtBaseLr) {
  // Goyal et al.: ramp from base_lr to base_lr * B / 256.
  LrScheduleConfig c;
  c.base_lr = 0.1f;
  c.linear_scaling = true;
  c.warmup_steps = 100;
  c.warmup_start_factor = 256.0f / 8192.0f;
  ASSERT_TRUE(ValidateLrSchedule(c, 8192).ok());
  EXPECT_FLOAT_EQ(LearningRate(c, 8192, 0), 0.1f);
  EXPECT_FLOAT_EQ(LearningRate(c, 8192, 100), 3.2f);
}

TEST(LrScheduleTest, DefaultWarmupStartsAtZero) {
  LrScheduleConfig c;
  c.base_lr = 1.0f;
  c.warmup_steps = 4;
  EXPECT_EQ(LearningRate(c, 1, 0), 0.0f);
  EXPECT_EQ(LearningRate(c, 1, 1), 0.25f);
  EXPECT_EQ(LearningRate(c, 1, 2), 0.5f);
  EXPECT_EQ(LearningRate(c, 1, 3), 0.75f);
  EXPECT_EQ(LearningRate(c, 1, 4), 1.0f);
}

TEST(LrScheduleTest, StepDecayBoundaries) {
  LrScheduleConfig c;
  c.base_lr = 0.1f;
  c.decay = "step";
  c.step_size = 30;
  c.gamma = 0.1f;
  ASSERT_TRUE(ValidateLrSchedule(c, 256).ok());
  EXPECT_FLOAT_EQ(LearningRate(c, 256, 0), 0.1f);
  EXPECT_FLOAT_EQ(LearningRate(c, 256, 29), 0.1f);
  EXPECT_FLOAT_EQ(LearningRate(c, 256, 30), 0.01f);
  EXPECT_FLOAT_EQ(LearningRate(c, 256, 59), 0.01f);
  EXPECT_FLOAT_EQ(LearningRate(c, 256, 60), 0.001f);
  EXPECT_FLOAT_EQ(LearningRate(c, 256, 90), 0.0001f);
}

TEST(LrScheduleTest, StepDecayCountsFromEndOfWarmup) {
  LrScheduleConfig c;
  c.base_lr = 1.0f;
  c.warmup_steps = 5;
  c.decay = "step";
  c.step_size = 10;
  c.gamma = 0.5f;
  ASSERT_TRUE(ValidateLrSchedule(c, 1).ok());
  EXPECT_EQ(LearningRate(c, 1, 0), 0.0f);
  EXPECT_EQ(LearningRate(c, 1, 5), 1.0f);
  EXPECT_EQ(LearningRate(c, 1, 14), 1.0f);
  EXPECT_EQ(LearningRate(c, 1, 15), 0.5f);
  EXPECT_EQ(LearningRate(c, 1, 25), 0.25f);
}

TEST(LrScheduleTest, CosineEndpointsAndMidpoint) {
  LrScheduleConfig c;
  c.base_lr = 1.0f;
  c.decay = "cosine";
  c.total_steps = 100;
  ASSERT_TRUE(ValidateLrSchedule(c, 1).ok());
  EXPECT_EQ(LearningRate(c, 1, 0), 1.0f);
  EXPECT_EQ(LearningRate(c, 1, 50), 0.5f);
  EXPECT_EQ(LearningRate(c, 1, 100), 0.0f);
  EXPECT_EQ(LearningRate(c, 1, 150), 0.0f);
  EXPECT_FLOAT_EQ(LearningRate(c, 1, 25), (1.0 + std::sqrt(0.5)) / 2);
  EXPECT_FLOAT_EQ(LearningRate(c, 1, 75), (1.0 - std::sqrt(0.5)) / 2);
}

TEST(LrScheduleTest, CosineWithWarmupAndMinLr) {
  LrScheduleConfig c;
  c.base_lr = 0.1f;
  c.linear_scaling = true;  // peak 0.4 at B = 1024
  c.warmup_steps = 10;
  c.decay = "cosine";
  c.total_steps = 110;
  c.min_lr = 0.01f;
  const int64_t b = 1024;
  ASSERT_TRUE(ValidateLrSchedule(c, b).ok());
  EXPECT_FLOAT_EQ(LearningRate(c, b, 5), 0.2f);    // warm-up
  EXPECT_FLOAT_EQ(LearningRate(c, b, 10), 0.4f);   // peak at end of warm-up
  EXPECT_FLOAT_EQ(LearningRate(c, b, 60), 0.205f); // (peak + min_lr) / 2
  EXPECT_FLOAT_EQ(LearningRate(c, b, 110), 0.01f);
  EXPECT_FLOAT_EQ(LearningRate(c, b, 1000), 0.01f);
  const double pi = std::acos(-1.0);
  for (int64_t s = 10; s <= 110; ++s) {
    const double want =
        0.01 + (0.4 - 0.01) * (1 + std::cos(pi * (s - 10) / 100.0)) / 2;
    EXPECT_NEAR(LearningRate(c, b, s), want, 1e-7) << "step " << s;
    if (s > 10) {
      EXPECT_LT(LearningRate(c, b, s), LearningRate(c, b, s - 1)) << s;
    }
  }
}

void ExpectInvalid(const LrScheduleConfig& c, int64_t batch,
                   const std::string& field, const std::string& got) {
  const absl::Status s = ValidateLrSchedule(c, batch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(s.message(), HasSubstr("lr_schedule." + field + ":"));
  EXPECT_THAT(s.message(), HasSubstr(got));
}

TEST(LrScheduleValidateTest, ErrorsNameTheField) {
  LrScheduleConfig c;
  c.base_lr = -0.1f;
  ExpectInvalid(c, 256, "base_lr", "expected finite and > 0, got -0.1");
  c.base_lr = std::nanf("");
  ExpectInvalid(c, 256, "base_lr", "nan");

  ExpectInvalid(LrScheduleConfig{}, 0, "global_batch", "got 0");

  c = LrScheduleConfig{};
  c.linear_scaling = true;
  c.reference_batch = 0;
  ExpectInvalid(c, 256, "reference_batch", "got 0");

  c = LrScheduleConfig{};
  c.warmup_steps = -1;
  ExpectInvalid(c, 256, "warmup_steps", "got -1");

  c = LrScheduleConfig{};
  c.warmup_start_factor = 1.5f;
  ExpectInvalid(c, 256, "warmup_start_factor", "got 1.5");

  c = LrScheduleConfig{};
  c.decay = "linear";
  ExpectInvalid(c, 256, "decay", "\"linear\"");

  c = LrScheduleConfig{};
  c.decay = "step";
  ExpectInvalid(c, 256, "step_size", "got 0");
  c.step_size = 10;
  c.gamma = 0.0f;
  ExpectInvalid(c, 256, "gamma", "got 0");
  c.gamma = 0.5f;
  EXPECT_TRUE(ValidateLrSchedule(c, 256).ok());

  c = LrScheduleConfig{};
  c.decay = "cosine";
  c.warmup_steps = 10;
  c.total_steps = 10;
  ExpectInvalid(c, 256, "total_steps", "got 10");
  c.total_steps = 100;
  c.min_lr = 0.5f;  // above peak 0.1
  ExpectInvalid(c, 256, "min_lr", "got 0.5");
  c.min_lr = 0.05f;
  EXPECT_TRUE(ValidateLrSchedule(c, 256).ok());
}

}  // namespace
}  // namespace lockstep
