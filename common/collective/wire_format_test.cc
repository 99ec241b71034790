#include "common/collective/wire_format.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(WireFormatTest, ParsesTheNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseWireFormat(""), WireFormat::kFloat32);
  EXPECT_EQ(*ParseWireFormat("none"), WireFormat::kFloat32);
  EXPECT_EQ(*ParseWireFormat("bf16"), WireFormat::kBf16);
  EXPECT_EQ(*ParseWireFormat("fp16"), WireFormat::kFp16);
  auto bad = ParseWireFormat("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "expected none, bf16 or fp16, got \"int8\"");
  EXPECT_STREQ(WireFormatName(WireFormat::kBf16), "bf16");
}

TEST(WireFormatTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even (1+2^-6).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  // Just above half way rounds up.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(0.1f)), 0.10009765625f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  // float32's range: 3e38 stays finite, within half a bf16 ulp (2^-9).
  const float big = Bf16ToFloat(FloatToBf16(3e38f));
  EXPECT_TRUE(std::isfinite(big));
  EXPECT_LE(std::fabs(big - 3e38f), 3e38f * std::ldexp(1.0f, -9));
}

TEST(WireFormatTest, Fp16RoundsToNearestEvenWithIeeeRange) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);  // ties to even: infinity
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // half of it: ties to even (0)
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 units: up
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(0.1f)), 0.0999755859375f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(-0.0f)), -0.0f);
  EXPECT_TRUE(std::signbit(Fp16ToFloat(FloatToFp16(-0.0f))));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(WireFormatTest, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const bool fp16_nan = (v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0;
    if (!fp16_nan) {
      ASSERT_EQ(FloatToFp16(Fp16ToFloat(v)), v) << std::hex << h;
    }
    const bool bf16_nan = (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0;
    if (!bf16_nan) {
      ASSERT_EQ(FloatToBf16(Bf16ToFloat(v)), v) << std::hex << h;
    }
  }
}

TEST(WireFormatTest, ArrayHelpersAccumulateInFloat32) {
  const float in[3] = {1.0f, 0.1f, -3.0f};
  for (WireFormat w : {WireFormat::kBf16, WireFormat::kFp16}) {
    uint16_t enc[3];
    Encode16(w, in, 3, enc);
    float out[3];
    Decode16(w, enc, 3, out);
    float acc[3] = {1.0f, 1.0f, 1.0f};
    DecodeAdd16(w, enc, 3, acc);
    float rt[3] = {in[0], in[1], in[2]};
    RoundTrip16(w, rt, 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(out[i], rt[i]);
      EXPECT_EQ(acc[i], 1.0f + rt[i]);
    }
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[2], -3.0f);
  }
}

// Decode16 and DecodeAdd16 of n values (every 16-bit pattern, from 0 up,
// wrapping past 0xffff) give `scalar`'s bits (and 1 + them).
void ExpectEveryHalfDecodesLikeTheScalarCode(WireFormat w, uint32_t n,
                                             float (*scalar)(uint16_t)) {
  std::vector<uint16_t> halves(n);
  for (uint32_t h = 0; h < n; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> dec(n), acc(n, 1.0f);
  Decode16(w, halves.data(), n, dec.data());
  DecodeAdd16(w, halves.data(), n, acc.data());
  for (uint32_t h = 0; h < n; ++h) {
    const float want = scalar(halves[h]);
    uint32_t a, b;
    std::memcpy(&a, &dec[h], 4);
    std::memcpy(&b, &want, 4);
    ASSERT_EQ(a, b) << std::hex << h;
    if (!std::isnan(want)) {
      ASSERT_EQ(acc[h], 1.0f + want) << std::hex << h;
    }
  }
}

// The array functions (F16C when the CPU has it) give the scalar bits,
// for every half and for float32 values across the whole range.
TEST(WireFormatTest, Fp16ArraysMatchTheScalarConversion) {
  std::vector<float> in;
  for (uint64_t v = 0; v < 0x100000000ull; v += 0x00012345u) {
    const uint32_t u = static_cast<uint32_t>(v);
    float f;
    std::memcpy(&f, &u, sizeof(f));
    in.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 3e-8f, 6.1e-5f,
                  std::numeric_limits<float>::infinity()}) {
    in.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<uint16_t> enc(n);
  Encode16(WireFormat::kFp16, in.data(), n, enc.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(enc[i], FloatToFp16(in[i])) << in[i];
  ExpectEveryHalfDecodesLikeTheScalarCode(WireFormat::kFp16, 0x10000, Fp16ToFloat);
  std::printf("fp16 arrays use F16C: %s\n", Fp16UsesF16c() ? "yes" : "no");
}

// The same for bf16 (AVX2 when the CPU has it): every 2^32 / 0x1235
// float32 bit pattern (both signs, NaNs, infinities, subnormals, ties)
// encodes to the scalar bits, every half decodes to them, at lengths that
// leave every tail length of the 8-wide loop.
TEST(WireFormatTest, Bf16ArraysMatchTheScalarConversion) {
  std::vector<float> in;
  for (uint64_t v = 0; v < 0x100000000ull; v += 0x1235u) {
    const uint32_t u = static_cast<uint32_t>(v);
    float f;
    std::memcpy(&f, &u, sizeof(f));
    in.push_back(f);
  }
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800001u,
                     0xffc00001u, 0x00000001u, 0x80008000u}) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    in.push_back(f);  // ties both ways, overflow to inf, signalling NaN, subnormals
  }
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13},
                    static_cast<int64_t>(in.size())}) {
    std::vector<uint16_t> enc(n);
    Encode16(WireFormat::kBf16, in.data(), n, enc.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(enc[i], FloatToBf16(in[i])) << i << " " << in[i];
  }
  ExpectEveryHalfDecodesLikeTheScalarCode(WireFormat::kBf16, 0x10000 + 5, Bf16ToFloat);
  std::printf("bf16 arrays use AVX2: %s\n", Bf16UsesAvx2() ? "yes" : "no");
}

}  // namespace
}  // namespace lockstep
