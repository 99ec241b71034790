#include "common/data/fashion_mnist.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "common/data/test_util.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing_util::IdxBytes;
using testing_util::TempPath;
using testing_util::WriteFile;
using testing_util::WriteGzipFile;

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

bool DirExists(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(FashionMnistTest, RealDatasetIfInstalled) {
  if (!DirExists(kFashionMnistDir)) {
    GTEST_SKIP() << kFashionMnistDir << " not installed";
  }
  absl::StatusOr<Dataset> train =
      LoadMnistStyle(kFashionMnistDir, /*train=*/true, Normalize::kScale255);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples, 60000);
  EXPECT_EQ(train->dim, 784);
  EXPECT_EQ(train->num_classes, 10);
  ASSERT_EQ(train->x.size(), 60000u * 784u);
  const std::vector<float> first(train->y.begin(), train->y.begin() + 10);
  EXPECT_EQ(first, (std::vector<float>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  const auto [lo, hi] = std::minmax_element(train->x.begin(), train->x.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  // Pixel sum of the first image (raw uint8 sum 76247, checked with an
  // independent reader), after /255.
  double sum0 = 0;
  for (int j = 0; j < 784; ++j) sum0 += train->row(0)[j];
  EXPECT_NEAR(sum0 * 255.0, 76247.0, 1e-2);
  // Balanced: 6000 per class.
  std::vector<int> counts(10, 0);
  for (float y : train->y) ++counts[static_cast<int>(y)];
  for (int c : counts) EXPECT_EQ(c, 6000);

  absl::StatusOr<Dataset> test =
      LoadMnistStyle(kFashionMnistDir, /*train=*/false, Normalize::kNone);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, 10000);
  EXPECT_EQ(test->dim, 784);
  EXPECT_EQ(test->num_classes, 10);
  const std::vector<float> tfirst(test->y.begin(), test->y.begin() + 10);
  EXPECT_EQ(tfirst, (std::vector<float>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  double tsum0 = 0;
  for (int j = 0; j < 784; ++j) tsum0 += test->row(0)[j];
  EXPECT_EQ(tsum0, 33456.0);
}

// A small synthetic MNIST-layout directory: train gzipped, test plain.
std::string MakeMnistDir() {
  const std::string dir = TempPath("mnistdir");
  ::mkdir(dir.c_str(), 0755);
  // train: 4 examples of 1x2 pixels; labels 0..3. test: 2 examples.
  WriteGzipFile(dir + "/train-images-idx3-ubyte.gz",
                IdxBytes(0x08, {4, 1, 2},
                         std::string("\x00\x0a\x14\x1e\x28\x32\x3c\x46", 8)));
  WriteGzipFile(dir + "/train-labels-idx1-ubyte.gz",
                IdxBytes(0x08, {4}, std::string("\x00\x01\x02\x03", 4)));
  WriteFile(dir + "/t10k-images-idx3-ubyte",
            IdxBytes(0x08, {2, 1, 2}, std::string("\x00\xff\x0a\x0a", 4)));
  WriteFile(dir + "/t10k-labels-idx1-ubyte",
            IdxBytes(0x08, {2}, std::string("\x01\x00", 2)));
  return dir;
}

TEST(LoadDatasetTest, MnistDirWithTrainStatistics) {
  const std::string dir = MakeMnistDir();
  DatasetOptions o;
  o.normalize = Normalize::kUnitRange;
  absl::StatusOr<TrainTest> tt = LoadDataset("mnist-dir:" + dir + "/", o);
  ASSERT_TRUE(tt.ok()) << tt.status();
  EXPECT_EQ(tt->train.name, dir + "/train");
  EXPECT_EQ(tt->test.name, dir + "/test");
  EXPECT_EQ(tt->train.num_examples, 4);
  EXPECT_EQ(tt->test.num_examples, 2);
  EXPECT_EQ(tt->train.num_classes, 4);
  EXPECT_EQ(tt->test.num_classes, 4);  // unified with train
  ASSERT_TRUE(tt->has_test());
  // Train feature 0 spans [0, 60], feature 1 [10, 70].
  EXPECT_EQ(tt->norm.shift, (std::vector<float>{0, 10}));
  EXPECT_EQ(tt->norm.scale, (std::vector<float>{60, 60}));
  EXPECT_EQ(tt->train.x[2], 20.0f / 60.0f);
  // Test example 0 = (0, 255): (0-0)/60 = 0, (255-10)/60.
  EXPECT_EQ(tt->test.x[0], 0.0f);
  EXPECT_EQ(tt->test.x[1], 245.0f / 60.0f);
}

TEST(LoadDatasetTest, IdxSpecTrainOnlyAndWithTest) {
  const std::string dir = MakeMnistDir();
  const std::string ti = dir + "/train-images-idx3-ubyte.gz";
  const std::string tl = dir + "/train-labels-idx1-ubyte.gz";
  absl::StatusOr<TrainTest> tt = LoadDataset("idx:" + ti + "," + tl);
  ASSERT_TRUE(tt.ok()) << tt.status();
  EXPECT_FALSE(tt->has_test());
  EXPECT_EQ(tt->test.num_examples, 0);
  EXPECT_EQ(tt->test.dim, 2);
  EXPECT_EQ(tt->test.num_classes, 4);
  EXPECT_EQ(tt->train.x[7], 70.0f);  // kNone

  tt =
      LoadDataset("idx:" + ti + "," + tl + ";" + dir +
                  "/t10k-images-idx3-ubyte," + dir + "/t10k-labels-idx1-ubyte");
  ASSERT_TRUE(tt.ok()) << tt.status();
  EXPECT_EQ(tt->test.num_examples, 2);
  EXPECT_EQ(tt->test.y, (std::vector<float>{1, 0}));
}

TEST(LoadDatasetTest, CsvTrainTest) {
  const std::string tr = TempPath("ld_train.csv"), te = TempPath("ld_test.csv");
  WriteFile(tr, "x1,x2,y\n1,2,0\n3,6,1\n");
  WriteFile(te, "x1,x2,y\n5,4,2\n");
  DatasetOptions o;
  o.label_column = -1;
  o.normalize = Normalize::kStandardize;
  absl::StatusOr<TrainTest> tt = LoadDataset("csv:" + tr + ";" + te, o);
  ASSERT_TRUE(tt.ok()) << tt.status();
  EXPECT_EQ(tt->train.num_classes, 3);  // max label over both splits + 1
  EXPECT_EQ(tt->test.num_classes, 3);
  // Train mean (2, 4), std (1, 2).
  EXPECT_EQ(tt->train.x, (std::vector<float>{-1, -1, 1, 1}));
  EXPECT_EQ(tt->test.x, (std::vector<float>{3, 0}));
  EXPECT_EQ(tt->test.y, std::vector<float>{2});

  // Explicit num_classes validates the test split too.
  o.num_classes = 2;
  absl::StatusOr<TrainTest> bad = LoadDataset("csv:" + tr + ";" + te, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status(), "file " + te + ": line 2, column 3"))
      << bad.status();
}

TEST(LoadDatasetTest, CsvColumnCountMismatch) {
  const std::string tr = TempPath("ld_cm_train.csv"),
                    te = TempPath("ld_cm_test.csv");
  WriteFile(tr, "0,1,2\n");
  WriteFile(te, "0,1\n");
  absl::StatusOr<TrainTest> tt = LoadDataset("csv:" + tr + ";" + te);
  ASSERT_FALSE(tt.ok());
  EXPECT_EQ(tt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(tt.status(), "test split " + te + " has 1 features"))
      << tt.status();
}

TEST(LoadDatasetTest, LibsvmDimUnionAndPolicyFromTrain) {
  const std::string tr = TempPath("ld_train.svm"), te = TempPath("ld_test.svm");
  WriteFile(tr, "+1 1:1\n-1 2:2\n");
  WriteFile(te, "+1 4:3\n");
  absl::StatusOr<TrainTest> tt = LoadDataset("libsvm:" + tr + ";" + te);
  ASSERT_TRUE(tt.ok()) << tt.status();
  EXPECT_EQ(tt->train.dim, 4);
  EXPECT_EQ(tt->test.dim, 4);
  EXPECT_EQ(tt->train.x, (std::vector<float>{1, 0, 0, 0, 0, 2, 0, 0}));
  EXPECT_EQ(tt->test.x, (std::vector<float>{0, 0, 0, 3}));
  EXPECT_EQ(tt->train.y, (std::vector<float>{1, 0}));
  EXPECT_EQ(tt->train.num_classes, 2);

  // Train resolved to signed: a test label 0 is rejected.
  WriteFile(te, "0 1:1\n");
  absl::StatusOr<TrainTest> bad = LoadDataset("libsvm:" + tr + ";" + te);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status(), "file " + te + ": line 1"))
      << bad.status();

  DatasetOptions o;
  o.regression = true;
  WriteFile(te, "0.5 1:1\n");
  tt = LoadDataset("libsvm:" + tr + ";" + te, o);
  ASSERT_TRUE(tt.ok()) << tt.status();
  EXPECT_EQ(tt->train.num_classes, 0);
  EXPECT_EQ(tt->train.y, (std::vector<float>{1, -1}));
  EXPECT_EQ(tt->test.y, std::vector<float>{0.5f});
}

TEST(LoadDatasetTest, BadSpecs) {
  for (const char* spec :
       {"", "mnist", "csv", "csv:", "csv:a;", "csv:a;b;c", "idx:onlyone",
        "idx:a,b,c", "libsvm:;x", "mnist-dir:"}) {
    absl::StatusOr<TrainTest> tt = LoadDataset(spec);
    ASSERT_FALSE(tt.ok()) << spec;
    EXPECT_EQ(tt.status().code(), absl::StatusCode::kInvalidArgument)
        << spec << " -> " << tt.status();
    EXPECT_TRUE(Contains(tt.status(), std::string("\"") + spec + "\""))
        << spec << " -> " << tt.status();
  }
  DatasetOptions o;
  o.regression = true;
  absl::StatusOr<TrainTest> r = LoadDataset("fashion-mnist", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoadDatasetTest, MissingMnistDir) {
  const std::string dir = TempPath("no_such_mnist_dir");
  absl::StatusOr<TrainTest> tt = LoadDataset("mnist-dir:" + dir);
  ASSERT_FALSE(tt.ok());
  EXPECT_EQ(tt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(tt.status(), dir + "/train-images-idx3-ubyte.gz"))
      << tt.status();
}

}  // namespace
}  // namespace lockstep
