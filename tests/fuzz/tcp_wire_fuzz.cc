// Fuzz target: the raw-TCP peer transport's wire codec (worker/net/
// tcp_wire.h): the challenge, hello, accept and frame decoders and the
// hello's and accept's mac checks, what TcpPeerHub, TcpTransport's connect
// and TcpTransport::Recv run on the first bytes a stranger sends.
// Input: byte 0 % 4 picks frame (0), hello (1), challenge (2) or accept (3);
// the rest (zero-padded to 104 bytes) is the message. Checks no crash; that
// an accepted hello names ranks inside the world (from != to, world <=
// 2^20); that the input's mac never verifies under the fixed secret and
// nonce unless it is exactly the mac EncodeHello writes for its fields and
// connector nonce; that an accept verifies (for a fixed hello) only if it
// is exactly EncodeAccept's bytes; that an accepted frame has 0 <= len <=
// 2^40; and that everything accepted re-encodes to the same decoded values.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/net/tcp_wire.h"

namespace tcpwire = lockstep::tcpwire;
namespace dataauth = lockstep::dataauth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t buf[tcpwire::kHelloBytes] = {};
  std::memcpy(buf, data + 1, std::min(size - 1, sizeof(buf)));
  const std::string secret(dataauth::kSecretBytes, 'f');
  dataauth::Nonce nonce;
  nonce.fill(0x5a);
  switch (data[0] % 4) {
    case 1: {
      tcpwire::Hello h;
      const bool decoded = tcpwire::DecodeHello(buf, &h).ok();
      const bool verified = tcpwire::VerifyHello(buf, secret, nonce).ok();
      if (decoded) {
        if (h.world < 1 || h.world > tcpwire::kMaxWorld || h.from >= h.world ||
            h.to >= h.world || h.from == h.to) {
          std::abort();
        }
        uint8_t again[tcpwire::kHelloBytes];
        dataauth::Nonce own;
        std::memcpy(own.data(), buf + tcpwire::kHeaderBytes, own.size());
        tcpwire::EncodeHello(h, secret, nonce, own, again);
        tcpwire::Hello h2;
        if (!tcpwire::DecodeHello(again, &h2).ok() || h2.group != h.group ||
            h2.from != h.from || h2.to != h.to || h2.world != h.world ||
            !tcpwire::VerifyHello(again, secret, nonce).ok()) {
          std::abort();
        }
        // The input verifies only if its bytes are exactly the encoding.
        if (verified != (std::memcmp(again, buf, sizeof(again)) == 0)) std::abort();
      }
      break;
    }
    case 2: {
      dataauth::Nonce n;
      if (tcpwire::DecodeChallenge(buf, &n).ok()) {
        uint8_t again[tcpwire::kChallengeBytes];
        tcpwire::EncodeChallenge(n, again);
        if (std::memcmp(again, buf, sizeof(again)) != 0) std::abort();
      }
      break;
    }
    case 3: {
      dataauth::Nonce own;
      own.fill(0xa5);
      uint8_t hello[tcpwire::kHelloBytes];
      tcpwire::EncodeHello(tcpwire::Hello{77, 1, 0, 3}, secret, nonce, own, hello);
      uint8_t want[tcpwire::kAcceptBytes];
      tcpwire::EncodeAccept(hello, secret, nonce, want);
      const bool verified = tcpwire::VerifyAccept(buf, hello, secret, nonce).ok();
      if (verified != (std::memcmp(want, buf, sizeof(want)) == 0)) std::abort();
      break;
    }
    default: {
      tcpwire::Frame f;
      if (tcpwire::DecodeFrame(buf, &f)) {
        if (f.len < 0 || f.len > tcpwire::kMaxFrameBytes) std::abort();
        uint8_t again[tcpwire::kHeaderBytes];
        tcpwire::EncodeFrame(f.key, f.len, again);
        if (std::memcmp(again, buf, tcpwire::kHeaderBytes) != 0) std::abort();
      }
      break;
    }
  }
  return 0;
}
