#include "common/collective/wire_format.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

absl::StatusOr<WireFormat> ParseWireFormat(absl::string_view name) {
  if (name.empty() || name == "none") return WireFormat::kFloat32;
  if (name == "bf16") return WireFormat::kBf16;
  if (name == "fp16") return WireFormat::kFp16;
  return absl::InvalidArgumentError(
      absl::StrCat("expected none, bf16 or fp16, got \"", name, "\""));
}

const char* WireFormatName(WireFormat w) {
  switch (w) {
    case WireFormat::kFloat32: return "none";
    case WireFormat::kBf16: return "bf16";
    case WireFormat::kFp16: return "fp16";
  }
  return "none";
}

int32_t WireFormatCode(WireFormat w) {
  switch (w) {
    case WireFormat::kFloat32: return 0;
    case WireFormat::kBf16: return 1;
    case WireFormat::kFp16: return 2;
  }
  return 0;
}

absl::StatusOr<WireFormat> WireFormatFromCode(int64_t code) {
  switch (code) {
    case 0: return WireFormat::kFloat32;
    case 1: return WireFormat::kBf16;
    case 2: return WireFormat::kFp16;
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected 0 (float32), 1 (bf16) or 2 (fp16), got ", code));
}

uint16_t FloatToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  }
  // Round to nearest, ties to even; a carry into the exponent is right
  // (it rounds up to the next power of two, or to infinity).
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float Bf16ToFloat(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToFp16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf, or NaN: quiet, payload truncated (as F16C)
    return a == 0x7f800000u ? (sign | 0x7c00u)
                            : static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  // 65520 and up round (ties to even) past 65504, the largest half.
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a < 0x38800000u) {
    // Below 2^-14: a half subnormal, m x 2^-24. Adding 0.5 (exponent -1,
    // ulp 2^-24) lines the 10 result bits up at the bottom of the float's
    // mantissa, rounded to nearest even by the float addition itself (the
    // default rounding mode); m = 1024 is correctly the smallest normal's
    // encoding. (F. Giesen's float_to_half_fast3_rtne.)
    const float magic = FromBits(126u << 23);  // 0.5
    return sign | static_cast<uint16_t>(Bits(FromBits(a) + magic) - (126u << 23));
  }
  // Normal: rebias the exponent (127 -> 15), round 23 mantissa bits to 10.
  uint32_t r = a - ((127u - 15u) << 23);
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return FromBits(Bits(v) | sign);
  }
  if (exp == 31) {  // inf, or NaN made quiet (as F16C)
    return FromBits(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  }
  return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

// fp16 arrays with the F16C instructions (x86-64 since 2012), 8 at a time:
// the scalar code above branches per value and costs about 2x the main
// job's step time; the hardware conversion gives the same bits (IEEE
// round to nearest even; NaNs as above).
bool HasF16c() {
  // CPUID leaf 1, ECX bit 29 (cpuid.h's bit_F16C): clang 14's
  // __builtin_cpu_supports does not know "f16c" (the fuzz build uses it).
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & bit_F16C) != 0 && __builtin_cpu_supports("avx");
  }();
  return has;
}

__attribute__((target("avx,f16c"))) void EncodeFp16F16c(const float* in, int64_t n,
                                                         uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToFp16(in[i]);
}

__attribute__((target("avx,f16c"))) void DecodeFp16F16c(const uint16_t* in, int64_t n,
                                                         float* out, bool add) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, add ? _mm256_add_ps(_mm256_loadu_ps(out + i), f) : f);
  }
  for (; i < n; ++i) out[i] = add ? out[i] + Fp16ToFloat(in[i]) : Fp16ToFloat(in[i]);
}

// bf16 arrays with AVX2, 8 at a time: the same integer rounding as
// FloatToBf16 (add 0x7fff plus the kept part's lowest bit, keep the top 16
// bits; NaN made quiet), so the same bits. The scalar loop's NaN branch
// keeps the compiler from vectorizing it: a ps round of the main job's
// gradient converts 814 KB four times.
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

__attribute__((target("avx2"))) void EncodeBf16Avx2(const float* in, int64_t n, uint16_t* out) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    const __m256i high = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(high, one)), 16);
    // |u| > inf as signed 32-bit integers (both non-negative): a NaN.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // 8 values < 2^16 in 32-bit lanes -> 8 x 16 bits: pack within each
    // 128-bit half, then bring the halves' low quadwords together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

__attribute__((target("avx2"))) void DecodeBf16Avx2(const uint16_t* in, int64_t n, float* out,
                                                    bool add) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    _mm256_storeu_ps(out + i, add ? _mm256_add_ps(_mm256_loadu_ps(out + i), f) : f);
  }
  for (; i < n; ++i) out[i] = add ? out[i] + Bf16ToFloat(in[i]) : Bf16ToFloat(in[i]);
}

}  // namespace

void Encode16(WireFormat w, const float* in, int64_t n, uint16_t* out) {
  if (w == WireFormat::kBf16 && HasAvx2()) {
    EncodeBf16Avx2(in, n, out);
  } else if (w == WireFormat::kBf16) {
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
  } else if (HasF16c()) {
    EncodeFp16F16c(in, n, out);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToFp16(in[i]);
  }
}

void Decode16(WireFormat w, const uint16_t* in, int64_t n, float* out) {
  if (w == WireFormat::kBf16 && HasAvx2()) {
    DecodeBf16Avx2(in, n, out, /*add=*/false);
  } else if (w == WireFormat::kBf16) {
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
  } else if (HasF16c()) {
    DecodeFp16F16c(in, n, out, /*add=*/false);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFloat(in[i]);
  }
}

void DecodeAdd16(WireFormat w, const uint16_t* in, int64_t n, float* acc) {
  if (w == WireFormat::kBf16 && HasAvx2()) {
    DecodeBf16Avx2(in, n, acc, /*add=*/true);
  } else if (w == WireFormat::kBf16) {
    for (int64_t i = 0; i < n; ++i) acc[i] += Bf16ToFloat(in[i]);
  } else if (HasF16c()) {
    DecodeFp16F16c(in, n, acc, /*add=*/true);
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] += Fp16ToFloat(in[i]);
  }
}

void RoundTrip16(WireFormat w, float* v, int64_t n) {
  if (w == WireFormat::kBf16) {
    for (int64_t i = 0; i < n; ++i) v[i] = Bf16ToFloat(FloatToBf16(v[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = Fp16ToFloat(FloatToFp16(v[i]));
  }
}

bool Fp16UsesF16c() { return HasF16c(); }

bool Bf16UsesAvx2() { return HasAvx2(); }

}  // namespace lockstep
