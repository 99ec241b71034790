// How gradient floats travel on the ring's wire: as float32 (exact), or
// compressed to 16 bits (bf16 or IEEE fp16) with float32 accumulation at
// every receiver. The int64 example count is always sent exactly.
//
// Rounding: round-to-nearest-even. bf16 keeps float32's exponent range
// (8 bits of mantissa precision); fp16 keeps 11 bits of precision but
// overflows to +-inf beyond +-65504 and loses precision below 6.1e-5
// (subnormals down to 6e-8). NaN stays NaN. Pure functions, thread-safe.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_WIRE_FORMAT_H_
#define LOCKSTEP_COMMON_COLLECTIVE_WIRE_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

enum class WireFormat { kFloat32, kBf16, kFp16 };

// Bytes one float takes on the wire (4 or 2).
inline int64_t WireBytesPerFloat(WireFormat w) {
  return w == WireFormat::kFloat32 ? 4 : 2;
}

// "" and "none" -> kFloat32, "bf16", "fp16"; anything else InvalidArgument
// "expected none, bf16 or fp16, got \"x\"" (the caller names the field).
absl::StatusOr<WireFormat> ParseWireFormat(absl::string_view name);
// "none", "bf16", "fp16".
const char* WireFormatName(WireFormat w);

// The format's number on a wire that carries it (the ps data plane's hello,
// ps.proto's wire_format): 0 float32, 1 bf16, 2 fp16.
int32_t WireFormatCode(WireFormat w);
// The inverse; InvalidArgument "expected 0 (float32), 1 (bf16) or 2
// (fp16), got N" for anything else (the caller names the field).
absl::StatusOr<WireFormat> WireFormatFromCode(int64_t code);

uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

// out[i] = encode(in[i]) for a 16-bit format (w != kFloat32).
void Encode16(WireFormat w, const float* in, int64_t n, uint16_t* out);
// out[i] = decode(in[i]).
void Decode16(WireFormat w, const uint16_t* in, int64_t n, float* out);
// acc[i] += decode(in[i]) (float32 accumulation).
void DecodeAdd16(WireFormat w, const uint16_t* in, int64_t n, float* acc);
// v[i] = decode(encode(v[i])): what a value becomes after one trip on the
// wire.
void RoundTrip16(WireFormat w, float* v, int64_t n);

// Whether the fp16 array functions above use the CPU's F16C conversion
// instructions (same bits as the scalar functions), for tests.
bool Fp16UsesF16c();
// Whether the bf16 array functions use AVX2 (same bits as the scalar
// functions), for tests.
bool Bf16UsesAvx2();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_WIRE_FORMAT_H_
