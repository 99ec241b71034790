#include "common/daemon_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string TmpNameFor(const std::string& path) { return absl::StrCat(path, ".tmp.", getpid()); }

TEST(WritePortFileTest, WritesPortAndNewlineAndLeavesNoTemporary) {
  const std::string path = absl::StrCat(TmpDir(), "/port_written");
  ASSERT_TRUE(WritePortFile(path, 43210).ok());
  EXPECT_EQ(ReadFile(path), "43210\n");
  EXPECT_FALSE(Exists(TmpNameFor(path)));
}

TEST(WritePortFileTest, ReplacesAnExistingFileWhole) {
  const std::string path = absl::StrCat(TmpDir(), "/port_replaced");
  { std::ofstream(path) << "a much longer old content that must not survive\n"; }
  ASSERT_TRUE(WritePortFile(path, 7).ok());
  EXPECT_EQ(ReadFile(path), "7\n");
  EXPECT_FALSE(Exists(TmpNameFor(path)));
}

TEST(WritePortFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  const std::string path = absl::StrCat(TmpDir(), "/no/such/dir/port");
  const absl::Status s = WritePortFile(path, 1234);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("cannot create"), absl::string_view::npos) << s;
  EXPECT_FALSE(Exists(path));
}

TEST(WritePortFileTest, FailedRenameNamesThePathAndRemovesTheTemporary) {
  // A directory where the file should go: the temporary is written, the
  // rename over the directory fails.
  const std::string path = absl::StrCat(TmpDir(), "/port_is_a_dir");
  ASSERT_TRUE(mkdir(path.c_str(), 0755) == 0 || errno == EEXIST);
  const absl::Status s = WritePortFile(path, 1234);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(absl::StrCat(" to ", path)), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("cannot rename"), absl::string_view::npos) << s;
  EXPECT_FALSE(Exists(TmpNameFor(path)));
}

TEST(AdvertisedAddressTest, WildcardListenWithoutFlagLeavesTheHostToTheReceiver) {
  // Never the machine's host name: cloned hosts share one.
  for (const char* wildcard : {"", "0.0.0.0", "[::]", "::"}) {
    absl::StatusOr<std::string> a = AdvertisedAddress("--advertise", "", wildcard, 5000);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(*a, ":5000") << wildcard;
  }
}

TEST(AdvertisedAddressTest, ConcreteListenHostIsKept) {
  EXPECT_EQ(*AdvertisedAddress("--advertise", "", "127.0.0.1", 7070), "127.0.0.1:7070");
  EXPECT_EQ(*AdvertisedAddress("--advertise", "", "node-3.example", 1), "node-3.example:1");
  EXPECT_EQ(*AdvertisedAddress("--advertise", "", "[::1]", 8080), "[::1]:8080");
}

TEST(AdvertisedAddressTest, BareHostGetsTheBoundPort) {
  EXPECT_EQ(*AdvertisedAddress("--advertise", "10.77.0.3", "0.0.0.0", 7071), "10.77.0.3:7071");
  EXPECT_EQ(*AdvertisedAddress("--advertise", "vm-2", "0.0.0.0", 7071), "vm-2:7071");
  EXPECT_EQ(*AdvertisedAddress("--advertise", "[fd00::3]", "::", 7071), "[fd00::3]:7071");
  EXPECT_EQ(*AdvertisedAddress("--advertise", "fd00::3", "::", 7071), "[fd00::3]:7071");
}

TEST(AdvertisedAddressTest, HostAndPortAreKept) {
  EXPECT_EQ(*AdvertisedAddress("--advertise", "10.77.0.3:9000", "0.0.0.0", 7071),
            "10.77.0.3:9000");
  EXPECT_EQ(*AdvertisedAddress("--advertise", "[fd00::3]:9000", "::", 7071), "[fd00::3]:9000");
}

TEST(AdvertisedAddressTest, MalformedValuesNameTheFlagAndTheExpectedForm) {
  for (const char* bad : {"host:", "host:abc", "host:0", "host:70000", ":7071", "0.0.0.0",
                          "[::1", "[]:80", "[::1]x", "[::1]:"}) {
    absl::StatusOr<std::string> a = AdvertisedAddress("--advertise", bad, "0.0.0.0", 7071);
    ASSERT_FALSE(a.ok()) << bad << " gave " << *a;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(a.status().message(),
              absl::StrCat("--advertise: expected HOST or HOST:PORT (IPv6 as [ADDR] or "
                           "[ADDR]:PORT, PORT in 1..65535), got \"",
                           bad, "\""));
  }
}

TEST(HostOfAddressTest, SplitsHostFromPort) {
  EXPECT_EQ(HostOfAddress("10.0.0.1:7070"), "10.0.0.1");
  EXPECT_EQ(HostOfAddress("[::1]:7070"), "[::1]");
  EXPECT_EQ(HostOfAddress(":7070"), "");
  EXPECT_EQ(HostOfAddress("coordinator"), "coordinator");
  EXPECT_EQ(HostOfAddress("fd00::1"), "fd00::1");
}

TEST(HostFromGrpcPeerTest, ParsesIpv4AndIpv6PeersAndRejectsTheRest) {
  EXPECT_EQ(*HostFromGrpcPeer("ipv4:10.77.0.3:53122"), "10.77.0.3");
  EXPECT_EQ(*HostFromGrpcPeer("ipv6:[::1]:53122"), "[::1]");
  EXPECT_EQ(*HostFromGrpcPeer("ipv6:%5B::1%5D:53122"), "[::1]");
  EXPECT_EQ(*HostFromGrpcPeer("ipv6:%5Bfd00::3%5D:1"), "[fd00::3]");
  for (const char* bad : {"", "unix:/tmp/s", "ipv4:", "ipv4:10.0.0.1", "ipv6:::1", "dns:x:1"}) {
    EXPECT_FALSE(HostFromGrpcPeer(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace lockstep
