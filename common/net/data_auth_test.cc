// data_auth: the MAC is HMAC-SHA256 of domain || 0 || message || nonce (the
// expected values were computed with Python's hmac module), secrets and
// nonces are random, the comparison is exact.
#include "common/net/data_auth.h"

#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace dataauth {
namespace {

std::string Key() {
  std::string k(32, '\0');
  for (int i = 0; i < 32; ++i) k[i] = static_cast<char>(i);
  return k;
}

std::string Hex(const Mac& m) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(m.data()), m.size()));
}

TEST(DataAuth, HelloMacIsHmacSha256OfDomainMessageAndNonce) {
  Nonce nonce;
  nonce.fill(7);
  const std::string msg = "lockstep";
  const Mac m = HelloMac(Key(), "test domain", reinterpret_cast<const uint8_t*>(msg.data()),
                         msg.size(), nonce);
  // python3: hmac.new(bytes(range(32)), b'test domain\0lockstep' + bytes([7])*32,
  //                   hashlib.sha256).hexdigest()
  EXPECT_EQ(Hex(m), "edfbc815183e708c31b67f962079839b679f1ec8ff4a71dffad30f482ccbee12");
  // Another domain, nonce or key gives another MAC.
  EXPECT_NE(Hex(HelloMac(Key(), "other domain", reinterpret_cast<const uint8_t*>(msg.data()),
                         msg.size(), nonce)),
            Hex(m));
  Nonce other = nonce;
  other[31] = 8;
  EXPECT_NE(Hex(HelloMac(Key(), "test domain", reinterpret_cast<const uint8_t*>(msg.data()),
                         msg.size(), other)),
            Hex(m));
  std::string key2 = Key();
  key2[0] = 1;
  EXPECT_NE(Hex(HelloMac(key2, "test domain", reinterpret_cast<const uint8_t*>(msg.data()),
                         msg.size(), nonce)),
            Hex(m));
}

TEST(DataAuth, JobGroupSecretIsPerGroupAndPerKey) {
  const std::string s = JobGroupSecret(Key(), (uint64_t{5} << 20) | 7);
  ASSERT_EQ(s.size(), kSecretBytes);
  // python3: hmac.new(bytes(range(32)), b'lockstep job group secret v1\0' +
  //   struct.pack('<Q', (5 << 20) | 7) + bytes(32), hashlib.sha256).hexdigest()
  EXPECT_EQ(absl::BytesToHexString(s),
            "882203a431c4f118ce856ae7b0a4b05d5f31aa57f859b821d28c91ce8fa67459");
  EXPECT_NE(JobGroupSecret(Key(), (uint64_t{5} << 20) | 8), s);
  EXPECT_NE(JobGroupSecret(RandomSecret(), (uint64_t{5} << 20) | 7), s);
}

TEST(DataAuth, RandomSecretsAndNoncesDiffer) {
  const std::string a = RandomSecret(), b = RandomSecret();
  EXPECT_EQ(a.size(), kSecretBytes);
  EXPECT_NE(a, b);
  EXPECT_NE(RandomNonce(), RandomNonce());
}

TEST(DataAuth, MacEqualComparesEveryByte) {
  Mac a;
  a.fill(3);
  Mac b = a;
  EXPECT_TRUE(MacEqual(a.data(), b.data(), a.size()));
  b[31] ^= 1;
  EXPECT_FALSE(MacEqual(a.data(), b.data(), a.size()));
  b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(MacEqual(a.data(), b.data(), a.size()));
}

}  // namespace
}  // namespace dataauth
}  // namespace lockstep
