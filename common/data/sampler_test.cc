#include "common/data/sampler.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Bounds = std::pair<int64_t, int64_t>;

TEST(SliceBoundsTest, SizesAndCoverage) {
  for (int64_t len : {0, 1, 2, 7, 13, 100, 127}) {
    for (int world = 1; world <= 9; ++world) {
      int64_t expect_begin = 0;
      for (int r = 0; r < world; ++r) {
        auto [b, e] = SliceBounds(len, r, world);
        EXPECT_EQ(b, expect_begin) << len << " " << r << "/" << world;
        const int64_t want = len / world + (r < len % world ? 1 : 0);
        EXPECT_EQ(e - b, want) << len << " " << r << "/" << world;
        expect_begin = e;
      }
      EXPECT_EQ(expect_begin, len);
    }
  }
  // Closed-form example: 13 over 4 ranks -> 4,3,3,3.
  EXPECT_EQ(SliceBounds(13, 0, 4), Bounds(0, 4));
  EXPECT_EQ(SliceBounds(13, 1, 4), Bounds(4, 7));
  EXPECT_EQ(SliceBounds(13, 3, 4), Bounds(10, 13));
  // B < K: the tail ranks get nothing.
  EXPECT_EQ(SliceBounds(2, 2, 5), Bounds(2, 2));
}

TEST(PrngTest, SplitMix64KnownVector) {
  // Published splitmix64 outputs for seed 1234567.
  uint64_t s = 1234567;
  const uint64_t want[] = {6457827717110365317ull, 3203168211198807973ull,
                           9817491932198370423ull, 4593380528125082431ull,
                           16408922859458223821ull};
  for (uint64_t w : want) EXPECT_EQ(SplitMix64Next(&s), w);
}

TEST(PrngTest, XoshiroMatchesReferenceImplementation) {
  // Values from an independent Python transcription of xoshiro256** seeded
  // by splitmix64(42): guards cross-platform determinism.
  Xoshiro256StarStar rng(42);
  EXPECT_EQ(rng.Next(), 1546998764402558742ull);
  EXPECT_EQ(rng.Next(), 6990951692964543102ull);
  EXPECT_EQ(rng.Next(), 12544586762248559009ull);
}

TEST(PrngTest, BoundedIsInRangeAndRoughlyUniform) {
  Xoshiro256StarStar rng(7);
  std::vector<int> counts(6, 0);
  const int kDraws = 60000;
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t v = rng.Bounded(6);
    ASSERT_LT(v, 6u);
    ++counts[v];
  }
  // Expected 10000 each; 5 sigma (sqrt(10000*5/6) ~ 91) is ~456.
  for (int c : counts) EXPECT_NEAR(c, 10000, 456);
  EXPECT_EQ(rng.Bounded(1), 0u);
}

TEST(EpochPermutationTest, MatchesReferenceImplementation) {
  EXPECT_EQ(EpochPermutation(10, 42, 0),
            (std::vector<int64_t>{2, 0, 3, 9, 6, 4, 8, 5, 1, 7}));
  EXPECT_EQ(EpochPermutation(10, 42, 1),
            (std::vector<int64_t>{7, 4, 3, 2, 9, 8, 6, 0, 5, 1}));
  EXPECT_EQ(EpochPermutation(16, 7, 3),
            (std::vector<int64_t>{6, 9, 1, 8, 14, 15, 13, 0, 4, 3, 5, 11, 10, 2,
                                  7, 12}));
}

TEST(EpochPermutationTest, IsPermutationDeterministicAndEpochDependent) {
  const int64_t n = 1000;
  std::vector<int64_t> a = EpochPermutation(n, 5, 0);
  std::vector<int64_t> again = EpochPermutation(n, 5, 0);
  std::vector<int64_t> next = EpochPermutation(n, 5, 1);
  std::vector<int64_t> other_seed = EpochPermutation(n, 6, 0);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, next);
  EXPECT_NE(a, other_seed);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(n);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  // Not the identity.
  EXPECT_NE(a, iota);
}

TEST(GlobalBatchSamplerTest, StepsPerEpoch) {
  EXPECT_EQ(GlobalBatchSampler(100, 7, 1).steps_per_epoch(), 15);
  EXPECT_EQ(GlobalBatchSampler(100, 7, 1, /*drop_last=*/true).steps_per_epoch(),
            14);
  EXPECT_EQ(GlobalBatchSampler(100, 100, 1).steps_per_epoch(), 1);
  EXPECT_EQ(GlobalBatchSampler(5, 100, 1).steps_per_epoch(), 1);
  EXPECT_EQ(GlobalBatchSampler(100, 7, 1).BatchSize(14), 2);
  EXPECT_EQ(GlobalBatchSampler(100, 7, 1).BatchSize(15), 7);  // next epoch
}

