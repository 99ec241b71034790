// Wire codec of the raw-TCP peer transport (tcp_transport.h): the hello a
// connector sends once per connection and the header of every frame. Pure
// functions over fixed-size byte arrays (no sockets), so that they can be
// unit-tested and fuzzed (tests/fuzz/tcp_wire_fuzz.cc).
//
// All integers little-endian (x86-64 byte order):
//   challenge, once per connection, acceptor -> connector, sent on accept
//   (40 bytes):
//     u32 magic 'LKSC' | u32 version | 32-byte random nonce
//   hello, once per connection, connector -> acceptor, in answer (104 bytes):
//     u32 magic 'LKSH' | u32 version | u64 group | u32 from | u32 to |
//     u32 world | u32 0 | u64 0 | 32-byte connector nonce | 32-byte mac
//   mac = HMAC-SHA256 under the job's data-plane secret of
//     "lockstep tcp hello v3" || 0x00 || the hello's first 72 bytes ||
//     the challenge's nonce (common/net/data_auth.h)
//   accept, once per connection, acceptor -> connector, once the hello's mac
//   fits (40 bytes):
//     u32 magic 'LKSA' | u32 version | 32-byte mac
//   mac = HMAC-SHA256 under the same secret of
//     "lockstep tcp accept v3" || 0x00 || the hello's first 72 bytes ||
//     the challenge's nonce
// The acceptor checks the hello's mac in constant time before it reads any
// frame; the connector checks the accept's before it sends any frame. So
// both ends prove they hold the job's secret: a stranger at a peer's
// address (a port taken over after the peer died) learns nothing of the
// job's gradients. Each side's nonce makes the other's mac fresh: a hello
// or accept recorded on one connection does not fit another, and the
// domains keep a hello's mac from passing as an accept.
//   frame, once per message (40 bytes, then `len` payload bytes):
//     u32 magic 'LKSF' | u32 flags (0) | u64 job | i64 step | i32 phase |
//     i32 chunk | i64 len
#ifndef LOCKSTEP_WORKER_NET_TCP_WIRE_H_
#define LOCKSTEP_WORKER_NET_TCP_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/collective/transport.h"
#include "common/net/data_auth.h"

namespace lockstep {
namespace tcpwire {

constexpr uint32_t kHelloMagic = 0x48534b4c;  // "LKSH"
constexpr uint32_t kFrameMagic = 0x46534b4c;  // "LKSF"
constexpr uint32_t kChallengeMagic = 0x43534b4c;  // "LKSC"
constexpr uint32_t kAcceptMagic = 0x41534b4c;  // "LKSA"
// 3: the acceptor proves the secret too (accept; connector nonce in the
// hello). 2: challenge and hello mac. 1: no authentication.
constexpr uint32_t kVersion = 3;
constexpr size_t kHeaderBytes = 40;  // frame header; the hello's fields
constexpr size_t kChallengeBytes = 8 + dataauth::kNonceBytes;                // 40
constexpr size_t kHelloSignedBytes = kHeaderBytes + dataauth::kNonceBytes;   // 72
constexpr size_t kHelloBytes = kHelloSignedBytes + dataauth::kMacBytes;      // 104
constexpr size_t kAcceptBytes = 8 + dataauth::kMacBytes;                     // 40
constexpr char kHelloDomain[] = "lockstep tcp hello v3";
constexpr char kAcceptDomain[] = "lockstep tcp accept v3";
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

void EncodeChallenge(const dataauth::Nonce& nonce, uint8_t* p);  // kChallengeBytes
// InvalidArgumentError "bad challenge: ..." naming the magic and version.
absl::Status DecodeChallenge(const uint8_t* p, dataauth::Nonce* nonce);

// Writes kHelloBytes: the fields, `own_nonce` (fresh per connection: the
// accept's mac covers it) and the mac under `secret` over `challenge`.
void EncodeHello(const Hello& h, absl::string_view secret, const dataauth::Nonce& challenge,
                 const dataauth::Nonce& own_nonce, uint8_t* p);
// Reads the fields (the first kHeaderBytes of a hello; the mac is checked by
// VerifyHello once the receiver's secret is known). InvalidArgumentError
// "bad hello: ..." naming the magic and version, or the ranks, unless magic
// and version match, 1 <= world <= kMaxWorld, from and to are below world
// and differ. *h is filled in either case.
absl::Status DecodeHello(const uint8_t* p, Hello* h);
// Checks the mac of the kHelloBytes at p against `secret` and `challenge`
// (constant time). PermissionDeniedError naming the group and ranks when it
// does not fit (another job's secret, a forged or replayed hello).
absl::Status VerifyHello(const uint8_t* p, absl::string_view secret,
                         const dataauth::Nonce& challenge);

// The acceptor's answer to a verified hello (kHelloBytes at `hello`):
// writes kAcceptBytes to p.
void EncodeAccept(const uint8_t* hello, absl::string_view secret,
                  const dataauth::Nonce& challenge, uint8_t* p);
// The connector's check of the kAcceptBytes at p against the hello it sent
// and the challenge it answered (constant time). InvalidArgumentError "bad
// accept: ..." naming the magic and version; PermissionDeniedError when the
// mac does not fit (the acceptor does not hold the job's secret: a stranger
// at the peer's address, or an answer recorded on another connection).
absl::Status VerifyAccept(const uint8_t* p, const uint8_t* hello, absl::string_view secret,
                          const dataauth::Nonce& challenge);

}  // namespace tcpwire
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_WIRE_H_
