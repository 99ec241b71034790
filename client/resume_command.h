// `lockstep resume JOB [--from_step=N]`: submits a new job that continues
// JOB from its checkpoints. The client fetches JOB's spec with GetJob,
// points spec.resume_from at JOB's checkpoints (<checkpoint_dir>/job-JOB/,
// the newest valid one, or step N) and submits the result as a new job; the
// new job trains the same run (same seed, same total steps) from there and
// writes its own checkpoints under <checkpoint_dir>/job-<new id>/. The
// workers read the checkpoint (every worker: the directory must be readable
// by all of them).
#ifndef LOCKSTEP_CLIENT_RESUME_COMMAND_H_
#define LOCKSTEP_CLIENT_RESUME_COMMAND_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

// The spec of the job that resumes `old` from its checkpoint of step
// `from_step` (0 = newest valid). FailedPrecondition when `old` wrote no
// checkpoints (its spec has no checkpoint_dir) or is still PENDING or
// RUNNING; InvalidArgument for from_step < 0.
absl::StatusOr<v1::JobSpec> ResumeSpec(const v1::JobStatus& old, int64_t from_step);

// GetJob(job), ResumeSpec, SubmitJob (with no_wait): the coordinator's reply
// (the new job's id and state). Errors: the RPCs' (NOT_FOUND "job 42 not
// found", ...) or ResumeSpec's.
absl::StatusOr<v1::SubmitJobReply> SubmitResume(CoordinatorClient* rpc, uint64_t job,
                                                int64_t from_step, bool no_wait);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_RESUME_COMMAND_H_
