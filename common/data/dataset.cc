#include "common/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"

namespace lockstep {

absl::Status ValidateDataset(const Dataset& ds) {
  if (ds.num_examples < 0 || ds.dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset %s: negative num_examples (%d) or dim (%d)",
                        ds.name, ds.num_examples, ds.dim));
  }
  if (static_cast<int64_t>(ds.x.size()) != ds.num_examples * ds.dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset %s: x has %d floats, expected num_examples*dim = %d*%d = %d",
        ds.name, ds.x.size(), ds.num_examples, ds.dim,
        ds.num_examples * ds.dim));
  }
  if (static_cast<int64_t>(ds.y.size()) != ds.num_examples) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset %s: y has %d labels, expected %d", ds.name,
                        ds.y.size(), ds.num_examples));
  }
  if (ds.num_classes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset %s: num_classes is %d, expected >= 0", ds.name,
                        ds.num_classes));
  }
  if (ds.num_classes > 0) {
    for (int64_t i = 0; i < ds.num_examples; ++i) {
      const float v = ds.y[i];
      if (!(v >= 0 && v < ds.num_classes) || v != std::floor(v)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dataset %s: example %d: label %g is not an integer in [0, %d)",
            ds.name, i, v, ds.num_classes));
      }
    }
  }
  return absl::OkStatus();
}

void GatherRows(const Dataset& ds, absl::Span<const int64_t> indices,
                std::vector<float>* x, std::vector<float>* y) {
  x->resize(indices.size() * ds.dim);
  y->resize(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    ABSL_RAW_CHECK(i >= 0 && i < ds.num_examples,
                   "GatherRows: index out of range");
    if (ds.dim > 0) {
      std::memcpy(x->data() + k * ds.dim, ds.row(i), ds.dim * sizeof(float));
    }
    (*y)[k] = ds.y[i];
  }
}

absl::StatusOr<Normalize> ParseNormalize(std::string_view name) {
  if (name == "none") return Normalize::kNone;
  if (name == "scale255") return Normalize::kScale255;
  if (name == "minmax") return Normalize::kUnitRange;
  if (name == "standardize") return Normalize::kStandardize;
  return absl::InvalidArgumentError(absl::StrFormat(
      "normalize: got \"%s\", expected one of none, scale255, minmax, "
      "standardize",
      name));
}

const char* NormalizeName(Normalize mode) {
  switch (mode) {
    case Normalize::kNone:
      return "none";
    case Normalize::kScale255:
      return "scale255";
    case Normalize::kUnitRange:
      return "minmax";
    case Normalize::kStandardize:
      return "standardize";
  }
  return "?";
}

absl::StatusOr<NormStats> ComputeNormStats(const Dataset& train,
                                           Normalize mode) {
  if (static_cast<int64_t>(train.x.size()) != train.num_examples * train.dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset %s: x has %d floats, expected %d*%d", train.name,
        train.x.size(), train.num_examples, train.dim));
  }
  NormStats st;
  st.mode = mode;
  st.dim = train.dim;
  st.shift.assign(train.dim, 0.0f);
  st.scale.assign(train.dim, 1.0f);
  const int64_t n = train.num_examples, d = train.dim;
  switch (mode) {
    case Normalize::kNone:
      return st;
    case Normalize::kScale255:
      st.scale.assign(d, 255.0f);
      return st;
    case Normalize::kUnitRange:
    case Normalize::kStandardize:
      break;
  }
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset %s: cannot compute %s statistics on 0 examples", train.name,
        NormalizeName(mode)));
  }
  if (mode == Normalize::kUnitRange) {
    std::vector<float> lo(train.row(0), train.row(0) + d);
    std::vector<float> hi = lo;
    for (int64_t i = 1; i < n; ++i) {
      const float* r = train.row(i);
      for (int64_t j = 0; j < d; ++j) {
        lo[j] = std::min(lo[j], r[j]);
        hi[j] = std::max(hi[j], r[j]);
      }
    }
    for (int64_t j = 0; j < d; ++j) {
      st.shift[j] = lo[j];
      const float range = hi[j] - lo[j];
      st.scale[j] = (range > 0 && std::isfinite(range)) ? range : 1.0f;
    }
    return st;
  }
  // kStandardize: two passes in double for accuracy.
  std::vector<double> mean(d, 0.0), var(d, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = train.row(i);
    for (int64_t j = 0; j < d; ++j) mean[j] += r[j];
  }
  for (int64_t j = 0; j < d; ++j) mean[j] /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = train.row(i);
    for (int64_t j = 0; j < d; ++j) {
      const double c = r[j] - mean[j];
      var[j] += c * c;
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    st.shift[j] = static_cast<float>(mean[j]);
    const double sd = std::sqrt(var[j] / static_cast<double>(n));
    st.scale[j] = (sd > 0 && std::isfinite(sd)) ? static_cast<float>(sd) : 1.0f;
  }
  return st;
}

absl::Status ApplyNormStats(const NormStats& stats, Dataset* ds) {
  if (ds->num_examples == 0) return absl::OkStatus();
  if (ds->dim != stats.dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dataset %s: dim %d differs from the normalisation statistics' dim "
        "%d",
        ds->name, ds->dim, stats.dim));
  }
  if (static_cast<int64_t>(ds->x.size()) != ds->num_examples * ds->dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset %s: x has %d floats, expected %d*%d", ds->name,
                        ds->x.size(), ds->num_examples, ds->dim));
  }
  if (stats.mode == Normalize::kNone) return absl::OkStatus();
  const int64_t n = ds->num_examples, d = ds->dim;
  const float* shift = stats.shift.data();
  const float* scale = stats.scale.data();
  for (int64_t i = 0; i < n; ++i) {
    float* r = ds->x.data() + i * d;
    for (int64_t j = 0; j < d; ++j) r[j] = (r[j] - shift[j]) / scale[j];
  }
  return absl::OkStatus();
}

absl::Status NormalizeTrainTest(Normalize mode, Dataset* train, Dataset* test,
                                NormStats* stats_out) {
  absl::StatusOr<NormStats> st = ComputeNormStats(*train, mode);
  if (!st.ok()) return st.status();
  if (absl::Status s = ApplyNormStats(*st, train); !s.ok()) return s;
  if (test != nullptr) {
    if (absl::Status s = ApplyNormStats(*st, test); !s.ok()) return s;
  }
  if (stats_out != nullptr) *stats_out = *std::move(st);
  return absl::OkStatus();
}

}  // namespace lockstep
