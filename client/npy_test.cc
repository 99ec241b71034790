#include "client/npy.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(NpyTest, HeaderIsAlignedAndDescribesTheArray) {
  std::vector<float> data = {1.5f, -2.0f, 3.25f, 0.0f, 5.0f, 6.0f};
  std::string b = NpyBytes({2, 3}, data);
  ASSERT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<uint8_t>(b[8]) | (static_cast<uint8_t>(b[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = b.substr(10, header_len);
  EXPECT_EQ(header.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), 0u);
  EXPECT_EQ(header.back(), '\n');
  ASSERT_EQ(b.size(), 10 + header_len + data.size() * 4);
  EXPECT_EQ(std::memcmp(b.data() + 10 + header_len, data.data(), data.size() * 4), 0);
  // A 1-D shape is a one-element tuple.
  EXPECT_NE(NpyBytes({4}, data).find("'shape': (4,)"), std::string::npos);
}

// Python's zipfile (always present with python3) reads the archive back and
// checks every CRC; the .npy header is parsed without numpy.
TEST(NpyTest, NpzOpensWithPythonZipfile) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/w.npz";
  std::vector<float> w = {1, 2, 3, 4, 5, 6}, b = {0.5f, -0.5f};
  ASSERT_TRUE(WriteNpz(path, {{"W0", {3, 2}, w}, {"b0", {2}, b}}).ok());
  const std::string script = dir + "/check.py";
  std::ofstream(script) << R"(import ast, struct, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
assert z.namelist() == ['W0.npy', 'b0.npy'], z.namelist()
raw = z.read('W0.npy')
n = struct.unpack('<H', raw[8:10])[0]
h = ast.literal_eval(raw[10:10 + n].decode())
assert h == {'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)}, h
vals = struct.unpack('<6f', raw[10 + n:])
assert vals == (1, 2, 3, 4, 5, 6), vals
print('ok')
)";
  const std::string cmd = "python3 " + script + " " + path;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST(NpyTest, UnwritablePathIsNamed) {
  std::vector<float> w = {1};
  absl::Status s = WriteNpy("/nonexistent-dir/x.npy", {"x", {1}, w});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.npy"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
