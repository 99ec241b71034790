#include "common/data/libsvm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/data/file_io.h"
#include "common/data/text_util.h"

namespace lockstep {
namespace {

using text_internal::Excerpt;
using text_internal::LineReader;
using text_internal::ParseFiniteFloat;
using text_internal::ParseInt64;
using text_internal::Trim;

// Next whitespace-separated token of *rest, or empty at the end.
std::string_view NextToken(std::string_view* rest) {
  size_t b = 0;
  while (b < rest->size() && ((*rest)[b] == ' ' || (*rest)[b] == '\t')) ++b;
  size_t e = b;
  while (e < rest->size() && (*rest)[e] != ' ' && (*rest)[e] != '\t') ++e;
  std::string_view tok = rest->substr(b, e - b);
  rest->remove_prefix(e);
  return tok;
}

}  // namespace

absl::StatusOr<Dataset> ParseLibsvm(std::string_view text,
                                    const std::string& file_name,
                                    const LibsvmOptions& opt,
                                    LibsvmLabels* resolved) {
  if (opt.dim < 0 || opt.num_classes < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: dim (%d) and num_classes (%d) must be >= 0 (0 = infer)",
        file_name, opt.dim, opt.num_classes));
  }
  if ((opt.labels == LibsvmLabels::kRegression && opt.num_classes != 0) ||
      (opt.labels == LibsvmLabels::kSigned && opt.num_classes != 0 &&
       opt.num_classes != 2)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: num_classes %d is inconsistent with the label policy "
        "(regression needs 0, signed binary 0 or 2)",
        file_name, opt.num_classes));
  }

  // Pass 1: parse into a sparse (CSR) form, remembering each row's line.
  std::vector<int64_t> row_start{0};
  std::vector<int64_t> col;  // 0-based
  std::vector<float> val;
  std::vector<float> label;
  std::vector<int64_t> row_line;
  std::vector<std::string_view> label_text;
  int64_t max_index = 0;

  LineReader lines(text);
  std::string_view line;
  int64_t line_no = 0;
  while (lines.Next(&line, &line_no)) {
    const size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    std::string_view rest = Trim(line);
    if (rest.empty()) continue;
    const std::string_view label_tok = NextToken(&rest);
    float y;
    if (!ParseFiniteFloat(label_tok, &y)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "file %s: line %d: expected a numeric label as first token, got "
          "\"%s\"",
          file_name, line_no, Excerpt(label_tok)));
    }
    int64_t prev = 0;
    bool first_feature = true;
    for (;;) {
      const std::string_view tok = NextToken(&rest);
      if (tok.empty()) break;
      const size_t colon = tok.find(':');
      if (colon == std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file %s: line %d: expected index:value, got \"%s\"", file_name,
            line_no, Excerpt(tok)));
      }
      if (first_feature && tok.substr(0, colon) == "qid") {
        int64_t qid;
        if (!ParseInt64(tok.substr(colon + 1), &qid)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "file %s: line %d: expected qid:<integer>, got \"%s\"", file_name,
              line_no, Excerpt(tok)));
        }
        first_feature = false;
        continue;
      }
      first_feature = false;
      int64_t index;
      if (!ParseInt64(tok.substr(0, colon), &index)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file %s: line %d: expected an integer feature index in \"%s\"",
            file_name, line_no, Excerpt(tok)));
      }
      if (index < 1 || (opt.dim > 0 && index > opt.dim)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file %s: line %d: feature index %d out of range in \"%s\", "
            "expected 1..%s (indices are 1-based)",
            file_name, line_no, index, Excerpt(tok),
            opt.dim > 0 ? std::to_string(opt.dim) : std::string("inf")));
      }
      if (index <= prev) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file %s: line %d: feature index %d in \"%s\" is not greater "
            "than the previous index %d (indices must be strictly "
            "increasing)",
            file_name, line_no, index, Excerpt(tok), prev));
      }
      prev = index;
      float v;
      if (!ParseFiniteFloat(tok.substr(colon + 1), &v)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file %s: line %d: expected a finite number after ':' in \"%s\"",
            file_name, line_no, Excerpt(tok)));
      }
      col.push_back(index - 1);
      val.push_back(v);
      max_index = std::max(max_index, index);
    }
    row_start.push_back(static_cast<int64_t>(col.size()));
    label.push_back(y);
    label_text.push_back(label_tok);
    row_line.push_back(line_no);
  }
  const int64_t n = static_cast<int64_t>(label.size());
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: no examples (file is empty or has only blank/comment "
        "lines), expected at least one \"label idx:val ...\" line",
        file_name));
  }

  // Resolve the label policy.
  LibsvmLabels policy = opt.labels;
  if (policy == LibsvmLabels::kAuto) {
    const bool all_signed = std::all_of(
        label.begin(), label.end(), [](float v) { return v == -1 || v == 1; });
    const bool binary_ok = opt.num_classes == 0 || opt.num_classes == 2;
    policy = all_signed && binary_ok ? LibsvmLabels::kSigned
                                     : LibsvmLabels::kClassIndex;
  }
  if (opt.dim == 0 && max_index == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: no feature index on any of its %d examples, expected at "
        "least one idx:val token (or an explicit dim)",
        file_name, n));
  }
  // The dense matrix is n x dim floats: bound it before allocating (a
  // single token "1 4000000000:1" would otherwise ask for 16 GB, and
  // n * dim can overflow).
  const int64_t dense_dim = opt.dim > 0 ? opt.dim : max_index;
  if (dense_dim > kMaxLibsvmDenseValues / std::max<int64_t>(n, 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: %d examples x dim %d%s is more than %d dense values "
        "(the loader densifies; lower the largest feature index or dim)",
        file_name, n, dense_dim,
        opt.dim > 0 ? " (options.dim)" : " (the largest feature index)",
        kMaxLibsvmDenseValues));
  }
  Dataset ds;
  ds.name = file_name;
  ds.num_examples = n;
  ds.dim = dense_dim;
  ds.y.resize(n);
  constexpr float kMaxLabel = 16777216.0f;  // 2^24: floats exact below
  float max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = label[i];
    switch (policy) {
      case LibsvmLabels::kSigned:
        if (v != -1 && v != 1) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "file %s: line %d: label \"%s\" invalid for signed binary "
              "labels, expected -1 or +1",
              file_name, row_line[i], Excerpt(label_text[i])));
        }
        ds.y[i] = v > 0 ? 1.0f : 0.0f;
        break;
      case LibsvmLabels::kClassIndex: {
        const bool in_range = opt.num_classes > 0
                                  ? (v >= 0 && v < opt.num_classes)
                                  : (v >= 0 && v < kMaxLabel);
        if (!in_range || v != std::floor(v)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "file %s: line %d: label \"%s\" %s, expected an integer class "
              "id in [0, %s)",
              file_name, row_line[i], Excerpt(label_text[i]),
              in_range ? "is not an integer" : "out of range",
              opt.num_classes > 0 ? std::to_string(opt.num_classes)
                                  : std::string("2^24")));
        }
        ds.y[i] = v;
        max_label = std::max(max_label, v);
        break;
      }
      case LibsvmLabels::kRegression:
      case LibsvmLabels::kAuto:  // resolved above
        ds.y[i] = v;
        break;
    }
  }
  switch (policy) {
    case LibsvmLabels::kSigned:
      ds.num_classes = 2;
      break;
    case LibsvmLabels::kClassIndex:
      ds.num_classes = opt.num_classes > 0 ? opt.num_classes
                                           : static_cast<int>(max_label) + 1;
      break;
    default:
      ds.num_classes = 0;
  }

  // Pass 2: densify.
  ds.x.assign(n * ds.dim, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* r = ds.x.data() + i * ds.dim;
    for (int64_t k = row_start[i]; k < row_start[i + 1]; ++k)
      r[col[k]] = val[k];
  }
  if (resolved != nullptr) *resolved = policy;
  return ds;
}

absl::StatusOr<Dataset> LoadLibsvm(const std::string& path,
                                   const LibsvmOptions& options,
                                   LibsvmLabels* resolved) {
  absl::StatusOr<FileBytes> file = ReadFileBytes(path);
  if (!file.ok()) return file.status();
  return ParseLibsvm(file->data, path, options, resolved);
}

}  // namespace lockstep
