#include "common/optim/hash.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/optim/optimizer.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 1.0f;
  return v;
}

void FlipBit(std::vector<float>& v, size_t index, int bit) {
  uint32_t u;
  std::memcpy(&u, &v[index], 4);
  u ^= uint32_t{1} << bit;
  std::memcpy(&v[index], &u, 4);
}

TEST(HashWeightsTest, IdenticalVectorsHashEqual) {
  const std::vector<float> a = Ramp(1000);
  const std::vector<float> b = Ramp(1000);
  ASSERT_NE(a.data(), b.data());
  EXPECT_EQ(HashWeights(a), HashWeights(b));
}

TEST(HashWeightsTest, FlippingAnyOneBitChangesHash) {
  const std::vector<float> base = Ramp(1000);
  const WeightHash h = HashWeights(base);
  for (size_t index : {size_t{0}, size_t{499}, size_t{999}}) {
    for (int bit : {0, 22, 23, 31}) {
      std::vector<float> v = base;
      FlipBit(v, index, bit);
      EXPECT_NE(HashWeights(v), h) << "index " << index << " bit " << bit;
    }
  }
}

TEST(HashWeightsTest, NegativeZeroDiffersFromZero) {
  const std::vector<float> pos = {1.0f, 0.0f, 2.0f};
  const std::vector<float> neg = {1.0f, -0.0f, 2.0f};
  ASSERT_TRUE(pos[1] == neg[1]);  // equal as numbers, different bits
  EXPECT_NE(HashWeights(pos), HashWeights(neg));
}

TEST(HashWeightsTest, EqualsDirectXxh3OverSameBytes) {
  const std::vector<float> v = Ramp(12345);
  const XXH128_hash_t direct = XXH3_128bits(v.data(), v.size() * 4);
  const WeightHash h = HashWeights(v);
  EXPECT_EQ(h.hi, direct.high64);
  EXPECT_EQ(h.lo, direct.low64);
}

TEST(HashWeightsTest, KnownValuesAreStable) {
  // Empty input: xxHash's published XXH3-128 of "" (seed 0).
  const WeightHash empty = HashWeights({});
  EXPECT_EQ(empty.hi, 0x99aa06d3014798d8ull);
  EXPECT_EQ(empty.lo, 0x6001c324468d497full);
  EXPECT_EQ(empty.ToHex(), "99aa06d3014798d86001c324468d497f");
  // {-1, -0.5, 0, ..., 2.5}: regression value recorded with libxxhash 0.8.1;
  // XXH3's output is frozen since 0.8.0, so this must never change.
  const WeightHash h = HashWeights(Ramp(8));
  EXPECT_EQ(h.hi, 0x98dfc4d581befa0aull);
  EXPECT_EQ(h.lo, 0xefa102c29cd3a17eull);
  EXPECT_EQ(h.ToHex(), "98dfc4d581befa0aefa102c29cd3a17e");
  EXPECT_EQ(BlockHashes(Ramp(8), 8), std::vector<uint64_t>{0x8cc6912cafeb3290ull});
}

TEST(HashWeightsTest, ToHexPadsWithZeros) {
  EXPECT_EQ((WeightHash{0x1, 0xab}).ToHex(),
            "000000000000000100000000000000ab");
}

TEST(WeightHasherTest, StreamingEqualsConcatenation) {
  const std::vector<float> all = Ramp(1000);
  const absl::Span<const float> span(all);
  WeightHasher hasher;
  hasher.Update(span.subspan(0, 3));
  hasher.Update({});
  hasher.Update(span.subspan(3, 400));
  hasher.Update(span.subspan(403));
  EXPECT_EQ(hasher.Finish(), HashWeights(all));
  // Finish does not consume the state; more input may follow.
  hasher.Update(span.subspan(0, 1));
  EXPECT_NE(hasher.Finish(), HashWeights(all));
  hasher.Reset();
  EXPECT_EQ(hasher.Finish(), HashWeights({}));
  hasher.Update(all);
  WeightHasher moved = std::move(hasher);
  EXPECT_EQ(moved.Finish(), HashWeights(all));
}

TEST(BlockHashesTest, EachBlockIsXxh3OfItsRange) {
  const std::vector<float> v = Ramp(130);
  const std::vector<uint64_t> blocks = BlockHashes(v, 64);
  ASSERT_EQ(blocks.size(), 3u);  // 64 + 64 + 2
  EXPECT_EQ(blocks[0], XXH3_64bits(v.data(), 64 * 4));
  EXPECT_EQ(blocks[1], XXH3_64bits(v.data() + 64, 64 * 4));
  EXPECT_EQ(blocks[2], XXH3_64bits(v.data() + 128, 2 * 4));
  EXPECT_EQ(BlockHashes(Ramp(128), 64).size(), 2u);
  EXPECT_EQ(BlockHashes(Ramp(100), kDefaultHashBlockFloats).size(), 1u);
}

