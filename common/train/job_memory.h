// A training job's memory need on one worker, computed before anything is
// allocated, and the check against a limit (issue 11: "a job whose model
// cannot fit kills its workers" with std::bad_alloc).
//
// Bytes per worker (floats are 4 bytes; P = the model's parameter count):
//   parameters      4 P
//   gradient        4 (P + 1)        the combine buffer (sum, loss slot)
//   optimizer       4 P x slots      sgd 0 (momentum 0) or 1, adam(w) 2
//   combine         4 (P + 1)        a ring receive buffer / ps shards
//   activations     4 x 2 x b x (sum of the layer widths after the input)
//                                    b = ceil(global_batch / K), forward
//                                    activations and backward deltas
// The dataset itself is already loaded when a worker checks (it is counted
// by the process, not here); the per-rank flag and identity slots are a few
// floats and are left out. Every product is overflow-checked.
#ifndef LOCKSTEP_COMMON_TRAIN_JOB_MEMORY_H_
#define LOCKSTEP_COMMON_TRAIN_JOB_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/train/train_spec.h"

namespace lockstep {

struct JobMemoryNeed {
  int64_t parameters = 0;
  int64_t gradient = 0;
  int64_t optimizer = 0;
  int64_t combine = 0;
  int64_t activations = 0;
  int64_t total = 0;
  int64_t num_params = 0;
  // "49.2 GB (parameters 12.0 GB, gradient 12.0 GB, optimizer state 12.0 GB,
  // combine buffer 12.0 GB, activations 1.1 MB)".
  std::string Describe() const;
};

// The need of `spec` on a worker of a K = `world` job whose data has
// `input_dim` features and `num_classes` classes. InvalidArgument for a
// model spec that does not parse (as CreateModel), OutOfRange when the
// need overflows int64 (it fits no machine either).
absl::StatusOr<JobMemoryNeed> ComputeJobMemoryNeed(const TrainSpec& spec, int64_t input_dim,
                                                   int num_classes, int world);

// The default limit: 3/4 of the machine's physical memory (sysconf), or
// 4 GiB when that cannot be read.
int64_t DefaultMaxJobMemoryBytes();

// OK when need.total <= limit_bytes (limit <= 0: no limit), else
// ResourceExhausted "<who>: job needs N bytes (...) but the limit is L
// bytes (<limit_name>)".
absl::Status CheckJobMemory(const JobMemoryNeed& need, int64_t limit_bytes,
                            absl::string_view who, absl::string_view limit_name);

// "1.5 GB" style (powers of 1000, one decimal), for messages.
std::string HumanBytes(int64_t bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_JOB_MEMORY_H_
