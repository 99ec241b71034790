// Wire codec of the raw-TCP peer transport (tcp_transport.h): the hello a
// connector sends once per connection and the header of every frame. Pure
// functions over fixed-size byte arrays (no sockets), so that they can be
// unit-tested and fuzzed (tests/fuzz/tcp_wire_fuzz.cc).
//
// All integers little-endian (x86-64 byte order):
//   hello, once per connection, connector -> acceptor (40 bytes):
//     u32 magic 'LKSH' | u32 version | u64 group | u32 from | u32 to |
//     u32 world | u32 0 | u64 0
//   frame, once per message (40 bytes, then `len` payload bytes):
//     u32 magic 'LKSF' | u32 flags (0) | u64 job | i64 step | i32 phase |
//     i32 chunk | i64 len
#ifndef LOCKSTEP_WORKER_NET_TCP_WIRE_H_
#define LOCKSTEP_WORKER_NET_TCP_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "common/collective/transport.h"

namespace lockstep {
namespace tcpwire {

constexpr uint32_t kHelloMagic = 0x48534b4c;  // "LKSH"
constexpr uint32_t kFrameMagic = 0x46534b4c;  // "LKSF"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;  // hello and frame header alike
// Sanity bound on a frame's payload (a corrupt length must not make the
// reader skip forever).
constexpr int64_t kMaxFrameBytes = int64_t{1} << 40;
// Largest world size a hello may name.
constexpr uint32_t kMaxWorld = 1u << 20;

template <typename T>
void Put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

struct Frame {
  MessageKey key;
  int64_t len = 0;
};

void EncodeFrame(const MessageKey& key, int64_t len, uint8_t* p);
// False unless the magic and flags match and 0 <= len <= kMaxFrameBytes.
bool DecodeFrame(const uint8_t* p, Frame* f);

struct Hello {
  uint64_t group = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  uint32_t world = 0;
};

void EncodeHello(const Hello& h, uint8_t* p);
// InvalidArgumentError "bad hello: ..." naming the magic and version, or the
// ranks, unless magic and version match, 1 <= world <= kMaxWorld, from and to
// are below world and differ. *h is filled in either case.
absl::Status DecodeHello(const uint8_t* p, Hello* h);

}  // namespace tcpwire
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_WIRE_H_
