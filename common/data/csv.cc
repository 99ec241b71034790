#include "common/data/csv.h"

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
using text_internal::Trim;

// Splits `line` at `delim` into trimmed fields (reusing *fields' storage).
void SplitFields(std::string_view line, char delim,
                 std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  for (;;) {
    const size_t end = line.find(delim, start);
    if (end == std::string_view::npos) {
      fields->push_back(Trim(line.substr(start)));
      return;
    }
    fields->push_back(Trim(line.substr(start, end - start)));
    start = end + 1;
  }
}

bool IsBlank(std::string_view line) { return Trim(line).empty(); }

}  // namespace

absl::StatusOr<Dataset> ParseCsv(std::string_view text,
                                 const std::string& file_name,
                                 const CsvOptions& opt) {
  if (opt.regression && opt.num_classes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: num_classes is %d but regression targets need 0", file_name,
        opt.num_classes));
  }
  if (opt.num_classes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("file %s: num_classes is %d, expected >= 0 (0 = infer)",
                        file_name, opt.num_classes));
  }
  LineReader lines(text);
  std::string_view line;
  int64_t line_no = 0;
  std::vector<std::string_view> fields;

  // First non-blank line: decides the column count and the header.
  bool have_line = false;
  while (lines.Next(&line, &line_no)) {
    if (!IsBlank(line)) {
      have_line = true;
      break;
    }
  }
  if (!have_line) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: no data rows (file is empty or blank), expected at least "
        "one line of numbers",
        file_name));
  }
  SplitFields(line, opt.delimiter, &fields);
  const int64_t num_cols = static_cast<int64_t>(fields.size());
  const int64_t first_line_no = line_no;
  bool header = opt.header == CsvHeader::kYes;
  if (opt.header == CsvHeader::kAuto) {
    header = true;
    float v;
    for (std::string_view f : fields) {
      if (ParseFiniteFloat(f, &v)) {
        header = false;
        break;
      }
    }
  }
  if (num_cols < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: line %d has %d field, expected at least 2 (a label and a "
        "feature; delimiter '%c')",
        file_name, line_no, num_cols, opt.delimiter));
  }
  const int64_t label_col =
      opt.label_column < 0 ? num_cols + opt.label_column : opt.label_column;
  if (label_col < 0 || label_col >= num_cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: label column %d out of range for %d columns (line %d), "
        "expected [-%d, %d)",
        file_name, opt.label_column, num_cols, line_no, num_cols, num_cols));
  }

  Dataset ds;
  ds.name = file_name;
  ds.dim = num_cols - 1;
  const int64_t approx_rows = std::count(text.begin(), text.end(), '\n') + 1;
  ds.x.reserve(approx_rows * ds.dim);
  ds.y.reserve(approx_rows);
  float max_label = 0;
  constexpr float kMaxLabel = 16777216.0f;  // 2^24: floats exact below

  bool pending = !header;  // the first line still has to be parsed as data
  for (;;) {
    if (!pending) {
      if (!lines.Next(&line, &line_no)) break;
      if (IsBlank(line)) continue;
      SplitFields(line, opt.delimiter, &fields);
    }
    pending = false;
    if (static_cast<int64_t>(fields.size()) != num_cols) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "file %s: line %d has %d fields, expected %d (as on line %d)",
          file_name, line_no, fields.size(), num_cols, first_line_no));
    }
    for (int64_t c = 0; c < num_cols; ++c) {
      float v;
      if (!ParseFiniteFloat(fields[c], &v)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "file %s: line %d, column %d: expected a finite number, got "
            "\"%s\"",
            file_name, line_no, c + 1, Excerpt(fields[c])));
      }
      if (c != label_col) {
        ds.x.push_back(v);
        continue;
      }
      if (!opt.regression) {
        const bool bad = opt.num_classes > 0 ? !(v >= 0 && v < opt.num_classes)
                                             : !(v >= 0 && v < kMaxLabel);
        if (bad || v != std::floor(v)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "file %s: line %d, column %d: label \"%s\" %s, expected an "
              "integer class id in [0, %s)%s",
              file_name, line_no, c + 1, Excerpt(fields[c]),
              bad ? "out of range" : "is not an integer",
              opt.num_classes > 0 ? std::to_string(opt.num_classes)
                                  : std::string("2^24"),
              bad ? "" : " (use regression for real-valued targets)"));
        }
        max_label = std::max(max_label, v);
      }
      ds.y.push_back(v);
    }
  }
  ds.num_examples = static_cast<int64_t>(ds.y.size());
  if (ds.num_examples == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "file %s: no data rows after the header on line %d, expected at "
        "least one",
        file_name, first_line_no));
  }
  if (!opt.regression) {
    ds.num_classes =
        opt.num_classes > 0 ? opt.num_classes : static_cast<int>(max_label) + 1;
  }
  return ds;
}

absl::StatusOr<Dataset> LoadCsv(const std::string& path,
                                const CsvOptions& options) {
  absl::StatusOr<FileBytes> file = ReadFileBytes(path);
  if (!file.ok()) return file.status();
  return ParseCsv(file->data, path, options);
}

}  // namespace lockstep
