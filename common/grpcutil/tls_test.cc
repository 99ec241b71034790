#include "common/grpcutil/tls.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string Write(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Not a real key pair: Load only checks the files are readable PEM of the
// right kind (gRPC checks the rest when it builds the credentials).
const char kCert[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const char kKey[] = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";

TEST(TlsTest, NoFlagsIsRefusedNamingBothChoices) {
  absl::StatusOr<GrpcSecurity> s = GrpcSecurity::Load(TlsFiles());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* want : {"no transport security chosen", "--tls_cert, --tls_key and --tls_ca",
                           "deploy/certs.sh", "--insecure"}) {
    EXPECT_NE(s.status().message().find(want), std::string::npos) << want << ": " << s.status();
  }
  // In-process plain text (tests, benches) is still the default constructor.
  EXPECT_FALSE(GrpcSecurity().tls());
}

TEST(TlsTest, InsecureIsExplicitAndExclusive) {
  TlsFiles f;
  f.insecure = true;
  absl::StatusOr<GrpcSecurity> s = GrpcSecurity::Load(f);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->explicitly_insecure());
  EXPECT_FALSE(s->tls());
  f.ca = Write("ca.pem", kCert);
  s = GrpcSecurity::Load(f);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--insecure: cannot be combined"), std::string::npos);
}

TEST(TlsTest, ErrorsNameTheFlagAndFile) {
  TlsFiles f;
  f.cert = Write("c.pem", kCert);
  f.key = Write("k.pem", kKey);
  absl::StatusOr<GrpcSecurity> s = GrpcSecurity::Load(f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls_ca: missing"), std::string::npos) << s.status();

  f.ca = "/nonexistent/ca.pem";
  s = GrpcSecurity::Load(f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls_ca: cannot read /nonexistent/ca.pem"),
            std::string::npos)
      << s.status();

  f.ca = Write("ca.pem", kCert);
  f.key = Write("notakey.pem", kCert);  // a certificate where the key belongs
  s = GrpcSecurity::Load(f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls_key: " + f.key + " is not a PEM PRIVATE KEY"),
            std::string::npos)
      << s.status();

  f.key = Write("k.pem", kKey);
  s = GrpcSecurity::Load(f);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->tls());
  EXPECT_NE(s->Describe().find("mutual TLS (CA " + f.ca), std::string::npos);
}

TEST(TlsTest, TokenFile) {
  absl::StatusOr<std::string> t = ReadTokenFile("--token_file", Write("t1", "  abc123\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "abc123");
  const std::string empty = Write("t2", "\n \n");
  t = ReadTokenFile("--token_file", empty);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "--token_file: " + empty + " is empty");
  t = ReadTokenFile("--token_file", Write("t3", "two words"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("one token of printable ASCII"), std::string::npos);
  t = ReadTokenFile("--token_file", Write("t4", std::string(5000, 'a')));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("expected at most 4096"), std::string::npos);
  t = ReadTokenFile("--token_file", "/nonexistent/token");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--token_file: cannot read /nonexistent/token"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep
