#include "common/train/nonfinite.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/train/replica.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(AllFiniteTest, FindsEveryNonFiniteValueAtEveryPosition) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::signaling_NaN()};
  // Lengths around the 16- and 32-lane blocks, every position.
  for (int n : {0, 1, 15, 16, 17, 31, 32, 33, 100}) {
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * std::ldexp(1.5f, i % 250 - 125);
    if (n > 0) x[n / 2] = std::numeric_limits<float>::max();
    ASSERT_TRUE(AllFinite(x)) << "n " << n;
    for (int i = 0; i < n; ++i) {
      for (float b : bad) {
        const float keep = x[i];
        x[i] = b;
        EXPECT_FALSE(AllFinite(x)) << "n " << n << " at " << i << " value " << b;
        x[i] = keep;
      }
    }
  }
  // Subnormals, zeros of both signs and the largest float are finite.
  std::vector<float> edge = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                             -std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::min()};
  EXPECT_TRUE(AllFinite(edge));
}

TEST(NonFinitePolicyTest, ParsesFailAndSkipAndNamesWhatItExpected) {
  EXPECT_EQ(*ParseNonFinitePolicy(""), NonFinitePolicy::kFail);
  EXPECT_EQ(*ParseNonFinitePolicy("fail"), NonFinitePolicy::kFail);
  EXPECT_EQ(*ParseNonFinitePolicy("skip"), NonFinitePolicy::kSkip);
  auto bad = ParseNonFinitePolicy("ignore");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "expected fail or skip, got \"ignore\"");
}

TEST(NonFinitePolicyTest, FlaggedRanksAndTheirNames) {
  std::vector<int> ranks;
  EXPECT_FALSE(FlaggedRanks(std::vector<float>{0, 0, 0}, &ranks));
  EXPECT_TRUE(ranks.empty());
  EXPECT_TRUE(FlaggedRanks(std::vector<float>{0, 1, 0}, &ranks));
  EXPECT_EQ(ranks, std::vector<int>{1});
  EXPECT_EQ(RankList(ranks), "rank 1");
  EXPECT_TRUE(FlaggedRanks(std::vector<float>{1, 0, 1}, &ranks));
  EXPECT_EQ(RankList(ranks), "ranks 0 and 2");
  EXPECT_TRUE(FlaggedRanks(
      std::vector<float>{1, 1, std::numeric_limits<float>::quiet_NaN(), 1}, &ranks));
  EXPECT_EQ(RankList(ranks), "ranks 0, 1, 2 and 3");
}

TEST(NonFinitePolicyTest, FlagValuesSayGradientOrLoss) {
  EXPECT_EQ(LocalFlag(true, true), 0.0f);
  EXPECT_EQ(LocalFlag(false, true), 1.0f);
  EXPECT_EQ(LocalFlag(true, false), 2.0f);
  EXPECT_EQ(LocalFlag(false, false), 3.0f);
  EXPECT_EQ(DescribeFlags(std::vector<float>{0, 0}), "");
  EXPECT_EQ(DescribeFlags(std::vector<float>{0, 1, 0}), "non-finite gradient on rank 1");
  EXPECT_EQ(DescribeFlags(std::vector<float>{2, 0, 0}), "non-finite loss on rank 0");
  EXPECT_EQ(DescribeFlags(std::vector<float>{2, 3, 2, 1}),
            "non-finite gradient on ranks 1 and 3 and non-finite loss on ranks 0 and 2");
  EXPECT_EQ(SumOverflowMessage(7),
            "non-finite sum at step 7: every rank's gradient and loss were finite, the sum "
            "overflowed");
}

// The combine buffer's layout with flag slots: [flags, padding | grad | loss].
TEST(ReplicaFlagSlotsTest, FlagsInFrontGradientAlignedLossAtTheEnd) {
  TrainSpec spec;
  spec.model = "mlp:4";
  spec.global_batch = 2;
  spec.lr.base_lr = 0.1f;
  for (int k : {0, 1, 3, 16, 17}) {
    auto r = Replica::Create(spec, 3, 2, k);
    ASSERT_TRUE(r.ok()) << r.status();
    Replica& rep = **r;
    const int64_t n = rep.num_params();
    const int64_t off = (k + 15) / 16 * 16;
    EXPECT_EQ(rep.grad_offset(), off);
    EXPECT_EQ(static_cast<int64_t>(rep.flags().size()), k);
    EXPECT_EQ(static_cast<int64_t>(rep.combine_buffer().size()), off + n + 1);
    EXPECT_EQ(rep.grad().data(), rep.combine_buffer().data() + off);
    EXPECT_EQ(rep.flags().data(), rep.combine_buffer().data());
    // Piece starts in buffer coordinates: the loss slot first, the
    // gradient's pieces after, none at or below the flags' end but 0's own.
    auto starts = rep.CombinePieceStarts(0);
    ASSERT_FALSE(starts.empty());
    EXPECT_EQ(starts[0], off + n);
    for (size_t i = 1; i < starts.size(); ++i) {
      EXPECT_LT(starts[i], starts[i - 1]);
      if (off > 0) {
        EXPECT_GT(starts[i], off);
      }
    }
  }
  auto bad = Replica::Create(spec, 3, 2, -1);
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace lockstep
