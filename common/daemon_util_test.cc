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

std::string MachineHostName() {
  char name[256] = {};
  EXPECT_EQ(gethostname(name, sizeof(name) - 1), 0);
  return name[0] != '\0' ? name : "localhost";
}

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

TEST(AdvertisedAddressTest, WildcardHostsBecomeTheMachineHostName) {
  const std::string expected = absl::StrCat(MachineHostName(), ":5000");
  EXPECT_EQ(AdvertisedAddress("", 5000), expected);
  EXPECT_EQ(AdvertisedAddress("0.0.0.0", 5000), expected);
  EXPECT_EQ(AdvertisedAddress("[::]", 5000), expected);
  EXPECT_EQ(AdvertisedAddress("::", 5000), expected);
}

TEST(AdvertisedAddressTest, ConcreteHostIsKept) {
  EXPECT_EQ(AdvertisedAddress("127.0.0.1", 7070), "127.0.0.1:7070");
  EXPECT_EQ(AdvertisedAddress("node-3.example", 1), "node-3.example:1");
  EXPECT_EQ(AdvertisedAddress("[::1]", 8080), "[::1]:8080");
}

}  // namespace
}  // namespace lockstep
