// The default dataset (Fashion-MNIST from Debian's dataset-fashion-mnist)
// and the dataset-spec loader used by the CLI.
#ifndef LOCKSTEP_COMMON_DATA_FASHION_MNIST_H_
#define LOCKSTEP_COMMON_DATA_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/data/csv.h"
#include "common/data/dataset.h"
#include "common/data/libsvm.h"

namespace lockstep {

// Where Debian's dataset-fashion-mnist installs
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz .
constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Loads an MNIST-layout directory: train=true reads
// <dir>/train-images-idx3-ubyte[.gz] and <dir>/train-labels-idx1-ubyte[.gz],
// train=false the t10k-* pair (the ".gz" name is tried first). The dataset
// is named "<dir>/train" or "<dir>/test"; num_classes = max label + 1.
// `normalize` uses this split's own statistics (see LoadIdxPair); for a
// train/test pair use LoadDataset, which uses train statistics for both.
// NotFoundError names both candidate paths when neither exists; other errors
// as LoadIdxPair (idx.h).
absl::StatusOr<Dataset> LoadMnistStyle(const std::string& dir, bool train,
                                       Normalize normalize = Normalize::kNone);

// Options for LoadDataset. Fields that do not apply to a format are ignored
// unless stated.
struct DatasetOptions {
  int label_column = 0;  // csv: 0-based, negative = from the end
  int64_t dim = 0;       // libsvm: 0 = largest index seen in train or test
  CsvHeader csv_header = CsvHeader::kAuto;  // csv: has_header
  Normalize normalize = Normalize::kNone;   // statistics from train
  int num_classes = 0;      // 0 = infer (max label + 1 over train and test)
  bool regression = false;  // csv/libsvm: real-valued targets (idx: error)
  LibsvmLabels libsvm_labels = LibsvmLabels::kAuto;  // unless regression
};

struct TrainTest {
  Dataset train;
  // The test split; empty (0 examples, same dim and num_classes as train)
  // when the spec names none.
  Dataset test;
  NormStats norm;  // statistics computed on train and applied to both
  bool has_test() const { return test.num_examples > 0; }
};

// Loads a dataset from a spec string:
//   "fashion-mnist"                   kFashionMnistDir; test = t10k split.
//                                     Named "fashion-mnist/train", "/test".
//   "mnist-dir:<dir>"                 any MNIST-layout directory, as above.
//   "idx:<images>,<labels>[;<test_images>,<test_labels>]"
//   "csv:<train>[;<test>]"
//   "libsvm:<train>[;<test>]"
// Paths may not contain ';' (nor ',' for idx). Without a test part the test
// split is empty: nothing is held out. Both splits always end with equal
// dim and num_classes: num_classes is options.num_classes if > 0 (labels of
// both splits validated against it), else max label + 1 over both; libsvm
// dim is options.dim if > 0, else the largest index in either file; csv
// splits must have the same column count; libsvm test labels are read with
// the policy resolved on train. Normalisation statistics come from train
// only and are applied to both.
// Errors: InvalidArgumentError for a malformed spec (naming it and the
// accepted forms), mismatched splits, or options that do not fit the
// format; otherwise the loaders' errors, unchanged.
absl::StatusOr<TrainTest> LoadDataset(std::string_view spec,
                                      const DatasetOptions& options = {});

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_FASHION_MNIST_H_
