// Fuzz target: the raw-TCP parameter-server wire codec
// (common/psnet/ps_wire.h): hello (and its mac check), hello reply, frame
// and challenge decoders.
// Input: byte 0 % 4 picks the decoder, the rest (zero-padded to 104 bytes)
// is the header. A hello's mac verifies under the fixed secret and nonce
// only if the input is exactly what EncodeHello writes for its fields and
// client nonce; a hello reply's mac (for a fixed hello) only if it is
// exactly what SignHelloReply writes for its fields. Checks no decoder crashes or overflows, that what decodes
// re-encodes to the same bytes (round trip), and that an accepted frame has
// len >= 0.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/psnet/ps_wire.h"

namespace psnet = lockstep::psnet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t buf[psnet::kHelloBytes > psnet::kFrameBytes ? psnet::kHelloBytes
                                                        : psnet::kFrameBytes] = {};
  std::memcpy(buf, data + 1, std::min(size - 1, sizeof(buf)));
  const std::string secret(lockstep::dataauth::kSecretBytes, 'f');
  lockstep::dataauth::Nonce nonce;
  nonce.fill(0x5a);
  switch (data[0] % 4) {
    case 0: {
      psnet::Hello h;
      const bool verified = psnet::VerifyHello(buf, secret, nonce).ok();
      if (psnet::DecodeHello(buf, &h).ok()) {
        uint8_t again[psnet::kHelloBytes];
        lockstep::dataauth::Nonce own;
        std::memcpy(own.data(), buf + psnet::kHelloFieldBytes, own.size());
        psnet::EncodeHello(h, secret, nonce, own, again);
        psnet::Hello h2;
        if (!psnet::DecodeHello(again, &h2).ok() || h2.job != h.job ||
            h2.shard != h.shard || h2.num_workers != h.num_workers ||
            h2.shard_len != h.shard_len || !psnet::VerifyHello(again, secret, nonce).ok()) {
          std::abort();
        }
        if (verified != (std::memcmp(again, buf, psnet::kHelloBytes) == 0)) std::abort();
      }
      break;
    }
    case 3: {
      lockstep::dataauth::Nonce n;
      if (psnet::DecodeChallenge(buf, &n).ok()) {
        uint8_t again[psnet::kChallengeBytes];
        psnet::EncodeChallenge(n, again);
        if (std::memcmp(again, buf, sizeof(again)) != 0) std::abort();
      }
      break;
    }
    case 1: {
      lockstep::dataauth::Nonce own;
      own.fill(0xa5);
      psnet::Hello fixed;
      fixed.job = 5;
      fixed.num_workers = 2;
      fixed.shard_len = 1000;
      uint8_t hello[psnet::kHelloBytes];
      psnet::EncodeHello(fixed, secret, nonce, own, hello);
      uint8_t want[psnet::kHelloReplyBytes];
      std::memcpy(want, buf, psnet::kHelloReplyFieldBytes);
      psnet::SignHelloReply(hello, secret, nonce, want);
      const bool verified = psnet::VerifyHelloReply(buf, hello, secret, nonce).ok();
      if (verified != (std::memcmp(want, buf, sizeof(want)) == 0)) std::abort();
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
