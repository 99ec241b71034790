// Authentication of the raw-TCP data planes (the peer ring's, worker/net/
// tcp_wire.h, and the parameter servers', common/psnet/ps_wire.h): a
// challenge-response over a per-job secret.
//
// The coordinator derives a 32-byte secret per job group (JobGroupSecret:
// HMAC-SHA256 of the group key under a key drawn from OpenSSL's CSPRNG when
// the coordinator starts) and hands it to the job's workers in their
// Assignment, over the (mutually authenticated) control channel. Workers give
// it to the ps servers they use over gRPC (DataAddress). It is never logged
// and never in a status reply.
//
// Each data-plane connection: the accepting side sends a fresh random nonce
// (its challenge) as soon as it accepts; the connecting side answers with its
// hello and HelloMac(secret, domain, hello bytes, nonce); the acceptor checks
// the MAC in constant time (MacEqual) before it accepts any frame. A recorded
// hello is useless on another connection: that one has another nonce.
//
// Thread-safe (OpenSSL 3's RAND and HMAC are).
#ifndef LOCKSTEP_COMMON_NET_DATA_AUTH_H_
#define LOCKSTEP_COMMON_NET_DATA_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {
namespace dataauth {

constexpr size_t kSecretBytes = 32;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// n bytes from OpenSSL's CSPRNG (RAND_bytes). Aborts (CHECK) if the CSPRNG
// fails: running on without randomness would be worse.
void RandomBytes(uint8_t* out, size_t n);
std::string RandomSecret();  // kSecretBytes random bytes
Nonce RandomNonce();

// HMAC-SHA256 under `key` of domain || 0x00 || message || nonce. `domain`
// separates the uses ("lockstep tcp hello v2", "lockstep ps hello v2"), so
// a MAC made for one plane is not valid on the other.
Mac HelloMac(absl::string_view key, absl::string_view domain, const uint8_t* message,
             size_t message_len, const Nonce& nonce);

// The coordinator's secret for job group `group_key` under its start-up key.
std::string JobGroupSecret(absl::string_view coordinator_key, uint64_t group_key);

// Constant-time comparison (CRYPTO_memcmp).
bool MacEqual(const uint8_t* a, const uint8_t* b, size_t n);

// a == b for secrets, tokens and digests: false for different lengths,
// else MacEqual over the bytes (time independent of where they differ).
bool SecretEqual(absl::string_view a, absl::string_view b);

}  // namespace dataauth
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_NET_DATA_AUTH_H_
