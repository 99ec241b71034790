#include "common/data/fashion_mnist.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/data/idx.h"

namespace lockstep {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::string> FindMnistFile(const std::string& dir,
                                          const std::string& base) {
  const std::string gz = dir + "/" + base + ".gz";
  if (Exists(gz)) return gz;
  const std::string plain = dir + "/" + base;
  if (Exists(plain)) return plain;
  return absl::NotFoundError(absl::StrFormat(
      "MNIST-style directory %s: neither %s nor %s exists", dir, gz, plain));
}

// Widens every row of *ds to new_dim features (zeros appended).
void PadDim(Dataset* ds, int64_t new_dim) {
  if (ds->dim == new_dim) return;
  std::vector<float> x(ds->num_examples * new_dim, 0.0f);
  for (int64_t i = 0; i < ds->num_examples; ++i) {
    std::copy(ds->row(i), ds->row(i) + ds->dim, x.data() + i * new_dim);
  }
  ds->x = std::move(x);
  ds->dim = new_dim;
}

// Gives both splits the same num_classes (classification only).
void UnifyClasses(const DatasetOptions& opt, TrainTest* tt) {
  if (tt->train.num_classes == 0) return;  // regression
  const int nc = opt.num_classes > 0
                     ? opt.num_classes
                     : std::max(tt->train.num_classes, tt->test.num_classes);
  tt->train.num_classes = nc;
  tt->test.num_classes = nc;
}

absl::Status CheckSameDim(const TrainTest& tt) {
  if (tt.test.num_examples > 0 && tt.test.dim != tt.train.dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "test split %s has %d features per example but train split %s has "
        "%d, expected equal",
        tt.test.name, tt.test.dim, tt.train.name, tt.train.dim));
  }
  return absl::OkStatus();
}

// Splits "a;b" into {a, b}; "a" into {a, ""}. More than one ';' is an error.
absl::StatusOr<std::pair<std::string, std::string>> SplitTrainTest(
    std::string_view spec, std::string_view body) {
  const size_t semi = body.find(';');
  std::string train(body.substr(0, semi));
  std::string test;
  if (semi != std::string_view::npos) {
    test = std::string(body.substr(semi + 1));
    if (test.find(';') != std::string::npos || test.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dataset spec \"%s\": expected <train>[;<test>] with one ';' and a "
          "non-empty test part",
          spec));
    }
  }
  if (train.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset spec \"%s\": empty train path", spec));
  }
  return std::make_pair(train, test);
}

absl::StatusOr<std::pair<std::string, std::string>> SplitIdxPair(
    std::string_view spec, const std::string& part) {
  const size_t comma = part.find(',');
  if (comma == std::string::npos || comma == 0 || comma + 1 == part.size() ||
      part.find(',', comma + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset spec \"%s\": expected <images>,<labels> in \"%s\"", spec,
        part));
  }
  return std::make_pair(part.substr(0, comma), part.substr(comma + 1));
}

Dataset EmptyLike(const Dataset& train) {
  Dataset d;
  d.name = train.name + "/no-test";
  d.dim = train.dim;
  d.num_classes = train.num_classes;
  return d;
}

constexpr char kSpecForms[] =
    "fashion-mnist, mnist-dir:<dir>, idx:<images>,<labels>[;<images>,"
    "<labels>], csv:<train>[;<test>], libsvm:<train>[;<test>]";

// One split of an MNIST-style directory, named "<name>/train" or
// "<name>/test".
absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, bool train,
                                       Normalize normalize, int num_classes,
                                       const std::string& name) {
  const char* split = train ? "train" : "t10k";
  absl::StatusOr<std::string> images =
      FindMnistFile(dir, absl::StrFormat("%s-images-idx3-ubyte", split));
  if (!images.ok()) return images.status();
  absl::StatusOr<std::string> labels =
      FindMnistFile(dir, absl::StrFormat("%s-labels-idx1-ubyte", split));
  if (!labels.ok()) return labels.status();
  absl::StatusOr<Dataset> ds =
      LoadIdxPair(*images, *labels, normalize, num_classes);
  if (!ds.ok()) return ds.status();
  ds->name = name + (train ? "/train" : "/test");
  return ds;
}

absl::StatusOr<TrainTest> LoadMnistDir(const std::string& dir,
                                       const DatasetOptions& opt,
                                       const std::string& name) {
  TrainTest tt;
  for (bool train : {true, false}) {
    absl::StatusOr<Dataset> ds =
        LoadMnistSplit(dir, train, Normalize::kNone, opt.num_classes, name);
    if (!ds.ok()) return ds.status();
    (train ? tt.train : tt.test) = *std::move(ds);
  }
  return tt;
}

}  // namespace

