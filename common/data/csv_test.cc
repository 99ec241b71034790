#include "common/data/csv.h"

#include <string>

#include "common/data/test_util.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing_util::TempPath;
using testing_util::WriteFile;
using testing_util::WriteGzipFile;

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

TEST(CsvTest, ParsesWithAutoDetectedHeader) {
  absl::StatusOr<Dataset> ds =
      ParseCsv("label,a,b\r\n1, 0.5,2\n\n0,-1e2,3.25\n2,0,0\n", "mem.csv");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 3);
  EXPECT_EQ(ds->dim, 2);
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(ds->x, (std::vector<float>{0.5f, 2, -100, 3.25f, 0, 0}));
  EXPECT_EQ(ds->y, (std::vector<float>{1, 0, 2}));
  EXPECT_TRUE(ValidateDataset(*ds).ok());
}

TEST(CsvTest, NoHeaderAutoDetected) {
  absl::StatusOr<Dataset> ds = ParseCsv("1,2,3\n0,5,6\n", "mem.csv");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 2);
  EXPECT_EQ(ds->x, (std::vector<float>{2, 3, 5, 6}));
}

TEST(CsvTest, ExplicitHeaderFlag) {
  CsvOptions o;
  o.header = CsvHeader::kYes;
  // A numeric first line is still skipped when told so.
  absl::StatusOr<Dataset> ds = ParseCsv("9,9,9\n1,2,3\n", "mem.csv", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_examples, 1);
  EXPECT_EQ(ds->y, std::vector<float>{1});
  o.header = CsvHeader::kNo;
  absl::StatusOr<Dataset> bad = ParseCsv("y,a\n1,2\n", "mem.csv", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status(), "file mem.csv: line 1, column 1"))
      << bad.status();
}

TEST(CsvTest, NegativeLabelColumnAndRegression) {
  CsvOptions o;
  o.label_column = -1;
  o.regression = true;
  o.delimiter = ';';
  absl::StatusOr<Dataset> ds = ParseCsv("1;2;0.75\n3;4;-2.5\n", "r.csv", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_classes, 0);
  EXPECT_EQ(ds->x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds->y, (std::vector<float>{0.75f, -2.5f}));
  o.label_column = 1;  // middle column
  o.regression = false;
  ds = ParseCsv("1;2;0\n3;4;5\n", "m.csv", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->x, (std::vector<float>{1, 0, 3, 5}));
  EXPECT_EQ(ds->y, (std::vector<float>{2, 4}));
  EXPECT_EQ(ds->num_classes, 5);
}

TEST(CsvTest, LabelColumnOutOfRange) {
  CsvOptions o;
  o.label_column = -4;
  absl::StatusOr<Dataset> ds = ParseCsv("1,2,3\n", "c.csv", o);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "label column -4 out of range for 3"))
      << ds.status();
}

TEST(CsvTest, NonNumericField) {
  const std::string p = TempPath("bad_field.csv");
  WriteFile(p, "a,b,c\n1,2,3\n0,abc,4\n");
  absl::StatusOr<Dataset> ds = LoadCsv(p);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "file " + p + ": line 3, column 2"))
      << ds.status();
  EXPECT_TRUE(Contains(ds.status(), "\"abc\"")) << ds.status();
  // nan / inf / empty fields are not accepted either.
  for (const char* text : {"1,nan\n", "1,inf\n", "1,\n", "1,2 3\n"}) {
    absl::StatusOr<Dataset> r = ParseCsv(text, "x.csv");
    EXPECT_FALSE(r.ok()) << text;
  }
  // A first line mixing numbers and text is data, not a header: an error.
  absl::StatusOr<Dataset> mixed = ParseCsv("1,x,3\n1,2,3\n", "mix.csv");
  ASSERT_FALSE(mixed.ok());
  EXPECT_TRUE(Contains(mixed.status(), "file mix.csv: line 1, column 2"))
      << mixed.status();
}

TEST(CsvTest, RaggedRow) {
  const std::string p = TempPath("ragged.csv.gz");
  WriteGzipFile(p, "1,2,3\n0,1,2\n\n1,2\n");
  absl::StatusOr<Dataset> ds = LoadCsv(p);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(ds.status(), "file " + p + ": line 4 has 2 fields, expected 3"))
      << ds.status();
}

TEST(CsvTest, EmptyFileAndHeaderOnly) {
  const std::string p = TempPath("empty.csv");
  WriteFile(p, "");
  absl::StatusOr<Dataset> ds = LoadCsv(p);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "file " + p + ": no data rows"))
      << ds.status();
  absl::StatusOr<Dataset> hdr = ParseCsv("a,b\n\n", "h.csv");
  ASSERT_FALSE(hdr.ok());
  EXPECT_TRUE(Contains(hdr.status(), "file h.csv: no data rows"))
      << hdr.status();
}

TEST(CsvTest, LabelOutOfRangeAndNonInteger) {
  CsvOptions o;
  o.num_classes = 3;
  absl::StatusOr<Dataset> ds = ParseCsv("0,1\n2,1\n3,1\n", "l.csv", o);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(),
                       "file l.csv: line 3, column 1: label \"3\" out of "
                       "range, expected an integer class id in [0, 3)"))
      << ds.status();
  absl::StatusOr<Dataset> frac = ParseCsv("0,1\n1.5,1\n", "f.csv");
  ASSERT_FALSE(frac.ok());
  EXPECT_TRUE(Contains(frac.status(),
                       "line 2, column 1: label \"1.5\" is "
                       "not an integer"))
      << frac.status();
  absl::StatusOr<Dataset> neg = ParseCsv("-1,1\n", "n.csv");
  ASSERT_FALSE(neg.ok());
  EXPECT_TRUE(Contains(neg.status(), "line 1, column 1")) << neg.status();
}

TEST(CsvTest, SingleColumnRejected) {
  absl::StatusOr<Dataset> ds = ParseCsv("1\n2\n", "one.csv");
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), "expected at least 2")) << ds.status();
}

}  // namespace
}  // namespace lockstep
