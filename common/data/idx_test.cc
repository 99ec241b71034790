#include "common/data/idx.h"

#include <string>
#include <vector>

#include "common/data/test_util.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing_util::IdxBytes;
using testing_util::TempPath;
using testing_util::WriteFile;
using testing_util::WriteGzipFile;

// 3 images of 2x2 pixels with values 10*i + j, and labels {2, 0, 1}.
std::string ImagePayload() {
  std::string p;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) p.push_back(static_cast<char>(10 * i + j));
  }
  return p;
}
std::string Images() { return IdxBytes(0x08, {3, 2, 2}, ImagePayload()); }
std::string Labels() {
  return IdxBytes(0x08, {3}, std::string("\x02\x00\x01", 3));
}

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

TEST(IdxTest, PlainRoundTrip) {
  const std::string img = TempPath("idx_img"), lbl = TempPath("idx_lbl");
  WriteFile(img, Images());
  WriteFile(lbl, Labels());
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 3);
  EXPECT_EQ(ds->dim, 4);
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(ds->name, img);
  EXPECT_EQ(ds->x,
            (std::vector<float>{0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}));
  EXPECT_EQ(ds->y, (std::vector<float>{2, 0, 1}));
  EXPECT_TRUE(ValidateDataset(*ds).ok());
}

TEST(IdxTest, GzipRoundTripAndScale255) {
  const std::string img = TempPath("idx_img.gz"), lbl = TempPath("idx_lbl.gz");
  WriteGzipFile(img, Images());
  WriteGzipFile(lbl, Labels());
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl, Normalize::kScale255);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->x.size(), 12u);
  EXPECT_EQ(ds->x[5], 11.0f / 255.0f);
  EXPECT_EQ(ds->y, (std::vector<float>{2, 0, 1}));
}

TEST(IdxTest, ExplicitNumClasses) {
  const std::string img = TempPath("idx_nc_img"), lbl = TempPath("idx_nc_lbl");
  WriteFile(img, Images());
  WriteFile(lbl, Labels());
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl, Normalize::kNone, 10);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->num_classes, 10);
  absl::StatusOr<Dataset> bad = LoadIdxPair(img, lbl, Normalize::kNone, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  // Label 2 is the first element: offset 8 in the label file.
  EXPECT_TRUE(Contains(bad.status(), "file " + lbl + ": offset 8"))
      << bad.status();
  EXPECT_TRUE(Contains(bad.status(), "label 2 out of range, expected [0, 2)"))
      << bad.status();
}

TEST(IdxTest, OtherTypesDecode) {
  // int16 big-endian: -2, 300 ; float32 1.5 ; float64 -0.25 ; int32 70000.
  std::string i16 = IdxBytes(0x0B, {2}, std::string("\xff\xfe\x01\x2c", 4));
  std::string f32 = IdxBytes(0x0D, {1}, std::string("\x3f\xc0\x00\x00", 4));
  std::string f64 =
      IdxBytes(0x0E, {1}, std::string("\xbf\xd0\x00\x00\x00\x00\x00\x00", 8));
  std::string i32 = IdxBytes(0x0C, {1}, std::string("\x00\x01\x11\x70", 4));
  std::string i8 = IdxBytes(0x09, {1, 1}, std::string("\xfb", 1));
  struct Case {
    std::string bytes;
    float want;
  } cases[] = {{i16, 300}, {f32, 1.5f}, {f64, -0.25f}, {i32, 70000}, {i8, -5}};
  int k = 0;
  for (const Case& c : cases) {
    const std::string p = TempPath("idx_type_" + std::to_string(k++));
    WriteFile(p, c.bytes);
    absl::StatusOr<IdxArray> a = ReadIdx(p);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->values.back(), c.want) << p;
  }
  absl::StatusOr<IdxArray> a = ReadIdx(TempPath("idx_type_0"));
  EXPECT_EQ(a->values[0], -2);
  EXPECT_EQ(a->type, IdxType::kInt16);
  EXPECT_EQ(a->dims, std::vector<int64_t>{2});
}

TEST(IdxTest, WrongMagic) {
  const std::string img = TempPath("idx_badmagic"), lbl = TempPath("idx_bm_l");
  // Not an IDX file at all (a PNG signature).
  WriteFile(img, std::string("\x89PNG\r\n\x1a\n", 8) + std::string(16, 'x'));
  WriteFile(lbl, Labels());
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(ds.status(), "file " + img +
                                ": offset 0: expected IDX magic 0x00000803 "
                                "(uint8, 3 dims)"))
      << ds.status();
  EXPECT_TRUE(Contains(ds.status(), "got 0x89504e47")) << ds.status();

  // Images given as labels: 3 dims where 1 is expected.
  const std::string img2 = TempPath("idx_bm_i2");
  WriteFile(img2, Images());
  absl::StatusOr<Dataset> swapped = LoadIdxPair(img2, img2);
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(swapped.status(),
                       ": offset 0: expected IDX magic 0x00000801 (uint8, 1 "
                       "dim)"))
      << swapped.status();
  EXPECT_TRUE(Contains(swapped.status(), "got 0x00000803 (uint8, 3 dims)"))
      << swapped.status();
}

