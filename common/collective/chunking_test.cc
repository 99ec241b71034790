#include "common/collective/chunking.h"

#include <algorithm>
#include <cstdint>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ChunkingTest, PartsTileTheRangeWithSizesDifferingByAtMostOne) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int parts = 1; parts <= 12; ++parts) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " parts=" << parts);
      int64_t next = 0;
      int64_t lo = n, hi = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = ChunkBounds(n, parts, i);
        EXPECT_EQ(r.begin, next);
        EXPECT_GE(r.size(), 0);
        // Larger parts come first.
        EXPECT_EQ(r.size(), n / parts + (i < n % parts ? 1 : 0));
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
        next = r.end;
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

TEST(ChunkingTest, ShardOfInvertsShardBounds) {
  for (int64_t n = 1; n <= 40; ++n) {
    for (int shards = 1; shards <= 12; ++shards) {
      for (int s = 0; s < shards; ++s) {
        const Range r = ShardBounds(n, shards, s);
        for (int64_t i = r.begin; i < r.end; ++i) {
          ASSERT_EQ(ShardOf(n, shards, i), s)
              << "n=" << n << " shards=" << shards << " i=" << i;
        }
      }
    }
  }
}

TEST(ChunkingTest, ConcreteLayouts) {
  EXPECT_EQ(ChunkBounds(10, 3, 0), (Range{0, 4}));
  EXPECT_EQ(ChunkBounds(10, 3, 1), (Range{4, 7}));
  EXPECT_EQ(ChunkBounds(10, 3, 2), (Range{7, 10}));
  EXPECT_EQ(ChunkBounds(2, 4, 0), (Range{0, 1}));
  EXPECT_EQ(ChunkBounds(2, 4, 1), (Range{1, 2}));
  EXPECT_EQ(ChunkBounds(2, 4, 3), (Range{2, 2}));
  EXPECT_EQ(ChunkBounds(0, 5, 4), (Range{0, 0}));
  EXPECT_EQ(ShardBounds(1000003, 8, 7), ChunkBounds(1000003, 8, 7));
}

TEST(ChunkingTest, HugeVectors) {
  const int64_t n = (int64_t{1} << 40) + 5;
  const int parts = 7;
  EXPECT_EQ(ChunkBounds(n, parts, parts - 1).end, n);
  for (int i = 0; i < parts; ++i) {
    const Range r = ChunkBounds(n, parts, i);
    EXPECT_EQ(ShardOf(n, parts, r.begin), i);
    EXPECT_EQ(ShardOf(n, parts, r.end - 1), i);
  }
}

TEST(ChunkingDeathTest, PreconditionsAbort) {
  EXPECT_DEATH(ChunkBounds(-1, 2, 0), "n must be");
  EXPECT_DEATH(ChunkBounds(4, 0, 0), "parts must be");
  EXPECT_DEATH(ChunkBounds(4, 2, 2), "i must be");
  EXPECT_DEATH(ShardOf(4, 2, 4), "index must be");
}

}  // namespace
}  // namespace lockstep
