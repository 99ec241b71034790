// Data-plane authentication helpers: see data_auth.h.
#include "common/net/data_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "absl/base/internal/raw_logging.h"

namespace lockstep {
namespace dataauth {

void RandomBytes(uint8_t* out, size_t n) {
  ABSL_RAW_CHECK(RAND_bytes(out, static_cast<int>(n)) == 1,
                 "OpenSSL RAND_bytes failed: no randomness for data-plane secrets");
}

std::string RandomSecret() {
  std::string s(kSecretBytes, '\0');
  RandomBytes(reinterpret_cast<uint8_t*>(s.data()), s.size());
  return s;
}

Nonce RandomNonce() {
  Nonce n;
  RandomBytes(n.data(), n.size());
  return n;
}

Mac HelloMac(absl::string_view key, absl::string_view domain, const uint8_t* message,
             size_t message_len, const Nonce& nonce) {
  std::string input;
  input.reserve(domain.size() + 1 + message_len + nonce.size());
  input.append(domain.data(), domain.size());
  input.push_back('\0');
  input.append(reinterpret_cast<const char*>(message), message_len);
  input.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  Mac mac{};
  unsigned int len = 0;
  const uint8_t* done =
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const uint8_t*>(input.data()), input.size(), mac.data(), &len);
  ABSL_RAW_CHECK(done != nullptr && len == kMacBytes, "HMAC-SHA256 failed");
  return mac;
}

std::string JobGroupSecret(absl::string_view coordinator_key, uint64_t group_key) {
  uint8_t msg[8];
  std::memcpy(msg, &group_key, sizeof(msg));
  Nonce none{};
  const Mac m = HelloMac(coordinator_key, "lockstep job group secret v1", msg, sizeof(msg), none);
  return std::string(reinterpret_cast<const char*>(m.data()), m.size());
}

bool MacEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

bool SecretEqual(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && MacEqual(reinterpret_cast<const uint8_t*>(a.data()),
                                          reinterpret_cast<const uint8_t*>(b.data()), a.size());
}

}  // namespace dataauth
}  // namespace lockstep