TEST(GlobalBatchSamplerTest, CreateRejectsBadArguments) {
  EXPECT_EQ(GlobalBatchSampler::Create(0, 4, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlobalBatchSampler::Create(10, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlobalBatchSampler::Create(10, 11, 1, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(GlobalBatchSampler::Create(10, 11, 1, false).ok());
}

TEST(GlobalBatchSamplerTest, EveryExampleOncePerEpoch) {
  const int64_t n = 103;
  for (int64_t b : {1, 7, 13, 100, 127}) {
    GlobalBatchSampler s(n, b, 99);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int> seen(n, 0);
      for (int64_t k = 0; k < s.steps_per_epoch(); ++k) {
        const int64_t step = epoch * s.steps_per_epoch() + k;
        std::vector<int64_t> batch = s.Batch(step);
        EXPECT_EQ(static_cast<int64_t>(batch.size()), s.BatchSize(step));
        for (int64_t i : batch) ++seen[i];
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[i], 1) << "b=" << b << " epoch=" << epoch << " i=" << i;
      }
    }
  }
}

TEST(GlobalBatchSamplerTest, DropLastSkipsTailAndNeverRepeats) {
  GlobalBatchSampler s(103, 10, 3, /*drop_last=*/true);
  ASSERT_EQ(s.steps_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 10; ++step) {
    std::vector<int64_t> b = s.Batch(step);
    ASSERT_EQ(b.size(), 10u);
    for (int64_t i : b) EXPECT_TRUE(seen.insert(i).second);
  }
  EXPECT_EQ(seen.size(), 100u);
  // Step 10 starts epoch 1, whose first batch is the start of its own
  // permutation.
  std::vector<int64_t> perm1 = EpochPermutation(103, 3, 1);
  EXPECT_EQ(s.Batch(10),
            std::vector<int64_t>(perm1.begin(), perm1.begin() + 10));
}

TEST(GlobalBatchSamplerTest, BatchIsThePermutationChunk) {
  GlobalBatchSampler s(50, 13, 11);
  for (int64_t step = 0; step < 9; ++step) {
    const int64_t epoch = step / 4, pos = step % 4;
    std::vector<int64_t> perm = EpochPermutation(50, 11, epoch);
    const int64_t end = std::min<int64_t>(50, (pos + 1) * 13);
    EXPECT_EQ(s.Batch(step),
              std::vector<int64_t>(perm.begin() + pos * 13, perm.begin() + end))
        << step;
  }
}

TEST(GlobalBatchSamplerTest, SlicesConcatenateToGlobalBatchForAllWorldSizes) {
  for (int64_t b : {1, 7, 13, 100, 127}) {
    const int64_t n = 1000;
    GlobalBatchSampler reference(n, b, 2024);
    for (int world = 1; world <= 8; ++world) {
      // A fresh sampler per world size: Batch(step) must not depend on K.
      GlobalBatchSampler s(n, b, 2024);
      // Steps from the first epoch, its last (short) step, and a later
      // epoch, visited out of order to exercise the epoch cache.
      const int64_t spe = s.steps_per_epoch();
      for (int64_t step :
           {int64_t{0}, int64_t{1}, spe - 1, 3 * spe + 2, int64_t{2}, spe}) {
        std::vector<int64_t> global = s.Batch(step);
        EXPECT_EQ(global, reference.Batch(step)) << "b=" << b << " K=" << world;
        std::vector<int64_t> concat;
        size_t min_size = SIZE_MAX, max_size = 0;
        for (int r = 0; r < world; ++r) {
          std::vector<int64_t> slice = s.Slice(step, r, world);
          min_size = std::min(min_size, slice.size());
          max_size = std::max(max_size, slice.size());
          concat.insert(concat.end(), slice.begin(), slice.end());
        }
        EXPECT_EQ(concat, global)
            << "b=" << b << " K=" << world << " step=" << step;
        EXPECT_LE(max_size - min_size, 1u);
      }
    }
  }
}

TEST(GlobalBatchSamplerTest, RankGetsNothingWhenBatchSmallerThanWorld) {
  GlobalBatchSampler s(10, 3, 1);
  EXPECT_EQ(s.Slice(0, 0, 5).size(), 1u);
  EXPECT_EQ(s.Slice(0, 2, 5).size(), 1u);
  EXPECT_TRUE(s.Slice(0, 3, 5).empty());
  EXPECT_TRUE(s.Slice(0, 4, 5).empty());
}

TEST(GlobalBatchSamplerTest, CopyKeepsBehaviour) {
  GlobalBatchSampler s(40, 6, 8);
  std::vector<int64_t> b3 = s.Batch(3);
  GlobalBatchSampler copy(s);
  EXPECT_EQ(copy.Batch(3), b3);
  EXPECT_EQ(copy.Batch(20), s.Batch(20));
}


TEST(GlobalBatchSamplerTest, SliceIntoMatchesSliceAndReusesItsBuffer) {
  // 50 examples, batch 12: 5 steps per epoch, the last one 2 examples.
  GlobalBatchSampler a(50, 12, 9);
  GlobalBatchSampler b(50, 12, 9);
  std::vector<int64_t> out;
  out.reserve(6);  // the largest slice of rank 0 of 2
  const int64_t* buffer = out.data();
  for (int64_t step = 0; step < 17; ++step) {  // crosses three epoch ends
    for (int rank = 0; rank < 2; ++rank) {
      b.SliceInto(step, rank, 2, &out);
      EXPECT_EQ(out, a.Slice(step, rank, 2)) << "step " << step << " rank " << rank;
      EXPECT_EQ(out.data(), buffer) << "step " << step << ": reallocated";
    }
  }
}

TEST(EpochPermutationTest, IntoReusesTheBufferAndMatches) {
  std::vector<int64_t> perm;
  EpochPermutationInto(100, 3, 0, &perm);
  const int64_t* buffer = perm.data();
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    EpochPermutationInto(100, 3, epoch, &perm);
    EXPECT_EQ(perm, EpochPermutation(100, 3, epoch));
    EXPECT_EQ(perm.data(), buffer);
  }
}

}  // namespace
}  // namespace lockstep