absl::StatusOr<Dataset> LoadMnistStyle(const std::string& dir, bool train,
                                       Normalize normalize) {
  return LoadMnistSplit(dir, train, normalize, /*num_classes=*/0, dir);
}

absl::StatusOr<TrainTest> LoadDataset(std::string_view spec,
                                      const DatasetOptions& opt) {
  if (opt.num_classes < 0 || opt.dim < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset %s: num_classes (%d) and dim (%d) must be >= 0", spec,
        opt.num_classes, opt.dim));
  }
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view body = colon == std::string_view::npos
                                    ? std::string_view()
                                    : spec.substr(colon + 1);
  const bool is_idx_like =
      kind == "fashion-mnist" || kind == "mnist-dir" || kind == "idx";
  if (is_idx_like && opt.regression) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset spec \"%s\": IDX datasets are classification only, "
        "regression was requested",
        spec));
  }

  TrainTest tt;
  if (spec == "fashion-mnist") {
    absl::StatusOr<TrainTest> r =
        LoadMnistDir(kFashionMnistDir, opt, "fashion-mnist");
    if (!r.ok()) return r.status();
    tt = *std::move(r);
  } else if (kind == "mnist-dir" && !body.empty()) {
    std::string dir(body);
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    absl::StatusOr<TrainTest> r = LoadMnistDir(dir, opt, dir);
    if (!r.ok()) return r.status();
    tt = *std::move(r);
  } else if (kind == "idx" || kind == "csv" || kind == "libsvm") {
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dataset spec \"%s\": missing ':<path>', expected one of %s", spec,
          kSpecForms));
    }
    absl::StatusOr<std::pair<std::string, std::string>> parts =
        SplitTrainTest(spec, body);
    if (!parts.ok()) return parts.status();
    const std::string& train_part = parts->first;
    const std::string& test_part = parts->second;
    if (kind == "idx") {
      for (const std::string* part : {&train_part, &test_part}) {
        if (part->empty()) continue;
        absl::StatusOr<std::pair<std::string, std::string>> files =
            SplitIdxPair(spec, *part);
        if (!files.ok()) return files.status();
        absl::StatusOr<Dataset> ds = LoadIdxPair(
            files->first, files->second, Normalize::kNone, opt.num_classes);
        if (!ds.ok()) return ds.status();
        (part == &train_part ? tt.train : tt.test) = *std::move(ds);
      }
    } else if (kind == "csv") {
      CsvOptions co;
      co.label_column = opt.label_column;
      co.header = opt.csv_header;
      co.regression = opt.regression;
      co.num_classes = opt.num_classes;
      absl::StatusOr<Dataset> train = LoadCsv(train_part, co);
      if (!train.ok()) return train.status();
      tt.train = *std::move(train);
      if (!test_part.empty()) {
        absl::StatusOr<Dataset> test = LoadCsv(test_part, co);
        if (!test.ok()) return test.status();
        tt.test = *std::move(test);
      }
    } else {  // libsvm
      LibsvmOptions lo;
      lo.dim = opt.dim;
      lo.labels =
          opt.regression ? LibsvmLabels::kRegression : opt.libsvm_labels;
      lo.num_classes = opt.num_classes;
      LibsvmLabels resolved = lo.labels;
      absl::StatusOr<Dataset> train = LoadLibsvm(train_part, lo, &resolved);
      if (!train.ok()) return train.status();
      tt.train = *std::move(train);
      if (!test_part.empty()) {
        lo.labels = resolved;
        absl::StatusOr<Dataset> test = LoadLibsvm(test_part, lo);
        if (!test.ok()) return test.status();
        tt.test = *std::move(test);
        if (opt.dim == 0) {
          const int64_t d = std::max(tt.train.dim, tt.test.dim);
          PadDim(&tt.train, d);
          PadDim(&tt.test, d);
        }
      }
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset spec \"%s\": unknown form, expected one of %s",
                        spec, kSpecForms));
  }

  if (tt.test.num_examples == 0) tt.test = EmptyLike(tt.train);
  if (absl::Status s = CheckSameDim(tt); !s.ok()) return s;
  UnifyClasses(opt, &tt);
  if (absl::Status s =
          NormalizeTrainTest(opt.normalize, &tt.train, &tt.test, &tt.norm);
      !s.ok()) {
    return s;
  }
  return tt;
}

}  // namespace lockstep