TEST(IdxTest, TruncatedData) {
  const std::string img = TempPath("idx_trunc.gz"), lbl = TempPath("idx_tr_l");
  std::string bytes = Images();
  bytes.resize(bytes.size() - 3);  // 16 header + 12 data -> 25 bytes
  WriteGzipFile(img, bytes);
  WriteFile(lbl, Labels());
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(ds.status(), "file " + img)) << ds.status();
  EXPECT_TRUE(Contains(ds.status(),
                       "expected 12 bytes of data (3x2x2 uint8) at offset 16, "
                       "file has 25 bytes"))
      << ds.status();
}

TEST(IdxTest, TruncatedHeader) {
  const std::string p = TempPath("idx_trunc_hdr");
  WriteFile(p, Images().substr(0, 10));
  absl::StatusOr<IdxArray> a = ReadIdx(p, kIdxImages);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(a.status(), "file " + p + ": offset 4"));
  EXPECT_TRUE(Contains(a.status(), "expected 12 bytes of dimension sizes"))
      << a.status();
  WriteFile(p, Images().substr(0, 3));
  a = ReadIdx(p);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(a.status(), "file has 3")) << a.status();
}

TEST(IdxTest, HugeDimsDoNotOverflow) {
  const std::string p = TempPath("idx_huge");
  WriteFile(p, IdxBytes(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu}, "abc"));
  absl::StatusOr<IdxArray> a = ReadIdx(p);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(a.status(), "offset 16")) << a.status();
}

TEST(IdxTest, TrailingBytesRejected) {
  const std::string p = TempPath("idx_trailing");
  WriteFile(p, Images() + "zz");
  absl::StatusOr<IdxArray> a = ReadIdx(p);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(a.status(), "offset 28")) << a.status();
  EXPECT_TRUE(Contains(a.status(), "2 trailing bytes")) << a.status();
}

TEST(IdxTest, CountMismatch) {
  const std::string img = TempPath("idx_cm_i"), lbl = TempPath("idx_cm_l");
  WriteFile(img, Images());
  WriteFile(lbl, IdxBytes(0x08, {2}, std::string("\x01\x00", 2)));
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "image file " + img + " has 3 examples"))
      << ds.status();
  EXPECT_TRUE(Contains(ds.status(), "label file " + lbl + " has 2 labels"))
      << ds.status();
}

TEST(IdxTest, EmptyFile) {
  const std::string img = TempPath("idx_empty"), lbl = TempPath("idx_em_l");
  WriteFile(img, "");
  WriteFile(lbl, Labels());
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(
      Contains(ds.status(), "file " + img + ": offset 0: file is empty"))
      << ds.status();
  EXPECT_TRUE(Contains(ds.status(), "0x00000803")) << ds.status();
}

TEST(IdxTest, MissingFile) {
  absl::StatusOr<Dataset> ds =
      LoadIdxPair(TempPath("idx_nope_i"), TempPath("idx_nope_l"));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(ds.status(), "idx_nope_i")) << ds.status();
}

TEST(IdxTest, NegativeLabelOutOfRange) {
  const std::string img = TempPath("idx_neg_i"), lbl = TempPath("idx_neg_l");
  WriteFile(img, Images());
  // int8 labels {0, -1, 1}: the second one (offset 9) is out of range.
  WriteFile(lbl, IdxBytes(0x09, {3}, std::string("\x00\xff\x01", 3)));
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "file " + lbl + ": offset 9 (label 1)"))
      << ds.status();
  EXPECT_TRUE(Contains(ds.status(), "label -1 out of range")) << ds.status();
}

TEST(IdxTest, FloatLabelsRejected) {
  const std::string img = TempPath("idx_fl_i"), lbl = TempPath("idx_fl_l");
  WriteFile(img, Images());
  WriteFile(lbl, IdxBytes(0x0D, {3}, std::string(12, '\0')));
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "got 0x00000d01 (float32, 1 dims)"))
      << ds.status();
}

TEST(IdxTest, ZeroExamplesRejected) {
  const std::string img = TempPath("idx_z_i"), lbl = TempPath("idx_z_l");
  WriteFile(img, IdxBytes(0x08, {0, 2, 2}, ""));
  WriteFile(lbl, IdxBytes(0x08, {0}, ""));
  absl::StatusOr<Dataset> ds = LoadIdxPair(img, lbl);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "0 examples")) << ds.status();
}

}  // namespace
}  // namespace lockstep
