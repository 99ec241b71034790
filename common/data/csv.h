// Numeric CSV loader.
//
// Format: one example per line, fields separated by `delimiter` (spaces and
// tabs around a field are ignored), every field a finite decimal number
// (no quoting). One column is the label, all others are features in file
// order. Blank lines are skipped. CRLF line ends are accepted. A file
// starting with the gzip magic is decompressed first.
//
// Header: kYes skips the first non-blank line; kNo parses it as data; kAuto
// treats it as a header iff NONE of its fields parses as a number (so a data
// line with one bad field is reported as an error, never silently dropped).
//
// Labels: classification (default) requires integer labels >= 0; with
// num_classes > 0 they must be < num_classes, else num_classes is inferred
// as max label + 1. Regression keeps the label as a real value and sets
// num_classes = 0 (num_classes must then be 0).
//
// Errors (InvalidArgumentError unless the file cannot be read, which keeps
// ReadFileBytes' codes), each naming "file <path>: line <N>[, column <C>]":
// non-numeric field (with its text), ragged row ("line N has M fields,
// expected K"), no data rows (empty file or header only), label column out
// of range, fewer than 2 columns, bad or out-of-range label.
// Thread-compatible; no shared state.
#ifndef LOCKSTEP_COMMON_DATA_CSV_H_
#define LOCKSTEP_COMMON_DATA_CSV_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"

namespace lockstep {

enum class CsvHeader { kAuto, kYes, kNo };

struct CsvOptions {
  // Label column, 0-based; negative counts from the end (-1 = last column).
  int label_column = 0;
  CsvHeader header = CsvHeader::kAuto;
  bool regression = false;  // false: integer class labels
  int num_classes = 0;      // classification only: 0 = infer max label + 1
  char delimiter = ',';
};

// Loads `path` into a Dataset named `path`.
absl::StatusOr<Dataset> LoadCsv(const std::string& path,
                                const CsvOptions& options = {});

// Parses CSV text held in memory; `file_name` is used as the dataset name
// and in error messages.
absl::StatusOr<Dataset> ParseCsv(std::string_view text,
                                 const std::string& file_name,
                                 const CsvOptions& options = {});

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_CSV_H_
