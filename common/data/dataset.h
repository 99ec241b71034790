// In-memory dense dataset and feature normalisation.
#ifndef LOCKSTEP_COMMON_DATA_DATASET_H_
#define LOCKSTEP_COMMON_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lockstep {

// A dense, row-major dataset. Plain value type: owns its storage, no
// internal synchronisation (thread-compatible: concurrent const access is
// safe).
struct Dataset {
  std::string name;  // e.g. "fashion-mnist/train"
  int64_t num_examples = 0;
  int64_t dim = 0;       // features per example
  std::vector<float> x;  // row-major num_examples*dim
  // One label per example: the class id stored as float for classification,
  // the real-valued target for regression.
  std::vector<float> y;
  // 0 for regression targets, else labels are integers in [0,num_classes).
  int num_classes = 0;

  // Pointer to the dim features of example i. Requires 0 <= i < num_examples.
  const float* row(int64_t i) const { return x.data() + i * dim; }
};

// Checks the structural invariants: sizes of x and y match num_examples and
// dim, num_classes >= 0, and when num_classes > 0 every label is an integer
// in [0,num_classes). Returns InvalidArgumentError naming the dataset, the
// field and (for labels) the example index.
absl::Status ValidateDataset(const Dataset& ds);

// Copies the rows `indices` of `ds` into *x (indices.size()*dim floats,
// row-major) and *y (indices.size() labels), replacing their contents.
// Requires every index in [0, num_examples) (checked: aborts otherwise, a
// programming error).
void GatherRows(const Dataset& ds, absl::Span<const int64_t> indices,
                std::vector<float>* x, std::vector<float>* y);

enum class Normalize {
  kNone,
  kScale255,     // divide by 255 (fixed; needs no statistics)
  kUnitRange,    // min-max per feature, from the given (train) statistics
  kStandardize,  // z-score per feature, from the given (train) statistics
};

// Parses "none", "scale255", "minmax", "standardize" (exact, lower case).
// InvalidArgumentError listing the accepted names otherwise.
absl::StatusOr<Normalize> ParseNormalize(std::string_view name);
// Inverse of ParseNormalize.
const char* NormalizeName(Normalize mode);

// Per-feature affine normalisation x' = (x - shift[j]) / scale[j].
//   kNone:        shift 0, scale 1 (identity)
//   kScale255:    shift 0, scale 255
//   kUnitRange:   shift = min_j, scale = max_j - min_j (1 if the feature is
//                 constant, so it maps to 0). Train maps into [0,1]; a test
//                 value outside the train range maps outside [0,1] (no
//                 clipping).
//   kStandardize: shift = mean_j, scale = population std_j (1 if the std is
//                 0 or not finite). Accumulated in double.
struct NormStats {
  Normalize mode = Normalize::kNone;
  int64_t dim = 0;
  std::vector<float> shift;  // dim entries
  std::vector<float> scale;  // dim entries, all > 0
};

// Computes statistics of `mode` on `train` (normally the training split).
// InvalidArgumentError if `train` has no examples while `mode` needs
// per-feature statistics, or if it fails ValidateDataset's size checks.
absl::StatusOr<NormStats> ComputeNormStats(const Dataset& train,
                                           Normalize mode);

// Applies `stats` to every example of *ds in place. A dataset with zero
// examples is left untouched whatever its dim; otherwise ds->dim must equal
// stats.dim (InvalidArgumentError naming both).
absl::Status ApplyNormStats(const NormStats& stats, Dataset* ds);

// The usual train/test pipeline: statistics from *train, applied to *train
// and to *test (test may be null or empty). Writes the statistics used to
// *stats_out when non-null.
absl::Status NormalizeTrainTest(Normalize mode, Dataset* train, Dataset* test,
                                NormStats* stats_out = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_DATASET_H_
