// Fuzz target: the raw-TCP peer transport's hello and frame decoders
// (worker/net/tcp_wire.h), what TcpPeerHub and TcpTransport::Recv run on the
// first 40 bytes a stranger sends.
// Input: byte 0 picks hello or frame, the rest (zero-padded to 40 bytes) is
// the header. Checks no crash, that an accepted hello names ranks inside the
// world (from != to, world <= 2^20), that an accepted frame has
// 0 <= len <= 2^40, and that both re-encode to the same decoded values.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "worker/net/tcp_wire.h"

namespace tcpwire = lockstep::tcpwire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t buf[tcpwire::kHeaderBytes] = {};
  std::memcpy(buf, data + 1, std::min(size - 1, sizeof(buf)));
  if (data[0] & 1) {
    tcpwire::Hello h;
    if (tcpwire::DecodeHello(buf, &h).ok()) {
      if (h.world < 1 || h.world > tcpwire::kMaxWorld || h.from >= h.world ||
          h.to >= h.world || h.from == h.to) {
        std::abort();
      }
      uint8_t again[tcpwire::kHeaderBytes];
      tcpwire::EncodeHello(h, again);
      tcpwire::Hello h2;
      if (!tcpwire::DecodeHello(again, &h2).ok() || h2.group != h.group ||
          h2.from != h.from || h2.to != h.to || h2.world != h.world) {
        std::abort();
      }
    }
  } else {
    tcpwire::Frame f;
    if (tcpwire::DecodeFrame(buf, &f)) {
      if (f.len < 0 || f.len > tcpwire::kMaxFrameBytes) std::abort();
      uint8_t again[tcpwire::kHeaderBytes];
      tcpwire::EncodeFrame(f.key, f.len, again);
      if (std::memcmp(again, buf, tcpwire::kHeaderBytes) != 0) std::abort();
    }
  }
  return 0;
}
