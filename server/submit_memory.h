// The coordinator's check of a job's memory need at SubmitJob (issue 11: a
// job whose model cannot fit must be refused with RESOURCE_EXHAUSTED naming
// the need and the limit, not accepted and then fail on its workers).
//
// The coordinator does not know the dataset's shape at submit (workers load
// it when the job starts), so it counts the need of common/train/job_memory.h
// with the input dimension and class count the spec states (libsvm
// spec.data.dim, spec.data.num_classes >= 2), else 1 feature and 2 classes: a
// lower bound of what every worker of
// the job will need (each worker checks the real need again after loading
// its data, worker --max_job_memory_bytes). The job is refused when
//   * the bound exceeds `coordinator_limit` (> 0; its --max_job_memory_bytes),
//     or
//   * fewer than min(K, live workers) of the live workers can hold it, each
//     by the limit it advertised at registration (RegisterWorkerRequest
//     .max_job_memory_bytes; 0 = no limit or not said): with fewer live
//     workers than K the job waits for more, so every live one must fit it.
// A need that overflows int64 is refused the same way. A spec whose model or
// other fields do not convert is left to ValidateJobSpec (OK here).
#ifndef LOCKSTEP_SERVER_SUBMIT_MEMORY_H_
#define LOCKSTEP_SERVER_SUBMIT_MEMORY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace lockstep {

absl::Status CheckJobMemoryAtSubmit(const lockstep::v1::JobSpec& spec, int64_t coordinator_limit,
                                    const std::vector<int64_t>& live_worker_limits);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_SUBMIT_MEMORY_H_
