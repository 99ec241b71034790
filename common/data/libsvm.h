// LIBSVM / svmlight sparse text loader, densified.
//
// Format: one example per line, `label idx:val idx:val ...`, tokens separated
// by spaces or tabs; indices are 1-based decimal integers and must be
// strictly increasing within a line; values are finite decimal numbers.
// Anything from '#' to the end of a line is a comment; blank (or
// comment-only) lines are skipped. An svmlight `qid:N` token directly after
// the label is accepted and ignored. Feature j (1-based) becomes column j-1
// of the dense row; absent features are 0. A gzip file is decompressed
// first.
//
// Dimension: options.dim > 0 fixes it (an index > dim is an error);
// options.dim == 0 uses the largest index seen in the file.
//
// Label policy (LibsvmLabels), explicit:
//   kAuto        if every label is -1 or +1 (any spelling: -1, 1, +1, 1.0)
//                and num_classes is 0 or 2, act as kSigned; otherwise as
//                kClassIndex. The mapping of
//                label 1 is 1 in both cases, so a train file with {-1,+1}
//                and a test file with only {+1} agree.
//   kSigned      binary: -1 -> 0, +1 -> 1, num_classes = 2; any other label
//                is an error.
//   kClassIndex  labels are integer class ids >= 0 kept as is; num_classes =
//                options.num_classes if > 0 (labels must be below it), else
//                max label + 1.
//   kRegression  labels kept as real values, num_classes = 0.
//
// Errors (InvalidArgumentError unless the file cannot be read, which keeps
// ReadFileBytes' codes), naming "file <path>: line <N>" and the token: bad
// token, index 0 or > dim, non-increasing index, bad label for the policy,
// no examples (empty file or only comments).
// Thread-compatible; no shared state.
#ifndef LOCKSTEP_COMMON_DATA_LIBSVM_H_
#define LOCKSTEP_COMMON_DATA_LIBSVM_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"

namespace lockstep {

// Largest dense matrix (examples x dim floats, 1 GiB) a LIBSVM file may
// densify to; beyond it the loader fails with InvalidArgumentError naming the
// example count and dim, before allocating.
inline constexpr int64_t kMaxLibsvmDenseValues = int64_t{1} << 28;

enum class LibsvmLabels { kAuto, kSigned, kClassIndex, kRegression };

struct LibsvmOptions {
  int64_t dim = 0;  // 0 = largest index seen
  LibsvmLabels labels = LibsvmLabels::kAuto;
  int num_classes = 0;  // kClassIndex/kAuto: 0 = infer; kSigned: 0 or 2
};

// Loads `path` into a Dataset named `path`. If `resolved` is non-null it
// receives the policy actually applied (kAuto resolves to kSigned or
// kClassIndex), so a second file (a test split) can be read the same way.
absl::StatusOr<Dataset> LoadLibsvm(const std::string& path,
                                   const LibsvmOptions& options = {},
                                   LibsvmLabels* resolved = nullptr);

// Parses LIBSVM text held in memory; `file_name` names it in errors and is
// the dataset name.
absl::StatusOr<Dataset> ParseLibsvm(std::string_view text,
                                    const std::string& file_name,
                                    const LibsvmOptions& options = {},
                                    LibsvmLabels* resolved = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_LIBSVM_H_
