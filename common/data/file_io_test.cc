#include "common/data/file_io.h"

#include <string>

#include "common/data/test_util.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing_util::TempPath;
using testing_util::WriteFile;
using testing_util::WriteGzipFile;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + 7) % 251);
  return s;
}

TEST(FileIoTest, PlainAndGzipRoundTrip) {
  const std::string data = Pattern(300000);
  const std::string plain = TempPath("fio_plain.bin");
  const std::string gz = TempPath("fio_data.gz");
  WriteFile(plain, data);
  WriteGzipFile(gz, data);
  absl::StatusOr<FileBytes> a = ReadFileBytes(plain);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->gzipped);
  EXPECT_EQ(a->data, data);
  absl::StatusOr<FileBytes> b = ReadFileBytes(gz);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->gzipped);
  EXPECT_EQ(b->data, data);
  EXPECT_EQ(b->Where(8), "file " + gz + ": decompressed offset 8");
  EXPECT_EQ(a->Where(8), "file " + plain + ": offset 8");
}

TEST(FileIoTest, ConcatenatedGzipMembers) {
  const std::string g1 = TempPath("fio_m1.gz"), g2 = TempPath("fio_m2.gz");
  WriteGzipFile(g1, "hello ");
  WriteGzipFile(g2, "world");
  absl::StatusOr<FileBytes> p1 = ReadFileBytes(g1);
  ASSERT_TRUE(p1.ok());
  // Concatenate the raw compressed files.
  std::string raw;
  for (const std::string& p : {g1, g2}) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) raw.append(buf, got);
    std::fclose(f);
  }
  absl::StatusOr<std::string> out = GunzipBytes(raw, "cat");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hello world");
}

TEST(FileIoTest, TruncatedGzipIsDataLoss) {
  const std::string gz = TempPath("fio_trunc_src.gz");
  WriteGzipFile(gz, Pattern(100000));
  absl::StatusOr<FileBytes> whole = ReadFileBytes(gz);
  ASSERT_TRUE(whole.ok());
  std::string raw;
  {
    std::FILE* f = std::fopen(gz.c_str(), "rb");
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) raw.append(buf, got);
    std::fclose(f);
  }
  const std::string cut = TempPath("fio_trunc.gz");
  WriteFile(cut, raw.substr(0, raw.size() / 2));
  absl::StatusOr<FileBytes> r = ReadFileBytes(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(cut), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos)
      << r.status();
  // Corrupt the deflate payload.
  std::string bad = raw;
  for (size_t i = 20; i < 60; ++i) bad[i] = static_cast<char>(0xff);
  const std::string corrupt = TempPath("fio_corrupt.gz");
  WriteFile(corrupt, bad);
  absl::StatusOr<FileBytes> c = ReadFileBytes(corrupt);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
  EXPECT_NE(c.status().message().find("compressed offset"), std::string::npos)
      << c.status();
}

TEST(FileIoTest, MissingFileIsNotFound) {
  absl::StatusOr<FileBytes> r = ReadFileBytes(TempPath("does_not_exist"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("does_not_exist"), std::string::npos);
}

TEST(FileIoTest, EmptyFileIsEmptyData) {
  const std::string p = TempPath("fio_empty");
  WriteFile(p, "");
  absl::StatusOr<FileBytes> r = ReadFileBytes(p);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->data.empty());
}

}  // namespace
}  // namespace lockstep
