#include "common/data/libsvm.h"

#include <string>

#include "common/data/test_util.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing_util::TempPath;
using testing_util::WriteFile;

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

TEST(LibsvmTest, SignedBinaryDensified) {
  const std::string p = TempPath("a.svm");
  WriteFile(p,
            "# header comment\n"
            "+1 1:0.5 3:2\n"
            "-1 2:-1   # trailing comment\n"
            "\n"
            "1 qid:7 4:1e1\n"
            "-1\n");
  LibsvmLabels resolved = LibsvmLabels::kAuto;
  absl::StatusOr<Dataset> ds = LoadLibsvm(p, {}, &resolved);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(resolved, LibsvmLabels::kSigned);
  EXPECT_EQ(ds->num_examples, 4);
  EXPECT_EQ(ds->dim, 4);
  EXPECT_EQ(ds->num_classes, 2);
  EXPECT_EQ(ds->x, (std::vector<float>{0.5f, 0, 2, 0,  //
                                       0, -1, 0, 0,    //
                                       0, 0, 0, 10,    //
                                       0, 0, 0, 0}));
  EXPECT_EQ(ds->y, (std::vector<float>{1, 0, 1, 0}));
  EXPECT_TRUE(ValidateDataset(*ds).ok());
}

TEST(LibsvmTest, ClassIndexAndExplicitDim) {
  LibsvmOptions o;
  o.dim = 6;
  LibsvmLabels resolved;
  absl::StatusOr<Dataset> ds =
      ParseLibsvm("0 1:1\n2 6:3\n1 2:2\n", "m.svm", o, &resolved);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(resolved, LibsvmLabels::kClassIndex);
  EXPECT_EQ(ds->dim, 6);
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(ds->y, (std::vector<float>{0, 2, 1}));
  EXPECT_EQ(ds->row(1)[5], 3);
  // Explicit class count.
  o.num_classes = 5;
  ds = ParseLibsvm("0 1:1\n2 6:3\n", "m.svm", o);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->num_classes, 5);
  o.num_classes = 2;
  ds = ParseLibsvm("0 1:1\n2 6:3\n", "m.svm", o);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(),
                       "file m.svm: line 2: label \"2\" out of "
                       "range"))
      << ds.status();
}

TEST(LibsvmTest, ExplicitPolicies) {
  LibsvmOptions o;
  o.labels = LibsvmLabels::kRegression;
  absl::StatusOr<Dataset> ds = ParseLibsvm("0.25 1:1\n-3.5 2:1\n", "r", o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->num_classes, 0);
  EXPECT_EQ(ds->y, (std::vector<float>{0.25f, -3.5f}));
  o.labels = LibsvmLabels::kSigned;
  ds = ParseLibsvm("1 1:1\n0 1:1\n", "s", o);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(),
                       "file s: line 2: label \"0\" invalid for "
                       "signed binary labels"))
      << ds.status();
  // kAuto with a mix of -1 and 0 is not signed, and -1 is not a class id.
  ds = ParseLibsvm("-1 1:1\n0 1:1\n", "mix", {});
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(), "file mix: line 1: label \"-1\""))
      << ds.status();
  // kAuto: only +1 labels -> signed mapping gives class 1, as class index.
  LibsvmLabels resolved;
  ds = ParseLibsvm("1 1:1\n", "pos", {}, &resolved);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->y, std::vector<float>{1});
}

TEST(LibsvmTest, BadTokens) {
  struct Case {
    const char* text;
    const char* needle;
  } cases[] = {
      {"1 1:1\nabc 1:1\n", "file t.svm: line 2: expected a numeric label"},
      {"1 1:1\n1 2\n", "file t.svm: line 2: expected index:value, got \"2\""},
      {"1 x:1\n",
       "file t.svm: line 1: expected an integer feature index in "
       "\"x:1\""},
      {"1 1:zz\n",
       "file t.svm: line 1: expected a finite number after ':' "
       "in \"1:zz\""},
      {"1 0:1\n", "file t.svm: line 1: feature index 0 out of range"},
      {"1 3:1 2:1\n",
       "file t.svm: line 1: feature index 2 in \"2:1\" is not "
       "greater than the previous index 3"},
      {"1 2:1 2:1\n", "is not greater than the previous index 2"},
      {"1 1:nan\n", "line 1: expected a finite number"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Dataset> ds = ParseLibsvm(c.text, "t.svm");
    ASSERT_FALSE(ds.ok()) << c.text;
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(ds.status(), c.needle))
        << c.text << " -> " << ds.status();
  }
}

TEST(LibsvmTest, IndexBeyondDim) {
  LibsvmOptions o;
  o.dim = 3;
  absl::StatusOr<Dataset> ds = ParseLibsvm("1 1:1\n1 4:1\n", "d.svm", o);
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status(),
                       "file d.svm: line 2: feature index 4 out "
                       "of range in \"4:1\", expected 1..3"))
      << ds.status();
}

TEST(LibsvmTest, EmptyFile) {
  const std::string p = TempPath("empty.svm");
  WriteFile(p, "# only a comment\n\n");
  absl::StatusOr<Dataset> ds = LoadLibsvm(p);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status(), "file " + p + ": no examples"))
      << ds.status();
  absl::StatusOr<Dataset> nofeat = ParseLibsvm("1\n-1\n", "nf.svm");
  ASSERT_FALSE(nofeat.ok());
  EXPECT_TRUE(Contains(nofeat.status(), "no feature index")) << nofeat.status();
}

// Found by tests/fuzz/data_readers_fuzz: one huge feature index (or many
// examples times a large dim) asked for n x dim floats at once, past 2^40
// bytes; now a named error before any allocation.
TEST(LibsvmTest, DenseSizeIsBoundedBeforeAllocating) {
  absl::StatusOr<Dataset> huge = ParseLibsvm("1 1:1\n0 4000000000:2\n", "h.svm");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(huge.status(),
                       "file h.svm: 2 examples x dim 4000000000 (the largest "
                       "feature index) is more than 268435456 dense values"))
      << huge.status();
  absl::StatusOr<Dataset> overflow =
      ParseLibsvm("1 9223372036854775807:1\n", "o.svm");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  LibsvmOptions opt;
  opt.dim = int64_t{1} << 27;  // 2 x 2^27 = 2^28 values: at the limit, fine
  absl::StatusOr<Dataset> fits = ParseLibsvm("1 1:1\n0 2:2\n", "f.svm", opt);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->x.size(), size_t{1} << 28);
}

}  // namespace
}  // namespace lockstep
