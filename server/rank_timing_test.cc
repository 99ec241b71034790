#include "server/rank_timing.h"

#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(MedianTest, OddEvenAndEmpty) {
  std::vector<double> v = {5, 1, 3};
  EXPECT_DOUBLE_EQ(Median(v), 3);
  v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Median(v), 2.5);
  v.clear();
  EXPECT_DOUBLE_EQ(Median(v), 0);
}

TEST(RankTimingTest, MediansPerFieldAndZeroBeforeAnyReport) {
  RankTiming t;
  EXPECT_DOUBLE_EQ(t.Medians().step, 0);
  t.Add({1, 10, 100, 0.5, 7});
  t.Add({3, 30, 300, 1.5, 9});
  const StepTimes m = t.Medians();
  EXPECT_DOUBLE_EQ(m.step, 2);
  EXPECT_DOUBLE_EQ(m.compute, 20);
  EXPECT_DOUBLE_EQ(m.communication, 200);
  EXPECT_DOUBLE_EQ(m.exposed, 1);
  EXPECT_DOUBLE_EQ(m.peer_wait, 8);
}

TEST(RankTimingTest, KeepsTheLastKSizeReports) {
  RankTiming t;
  // 64 reports of 1 s, then 33 of 100 s: the window holds 31 x 1 and 33 x
  // 100, so the median (mean of the 32nd and 33rd sorted) is 100.
  for (int i = 0; i < RankTiming::kSize; ++i) t.Add({1, 0, 0, 0, 0});
  EXPECT_DOUBLE_EQ(t.Medians().step, 1);
  for (int i = 0; i < 33; ++i) t.Add({100, 0, 0, 0, 0});
  EXPECT_EQ(t.size(), static_cast<size_t>(RankTiming::kSize));
  EXPECT_DOUBLE_EQ(t.Medians().step, 100);
  // With 32 of each, the middle pair is (1, 100).
  RankTiming u;
  for (int i = 0; i < RankTiming::kSize; ++i) u.Add({1, 0, 0, 0, 0});
  for (int i = 0; i < 32; ++i) u.Add({100, 0, 0, 0, 0});
  EXPECT_DOUBLE_EQ(u.Medians().step, 50.5);
}

}  // namespace
}  // namespace lockstep
