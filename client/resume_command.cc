#include "client/resume_command.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<v1::JobSpec> ResumeSpec(const v1::JobStatus& old, int64_t from_step) {
  const uint64_t id = old.job_id();
  if (from_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--from_step: expected >= 0 (0 = the newest valid checkpoint), got ",
                     from_step));
  }
  if (old.spec().checkpoint_dir().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " wrote no checkpoints (its spec has no checkpoint_dir; submit with "
        "--checkpoint_dir=DIR to checkpoint a job)"));
  }
  if (old.state() == v1::PENDING || old.state() == v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " is ", v1::JobState_Name(old.state()),
        ": resume a job that has ended (lockstep cancel ", id, " first)"));
  }
  v1::JobSpec spec = old.spec();
  v1::CheckpointRef* ref = spec.mutable_resume_from();
  ref->set_checkpoint_dir(spec.checkpoint_dir());
  ref->set_job_id(id);
  ref->set_step(from_step);
  spec.set_name(spec.name().empty() ? absl::StrCat("resume of job ", id)
                                    : absl::StrCat(spec.name(), " (resume of job ", id, ")"));
  return spec;
}

absl::StatusOr<v1::SubmitJobReply> SubmitResume(CoordinatorClient* rpc, uint64_t job,
                                                int64_t from_step, bool no_wait) {
  auto old = rpc->GetJob(job);
  if (!old.ok()) return old.status();
  auto spec = ResumeSpec(*old, from_step);
  if (!spec.ok()) return spec.status();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *std::move(spec);
  req.set_no_wait(no_wait);
  return rpc->Submit(req);
}

}  // namespace lockstep
