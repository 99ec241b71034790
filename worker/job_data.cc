#include "worker/job_data.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

std::string DatasetName(const v1::DataSpec& spec) {
  return spec.dataset().empty() ? "fashion-mnist" : spec.dataset();
}

absl::StatusOr<DatasetOptions> ToDatasetOptions(const v1::DataSpec& spec) {
  DatasetOptions o;
  const std::string name = DatasetName(spec);
  const bool idx_like = name == "fashion-mnist" || absl::StartsWith(name, "mnist-dir:") ||
                        absl::StartsWith(name, "idx:");
  if (spec.normalize().empty()) {
    o.normalize = idx_like ? Normalize::kScale255 : Normalize::kNone;
  } else {
    auto n = ParseNormalize(spec.normalize());
    if (!n.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.normalize: expected none, scale255, minmax or standardize, got \"",
          spec.normalize(), "\""));
    }
    o.normalize = *n;
  }
  o.label_column = spec.label_column();
  const std::string& h = spec.csv_header();
  if (h.empty() || h == "auto") {
    o.csv_header = CsvHeader::kAuto;
  } else if (h == "yes") {
    o.csv_header = CsvHeader::kYes;
  } else if (h == "no") {
    o.csv_header = CsvHeader::kNo;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("data.csv_header: expected auto, yes or no, got \"", h, "\""));
  }
  if (spec.dim() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.dim: expected >= 0, got ", spec.dim()));
  }
  o.dim = spec.dim();
  if (spec.num_classes() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.num_classes: expected -1 (regression), 0 (infer) or a class count, got ",
        spec.num_classes()));
  }
  o.regression = spec.num_classes() == -1;
  o.num_classes = spec.num_classes() > 0 ? spec.num_classes() : 0;
  const std::string& l = spec.libsvm_labels();
  if (l.empty() || l == "auto") {
    o.libsvm_labels = LibsvmLabels::kAuto;
  } else if (l == "signed") {
    o.libsvm_labels = LibsvmLabels::kSigned;
  } else if (l == "class") {
    o.libsvm_labels = LibsvmLabels::kClassIndex;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.libsvm_labels: expected auto, signed or class, got \"", l, "\""));
  }
  if (o.regression) o.libsvm_labels = LibsvmLabels::kRegression;
  return o;
}

absl::StatusOr<TrainTest> LoadJobData(const v1::DataSpec& spec) {
  auto options = ToDatasetOptions(spec);
  if (!options.ok()) return options.status();
  return LoadDataset(DatasetName(spec), *options);
}

}  // namespace lockstep
