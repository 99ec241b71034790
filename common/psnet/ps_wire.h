// Wire format and socket helpers of the raw-TCP parameter-server data plane
// (ps_tcp_server.h serves it, ps_tcp_client.h dials it). No proto: fixed
// little-endian headers (x86-64 byte order), payloads verbatim.
//
// A connection carries one job's requests for one shard of one server:
//
//   server -> client, once, on accept:  challenge (40 bytes)
//     u32 magic 'LKPC' | u32 version | 32-byte random nonce
//   client -> server, once:  hello (104 bytes)
//     u32 magic 'LKPH' | u32 version | u64 job | i32 shard | i32 num_workers |
//     i64 shard_len | u32 wire | u32 0 | 32-byte client nonce | 32-byte mac
//     wire: how the connection's shard values travel (JobSpec.compression,
//     wire_format.h): 0 float32, 1 bf16, 2 fp16 (2-byte values, rounded
//     once by the sender; the server sums float32). Any other value is
//     refused naming the field. (Clients before bf16/fp16 sent 0 here.)
//     mac = HMAC-SHA256 under the job's data-plane secret (the coordinator's
//     Assignment.data_plane_secret, which the workers registered with this
//     server through DataAddress) of "lockstep ps hello v3" || 0x00 || the
//     hello's first 72 bytes (fields and client nonce) || the challenge's
//     nonce (common/net/data_auth.h). Checked in constant time before
//     anything else: a job without a registered secret, another secret or a
//     hello recorded on another connection is refused (PERMISSION_DENIED).
//   server -> client, once:  hello reply (48 bytes, then `len` bytes of text)
//     u32 magic 'LKPR' | i32 code (absl::StatusCode; 0 = accepted) | i64 len |
//     32-byte mac
//     mac (code 0 only; zeros on a refusal, which the server may not have a
//     secret for) = HMAC-SHA256 under the job's secret of "lockstep ps reply
//     v3" || 0x00 || the reply's first 16 bytes || the hello's first 72
//     bytes || the challenge's nonce. The client checks it in constant time
//     before it sends any frame: a stranger at the shard's data address
//     (one that does not hold the job's secret) gets the hello and nothing
//     else; the client nonce makes a recorded reply useless on another
//     connection.
//
// The server checks the hello against the job's shard before it allocates
// anything (PsShardRegistry: the first hello or gRPC request of a job fixes
// its K and shard length, bounded by the server's cap; later ones must match)
// and answers with the error text, naming the job, shard and both shapes,
// when it does not fit; it then closes the connection and keeps serving.
//
// Then any number of requests, one at a time, each answered before the next:
//
//   frame (56 bytes, then `len` payload bytes), both directions:
//     u32 magic 'LKPF' | u32 kind | u64 job | i64 step | i32 worker |
//     i32 chunk | i64 count | i64 len | i64 wait_us
//
//   kind     direction  payload                 count         answer
//   PUSH     c -> s     shard_len values        examples      ACK or ERROR
//   PULL     c -> s     none                    0             RESULT or ERROR
//   ROUND    c -> s     shard_len values        examples      RESULT or ERROR
//   ACK      s -> c     none                    0
//   RESULT   s -> c     shard_len values (sum)  total count
//
// Values are the hello's wire format: float32 (4 bytes each) or 16-bit
// (2 bytes; the RESULT is the float32 sum rounded once).
//   ERROR    s -> c     message text (<= 4 KiB) absl code
//
// ROUND is a push and the pull of the same (job, step, worker) in one
// message: one message each way per shard and step. A PULL or ROUND waits
// at the server for the step's other pushes for wait_us (at most kMaxWait),
// then answers ERROR naming the workers whose pushes are missing; it stops
// waiting early when the client closes its end or the server shuts down.
// Every request names (job, step, worker, chunk); job must be the hello's,
// chunk 0 (ps combines one bucket per shard), worker in [0, K), and a
// payload exactly the shard's length: anything else is answered with ERROR
// (naming the field and what was expected) and the connection is closed,
// the server keeps serving the others. Pushes are idempotent per (job,
// step, worker) (PsShard).
#ifndef LOCKSTEP_COMMON_PSNET_PS_WIRE_H_
#define LOCKSTEP_COMMON_PSNET_PS_WIRE_H_

#include <sys/uio.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/collective/progress_mark.h"
#include "common/collective/wire_format.h"
#include "common/net/data_auth.h"
#include "common/net/data_conn.h"

