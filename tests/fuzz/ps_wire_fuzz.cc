// Fuzz target: the raw-TCP parameter-server wire codec
// (common/psnet/ps_wire.h): hello, hello reply and frame decoders.
// Input: byte 0 picks the decoder, the rest (zero-padded to the fixed size)
// is the header. Checks no decoder crashes or overflows, that what decodes
// re-encodes to the same bytes (round trip), and that an accepted frame has
// len >= 0.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/psnet/ps_wire.h"

namespace psnet = lockstep::psnet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t buf[psnet::kFrameBytes] = {};
  std::memcpy(buf, data + 1, std::min(size - 1, sizeof(buf)));
  switch (data[0] % 3) {
    case 0: {
      psnet::Hello h;
      if (psnet::DecodeHello(buf, &h).ok()) {
        uint8_t again[psnet::kHelloBytes];
        psnet::EncodeHello(h, again);
        psnet::Hello h2;
        if (!psnet::DecodeHello(again, &h2).ok() || h2.job != h.job ||
            h2.shard != h.shard || h2.num_workers != h.num_workers ||
            h2.shard_len != h.shard_len) {
          std::abort();
        }
      }
      break;
    }
    case 1: {
      int32_t code = 0;
      int64_t len = 0;
      if (psnet::DecodeHelloReply(buf, &code, &len).ok()) {
        uint8_t again[psnet::kHelloReplyBytes];
        psnet::EncodeHelloReply(code, len, again);
        int32_t code2 = 0;
        int64_t len2 = 0;
        if (!psnet::DecodeHelloReply(again, &code2, &len2).ok() || code2 != code ||
            len2 != len) {
          std::abort();
        }
      }
      break;
    }
    default: {
      psnet::Frame f;
      if (psnet::DecodeFrame(buf, &f).ok()) {
        if (f.len < 0) std::abort();
        (void)psnet::KindName(f.kind);
        uint8_t again[psnet::kFrameBytes];
        psnet::EncodeFrame(f, again);
        if (std::memcmp(again, buf, psnet::kFrameBytes) != 0) std::abort();
      }
      break;
    }
  }
  return 0;
}
