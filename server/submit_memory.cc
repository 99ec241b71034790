#include "server/submit_memory.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/train/job_memory.h"
#include "common/train/job_spec_convert.h"

namespace lockstep {

absl::Status CheckJobMemoryAtSubmit(const v1::JobSpec& spec, int64_t coordinator_limit,
                                    const std::vector<int64_t>& live_worker_limits) {
  absl::StatusOr<TrainSpec> train = ToTrainSpec(spec);
  if (!train.ok()) return absl::OkStatus();  // ValidateJobSpec names it
  const int k = std::max(1, spec.num_workers());
  // The shape the spec states, else the smallest one.
  const bool libsvm = absl::StartsWith(spec.data().dataset(), "libsvm:");
  const int64_t input_dim = libsvm && spec.data().dim() > 0 ? spec.data().dim() : 1;
  const int classes = spec.data().num_classes() >= 2 ? spec.data().num_classes() : 2;
  absl::StatusOr<JobMemoryNeed> need = ComputeJobMemoryNeed(*train, input_dim, classes, k);
  if (!need.ok()) {
    if (need.status().code() == absl::StatusCode::kOutOfRange) {
      return absl::ResourceExhaustedError(absl::StrCat("SubmitJob: ", need.status().message()));
    }
    return absl::OkStatus();  // a model that does not parse: ValidateJobSpec names it
  }
  const std::string what =
      absl::StrCat("SubmitJob: job needs at least ", need->total, " bytes of memory per worker (",
                   need->Describe(),
                   "; counted with ", input_dim, " input feature(s) and ", classes,
                   " classes, the dataset may add to it)");
  if (coordinator_limit > 0 && need->total > coordinator_limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " but the limit is ", coordinator_limit, " bytes (",
                     HumanBytes(coordinator_limit), ", the coordinator's --max_job_memory_bytes)"));
  }
  const int64_t live = static_cast<int64_t>(live_worker_limits.size());
  int64_t capable = 0;
  int64_t largest = 0;
  for (int64_t limit : live_worker_limits) {
    if (limit <= 0 || limit >= need->total) ++capable;
    largest = std::max(largest, limit);
  }
  const int64_t needed = std::min<int64_t>(k, live);
  if (capable < needed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " but only ", capable, " of the ", live, " live workers can hold it and ", needed,
        " are needed; the largest worker limit is ", largest, " bytes (", HumanBytes(largest),
        ", its --max_job_memory_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