TEST(BlockHashesTest, LocateChangedElement) {
  const std::vector<float> a = Ramp(1000);
  const std::vector<uint64_t> ha = BlockHashes(a, 64);
  ASSERT_EQ(ha.size(), 16u);
  EXPECT_TRUE(DifferingBlocks(ha, BlockHashes(a, 64)).empty());

  std::vector<float> b = a;
  b[517] = -b[517];  // block 517 / 64 = 8
  EXPECT_EQ(DifferingBlocks(ha, BlockHashes(b, 64)),
            std::vector<int64_t>{8});

  b = a;
  FlipBit(b, 999, 0);  // last, partial block
  FlipBit(b, 0, 5);    // first block
  EXPECT_EQ(DifferingBlocks(ha, BlockHashes(b, 64)),
            (std::vector<int64_t>{0, 15}));
}

TEST(BlockHashesTest, EmptySpan) {
  EXPECT_TRUE(BlockHashes({}, 64).empty());
  EXPECT_TRUE(DifferingBlocks({}, {}).empty());
}

TEST(BlockHashesTest, DifferingBlocksReportsLengthMismatch) {
  EXPECT_EQ(DifferingBlocks({1, 2, 3}, {1, 9}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(DifferingBlocks({1}, {1, 2, 3}), (std::vector<int64_t>{1, 2}));
}

TEST(HashReplicaTest, CoversParamsStepsAndSlots) {
  const std::vector<float> p = {1.0f, 2.0f, 3.0f};
  const std::vector<float> s = {0.5f, 0.25f};
  const WeightHash h = HashReplica(p, 7, s);
  EXPECT_EQ(h, HashReplica(std::vector<float>(p), 7, std::vector<float>(s)));
  EXPECT_NE(h, HashReplica(p, 8, s));
  EXPECT_NE(h, HashReplica(p, 7, {0.5f, -0.25f}));
  EXPECT_NE(h, HashReplica({1.0f, 2.0f, -3.0f}, 7, s));
  EXPECT_NE(h, HashWeights(p));
  // Framing: moving a float across the params/slots boundary changes it.
  EXPECT_NE(HashReplica({1.0f, 2.0f}, 0, {3.0f}),
            HashReplica({1.0f}, 0, {2.0f, 3.0f}));
  EXPECT_NE(HashReplica({}, 0, {}), HashWeights({}));
}

TEST(HashReplicaTest, TracksOptimizerState) {
  OptimizerConfig config;
  config.kind = "adam";
  auto a = Optimizer::Create(config, 4);
  auto b = Optimizer::Create(config, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> wa = {1, 2, 3, 4}, wb = wa;
  const std::vector<float> g = {0.1f, -0.2f, 0.3f, 0.0f};
  (*a)->Step(absl::MakeSpan(wa), g, 0.01f);
  (*b)->Step(absl::MakeSpan(wb), g, 0.01f);
  EXPECT_EQ(HashReplica(wa, (*a)->steps(), (*a)->slots()),
            HashReplica(wb, (*b)->steps(), (*b)->slots()));
  // Same weights but different optimizer state -> different replica hash.
  OptimizerState st = (*b)->State();
  st.slots[5] += 1.0f;
  ASSERT_TRUE((*b)->SetState(st).ok());
  EXPECT_EQ(HashWeights(wa), HashWeights(wb));
  EXPECT_NE(HashReplica(wa, (*a)->steps(), (*a)->slots()),
            HashReplica(wb, (*b)->steps(), (*b)->slots()));
}

TEST(HashWeightsTest, WriteHexEqualsToHex) {
  for (const WeightHash h : {WeightHash{0x1, 0xab}, WeightHash{~0ull, 0x0123456789abcdefull},
                             HashWeights(std::vector<float>{1.5f, -2.0f})}) {
    char buf[WeightHash::kHexDigits + 1];
    buf[WeightHash::kHexDigits] = '!';
    h.WriteHex(buf);
    EXPECT_EQ(std::string(buf, WeightHash::kHexDigits), h.ToHex());
    EXPECT_EQ(buf[WeightHash::kHexDigits], '!');  // nothing past the 32 digits
  }
}

// hash.cc uses libxxhash's runtime-dispatched XXH3 (AVX2 / AVX-512 where
// the CPU has them); this file calls the library's default entry points.
// Every path (one shot, streaming, fused with block hashes) must give the
// same bits on a model-sized input, where the vector code runs.
TEST(FusedWeightHasherTest, DispatchedHashesEqualLibraryDefaultOnModelSizedInput) {
  const std::vector<float> w = Ramp(203530);  // the main job's MLP 784-256-10
  const XXH128_hash_t direct = XXH3_128bits(w.data(), w.size() * 4);
  const WeightHash want{direct.high64, direct.low64};
  EXPECT_EQ(HashWeights(w), want);
  WeightHasher streaming;
  streaming.Update(absl::MakeConstSpan(w).subspan(0, 100000));
  streaming.Update(absl::MakeConstSpan(w).subspan(100000));
  EXPECT_EQ(streaming.Finish(), want);
  const std::vector<int64_t> starts = {0, 200704, 200960, 203520};
  std::vector<uint64_t> blocks(starts.size(), 0);
  FusedWeightHasher fused;
  EXPECT_EQ(fused.Hash(w, starts, absl::MakeSpan(blocks)), want);
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t b = static_cast<size_t>(starts[i]);
    const size_t e = i + 1 < starts.size() ? static_cast<size_t>(starts[i + 1]) : w.size();
    EXPECT_EQ(blocks[i], XXH3_64bits(w.data() + b, (e - b) * 4)) << "block " << i;
  }
}

TEST(FusedWeightHasherTest, EqualsHashWeightsAndHashBlockInOnePass) {
  // Sizes around the chunk size, a prefix before the first block, an empty
  // block and starts past the end (clamped).
  std::vector<float> w(3 * FusedWeightHasher::kChunkFloats + 77);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.37f - 5.0f;
  const absl::Span<const float> all(w);
  FusedWeightHasher fused;
  for (const std::vector<int64_t>& starts :
       std::vector<std::vector<int64_t>>{{},
                                         {0},
                                         {0, 10, 10, 2048, 2049, 5000},
                                         {13, 4096},
                                         {0, static_cast<int64_t>(w.size()), 1 << 20}}) {
    std::vector<uint64_t> blocks(starts.size(), 0);
    const WeightHash h = fused.Hash(all, starts, absl::MakeSpan(blocks));
    EXPECT_EQ(h, HashWeights(all)) << starts.size() << " blocks";
    for (size_t i = 0; i < starts.size(); ++i) {
      const size_t b = std::min<size_t>(starts[i], w.size());
      const size_t e = i + 1 < starts.size() ? std::min<size_t>(starts[i + 1], w.size()) : w.size();
      EXPECT_EQ(blocks[i], HashBlock(all.subspan(b, e - b))) << "block " << i;
    }
  }
  std::vector<uint64_t> none;
  EXPECT_EQ(fused.Hash({}, {}, absl::MakeSpan(none)), HashWeights({}));
}

TEST(FusedWeightHasherTest, StreamedInAwkwardPiecesEqualsOnePass) {
  // An optimizer step feeds 2048-float chunks; any consecutive pieces must
  // give the same hashes, whatever block boundaries they cross.
  std::vector<float> w(2 * FusedWeightHasher::kChunkFloats + 333);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * -0.11f + 2.0f;
  const std::vector<int64_t> starts = {5, 5, 100, 2048, 4100, 4101};
  FusedWeightHasher fused;
  std::vector<uint64_t> want(starts.size()), got(starts.size(), 0);
  const WeightHash whole = fused.Hash(w, starts, absl::MakeSpan(want));
  for (size_t piece : {size_t{1}, size_t{7}, size_t{2048}, size_t{3000}, w.size()}) {
    std::fill(got.begin(), got.end(), 0);
    fused.Begin(w.size(), starts, absl::MakeSpan(got));
    for (size_t b = 0; b < w.size(); b += piece) {
      fused.Update(w.data(), b, std::min(w.size(), b + piece));
    }
    EXPECT_EQ(fused.position(), w.size());
    EXPECT_EQ(fused.Finish(), whole) << "pieces of " << piece;
    EXPECT_EQ(got, want) << "pieces of " << piece;
  }
  // Against the one-shot library calls, not only Hash (which streams too).
  const absl::Span<const float> all(w);
  EXPECT_EQ(whole, HashWeights(all));
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t b = static_cast<size_t>(starts[i]);
    const size_t e = i + 1 < starts.size() ? static_cast<size_t>(starts[i + 1]) : w.size();
    EXPECT_EQ(want[i], HashBlock(all.subspan(b, e - b))) << "block " << i;
  }
  // An abandoned pass: Begin again starts afresh.
  fused.Begin(w.size(), starts, absl::MakeSpan(got));
  fused.Update(w.data(), 0, 10);
  fused.Begin(w.size(), starts, absl::MakeSpan(got));
  fused.Update(w.data(), 0, w.size());
  EXPECT_EQ(fused.Finish(), whole);
}

TEST(FusedWeightHasherDeathTest, GapsAndEarlyFinishAbort) {
  std::vector<float> w(10, 1.0f);
  std::vector<uint64_t> blocks;
  FusedWeightHasher fused;
  fused.Begin(w.size(), {}, absl::MakeSpan(blocks));
  EXPECT_DEATH(fused.Update(w.data(), 1, 5), "consecutive");
  fused.Update(w.data(), 0, 5);
  EXPECT_DEATH(fused.Finish(), "before every float");
}

// The fold a combine carries: hi ^ lo * 0x9e3779b97f4a7c15 (mod 2^64), so
// hashes that differ in either half give different folds here.
TEST(WeightHashTest, FoldMixesBothHalves) {
  EXPECT_EQ((WeightHash{0, 0}).Fold(), 0u);
  EXPECT_EQ((WeightHash{5, 0}).Fold(), 5u);
  EXPECT_EQ((WeightHash{0, 1}).Fold(), 0x9e3779b97f4a7c15ull);
  EXPECT_EQ((WeightHash{0, 2}).Fold(), 0x3c6ef372fe94f82aull);  // wraps
  EXPECT_EQ((WeightHash{0x9e3779b97f4a7c15ull, 1}).Fold(), 0u);
}

}  // namespace
}  // namespace lockstep
