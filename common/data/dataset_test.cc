#include "common/data/dataset.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

Dataset Make(std::vector<float> x, int64_t dim, std::vector<float> y,
             int num_classes) {
  Dataset d;
  d.name = "t";
  d.dim = dim;
  d.num_examples = static_cast<int64_t>(y.size());
  d.x = std::move(x);
  d.y = std::move(y);
  d.num_classes = num_classes;
  return d;
}

TEST(DatasetTest, RowAndValidate) {
  Dataset d = Make({1, 2, 3, 4, 5, 6}, 3, {0, 1}, 2);
  EXPECT_EQ(d.row(1)[0], 4);
  EXPECT_TRUE(ValidateDataset(d).ok());
  d.y[1] = 2;
  absl::Status s = ValidateDataset(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("example 1"), std::string::npos) << s;
  d.y[1] = 1;
  d.x.pop_back();
  EXPECT_EQ(ValidateDataset(d).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, GatherRows) {
  Dataset d = Make({1, 2, 3, 4, 5, 6}, 2, {0, 1, 2}, 3);
  std::vector<float> x, y;
  std::vector<int64_t> idx = {2, 0, 2};
  GatherRows(d, idx, &x, &y);
  EXPECT_EQ(x, (std::vector<float>{5, 6, 1, 2, 5, 6}));
  EXPECT_EQ(y, (std::vector<float>{2, 0, 2}));
}

TEST(NormalizeTest, Parse) {
  EXPECT_EQ(*ParseNormalize("none"), Normalize::kNone);
  EXPECT_EQ(*ParseNormalize("scale255"), Normalize::kScale255);
  EXPECT_EQ(*ParseNormalize("minmax"), Normalize::kUnitRange);
  EXPECT_EQ(*ParseNormalize("standardize"), Normalize::kStandardize);
  absl::StatusOr<Normalize> bad = ParseNormalize("zscore");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("zscore"), std::string::npos);
  for (Normalize m : {Normalize::kNone, Normalize::kScale255,
                      Normalize::kUnitRange, Normalize::kStandardize}) {
    EXPECT_EQ(*ParseNormalize(NormalizeName(m)), m);
  }
}

TEST(NormalizeTest, Scale255) {
  Dataset train = Make({0, 255, 51, 102}, 2, {0, 0}, 1);
  ASSERT_TRUE(NormalizeTrainTest(Normalize::kScale255, &train, nullptr).ok());
  EXPECT_EQ(train.x, (std::vector<float>{0, 1, 0.2f, 0.4f}));
}

TEST(NormalizeTest, MinMaxUsesTrainStatsOnTest) {
  // Feature 0 in train spans [2, 6], feature 1 is constant 5.
  Dataset train = Make({2, 5, 6, 5, 4, 5}, 2, {0, 0, 0}, 1);
  Dataset test = Make({10, 7, 2, 5}, 2, {0, 0}, 1);
  NormStats st;
  ASSERT_TRUE(
      NormalizeTrainTest(Normalize::kUnitRange, &train, &test, &st).ok());
  EXPECT_EQ(st.shift, (std::vector<float>{2, 5}));
  EXPECT_EQ(st.scale, (std::vector<float>{4, 1}));
  EXPECT_EQ(train.x, (std::vector<float>{0, 0, 1, 0, 0.5f, 0}));
  // Test: (10-2)/4 = 2 (outside [0,1], not clipped), (7-5)/1 = 2.
  EXPECT_EQ(test.x, (std::vector<float>{2, 2, 0, 0}));
}

TEST(NormalizeTest, StandardizeUsesTrainStatsOnTest) {
  // Feature 0: {1,3} mean 2 std 1. Feature 1: {4,4} std 0 -> scale 1.
  Dataset train = Make({1, 4, 3, 4}, 2, {0, 1}, 2);
  Dataset test = Make({5, 6}, 2, {1}, 2);
  ASSERT_TRUE(NormalizeTrainTest(Normalize::kStandardize, &train, &test).ok());
  EXPECT_EQ(train.x, (std::vector<float>{-1, 0, 1, 0}));
  EXPECT_EQ(test.x, (std::vector<float>{3, 2}));
}

TEST(NormalizeTest, Errors) {
  Dataset empty = Make({}, 3, {}, 0);
  EXPECT_EQ(ComputeNormStats(empty, Normalize::kStandardize).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ComputeNormStats(empty, Normalize::kScale255).ok());
  Dataset train = Make({1, 2}, 2, {0}, 1);
  Dataset test = Make({1, 2, 3}, 3, {0}, 1);
  absl::Status s = NormalizeTrainTest(Normalize::kUnitRange, &train, &test);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dim 3"), std::string::npos) << s;
}

}  // namespace
}  // namespace lockstep