namespace lockstep {
namespace psnet {

constexpr uint32_t kHelloMagic = 0x48504b4c;       // "LKPH"
constexpr uint32_t kHelloReplyMagic = 0x52504b4c;  // "LKPR"
constexpr uint32_t kFrameMagic = 0x46504b4c;       // "LKPF"
constexpr uint32_t kChallengeMagic = 0x43504b4c;   // "LKPC"
// 3: the server proves the secret too (client nonce, reply mac). 2:
// challenge and hello mac. 1: no authentication.
constexpr uint32_t kVersion = 3;
constexpr size_t kChallengeBytes = 8 + dataauth::kNonceBytes;  // 40
constexpr size_t kHelloFieldBytes = 40;
constexpr size_t kHelloSignedBytes = kHelloFieldBytes + dataauth::kNonceBytes;  // 72
constexpr size_t kHelloBytes = kHelloSignedBytes + dataauth::kMacBytes;        // 104
constexpr char kHelloDomain[] = "lockstep ps hello v3";
constexpr char kReplyDomain[] = "lockstep ps reply v3";
constexpr size_t kHelloReplyFieldBytes = 16;
constexpr size_t kHelloReplyBytes = kHelloReplyFieldBytes + dataauth::kMacBytes;  // 48
constexpr size_t kFrameBytes = 56;
constexpr int64_t kMaxErrorBytes = 4096;
// Longest a PULL or ROUND waits at the server for the step's other pushes.
constexpr absl::Duration kMaxWait = absl::Minutes(5);

enum class Kind : uint32_t {
  kPush = 1,
  kPull = 2,
  kRound = 3,
  kAck = 4,
  kResult = 5,
  kError = 6,
};
const char* KindName(uint32_t kind);

struct Hello {
  uint64_t job = 0;
  int32_t shard = 0;
  int32_t num_workers = 0;
  int64_t shard_len = 0;
  WireFormat wire = WireFormat::kFloat32;
};

struct Frame {
  uint32_t kind = 0;
  uint64_t job = 0;
  int64_t step = 0;
  int32_t worker = 0;
  int32_t chunk = 0;
  int64_t count = 0;
  int64_t len = 0;  // payload bytes
  int64_t wait_us = 0;
};

void EncodeChallenge(const dataauth::Nonce& nonce, uint8_t out[kChallengeBytes]);
// InvalidArgumentError naming what is wrong (magic, version).
absl::Status DecodeChallenge(const uint8_t in[kChallengeBytes], dataauth::Nonce* nonce);
// The fields, `own_nonce` (fresh per connection: the reply's mac covers
// it) and the mac under `secret` over `challenge`.
void EncodeHello(const Hello& h, absl::string_view secret, const dataauth::Nonce& challenge,
                 const dataauth::Nonce& own_nonce, uint8_t out[kHelloBytes]);
// The fields (InvalidArgumentError naming what is wrong: magic, version,
// wire);
// the mac is checked by VerifyHello once the job's secret is looked up.
absl::Status DecodeHello(const uint8_t in[kHelloBytes], Hello* h);
// PermissionDeniedError naming the job and shard unless the mac fits
// (constant-time comparison).
absl::Status VerifyHello(const uint8_t in[kHelloBytes], absl::string_view secret,
                         const dataauth::Nonce& challenge);
// The reply's fields; its mac zeros (a refusal's).
void EncodeHelloReply(int32_t code, int64_t len, uint8_t out[kHelloReplyBytes]);
// Writes the mac of an encoded reply `out` answering `hello` (kHelloBytes)
// under `secret` and `challenge`: the server's proof that it holds the
// job's secret (accepted hellos only).
void SignHelloReply(const uint8_t hello[kHelloBytes], absl::string_view secret,
                    const dataauth::Nonce& challenge, uint8_t out[kHelloReplyBytes]);
// The client's check of a reply to the hello it sent (constant time):
// PermissionDeniedError when the mac does not fit (the server does not
// hold the job's secret: a stranger at the shard's data address, or a reply
// recorded on another connection).
absl::Status VerifyHelloReply(const uint8_t reply[kHelloReplyBytes],
                              const uint8_t hello[kHelloBytes], absl::string_view secret,
                              const dataauth::Nonce& challenge);
absl::Status DecodeHelloReply(const uint8_t in[kHelloReplyBytes], int32_t* code,
                              int64_t* len);
void EncodeFrame(const Frame& f, uint8_t out[kFrameBytes]);
// Checks the magic and that len >= 0; the caller checks the rest.
absl::Status DecodeFrame(const uint8_t in[kFrameBytes], Frame* f);

// ---- Socket helpers (blocking semantics over non-blocking sockets, every
// wait bounded by a deadline; a socket shut down by another thread makes
// them return UnavailableError at once).

std::string Errno(const char* what);
// Listens on host:port (port 0 = OS-chosen; "[::1]" brackets allowed; ""
// or "0.0.0.0" = every interface). Returns the fd; *bound = the port.
absl::StatusOr<int> Listen(const std::string& host, int port, int* bound);
// Connects to "host:port" before `deadline`; TCP_NODELAY set.
absl::StatusOr<int> Connect(const std::string& address, absl::Time deadline);
// Waits for `events` on fd until `deadline`: OK (ready, or in error, which
// the next I/O call reports), DeadlineExceededError.
absl::Status WaitFd(int fd, short events, absl::Time deadline);
// Reads exactly n bytes. UnavailableError on end of stream / reset ("end of
// stream" when the peer closed before the first byte: *clean_eof set;
// *nothing set when it closed or reset the connection before the first
// byte). Through c's stream (plain or TLS, common/net/data_conn.h).
// `progress` (optional, not owned) is touched whenever a read returns bytes.
absl::Status ReadFully(const dataconn::Conn& c, void* p, size_t n, absl::Time deadline,
                       bool* clean_eof = nullptr, ProgressMark* progress = nullptr,
                       bool* nothing = nullptr);
inline absl::Status ReadFully(int fd, void* p, size_t n, absl::Time deadline,
                              bool* clean_eof = nullptr) {
  return ReadFully(dataconn::Plain(fd), p, n, deadline, clean_eof);
}
// Writes the iovecs completely (modified in place); `progress` as above,
// whenever a write takes bytes.
absl::Status WriteFully(const dataconn::Conn& c, iovec* iov, int iovcnt, absl::Time deadline,
                        ProgressMark* progress = nullptr);
inline absl::Status WriteFully(int fd, iovec* iov, int iovcnt, absl::Time deadline) {
  return WriteFully(dataconn::Plain(fd), iov, iovcnt, deadline);
}
// Reads and drops n bytes.
absl::Status Discard(const dataconn::Conn& c, int64_t n, absl::Time deadline);

}  // namespace psnet
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_PSNET_PS_WIRE_H_
