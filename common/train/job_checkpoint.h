// A job's checkpoints: when rank 0 writes one (JobSpec checkpoint_* fields)
// and how a job resumes from one (JobSpec.resume_from). The file format and
// atomic writes are in checkpoint.h.
//
// Writing: JobCheckpointer::Due(next_step, total, now) after each applied
// step is a few integer and time comparisons (no allocation), true when
//   next_step is a multiple of checkpoint_every_steps (> 0), or
//   checkpoint_every_seconds (> 0) have passed since the last checkpoint
//   (or since Start), or next_step == total (the end).
// Write() then captures the replica (weights, optimizer state) with the
// step, sampler position, seed and spec, and writes
// <checkpoint_dir>/job-<id>/step-<next_step>.ckpt, keeping the newest
// checkpoint_keep (0 = 3) files.
//
// Resuming: every rank calls ResumeReplica, which loads the checkpoint named
// by spec.resume_from (the newest valid one when step is 0), checks that it
// belongs to a run with the same arithmetic (model, data, batch, seed,
// optimizer, schedule, steps/epochs; num_workers, sync mode and transports
// may differ), that its sampler position fits this rank's data, and puts
// its weights and optimizer state into the replica; the job continues at
// its next_step. The sampler needs nothing restored: the batch of step t is
// a pure function of (examples, batch, seed, t).
//
// Thread-safety: a JobCheckpointer is used by one thread (the job thread);
// WriteInBackground's writer thread touches only its own copy of the state.
#ifndef LOCKSTEP_COMMON_TRAIN_JOB_CHECKPOINT_H_
#define LOCKSTEP_COMMON_TRAIN_JOB_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/optim/hash.h"
#include "common/train/checkpoint.h"
#include "common/train/replica.h"
#include "proto/job.pb.h"

namespace lockstep {

// OK when a run of `job` continues the arithmetic of the run that saved
// `saved` exactly; else FailedPrecondition "<origin>: spec.<field>: the
// checkpoint's run used X, this job Y".
absl::Status CheckResumeCompatible(const v1::JobSpec& job, const v1::JobSpec& saved,
                                   absl::string_view origin);

class JobCheckpointer {
 public:
  // Disabled (enabled() false) when spec.checkpoint_dir is empty.
  JobCheckpointer(const v1::JobSpec& spec, uint64_t job_id);

  bool enabled() const { return enabled_; }
  const std::string& dir() const { return dir_; }

  // Creates the job's directory (so a bad directory fails the job before
  // step 0, naming it) and starts the time interval at `now`.
  absl::Status Start(absl::Time now);
  // See the header comment. No allocation.
  bool Due(int64_t next_step, int64_t total_steps, absl::Time now) const;
  // Writes the checkpoint of `replica` after step next_step - 1 (its
  // weights hash to `hash`); returns the path. Restarts the time interval.
  absl::StatusOr<std::string> Write(const Replica& replica, int64_t next_step,
                                    int64_t total_steps, const SamplerPosition& sampler,
                                    const WeightHash& hash, absl::Time now);

  // The same, off the caller's thread: copies the weights and optimizer
  // state now (the caller may change them as soon as this returns), then
  // encodes, writes, fsyncs and prunes on a writer thread and calls
  // `done(path or error, seconds the copy took on the caller's thread,
  // seconds spent writing)` there. At most one write is in flight: a second
  // call first waits for the previous one. Restarts the time interval.
  using WriteDone = std::function<void(const absl::StatusOr<std::string>& path,
                                       double capture_seconds, double write_seconds)>;
  void WriteInBackground(const Replica& replica, int64_t next_step, int64_t total_steps,
                         const SamplerPosition& sampler, const WeightHash& hash, absl::Time now,
                         WriteDone done);

  // WriteInBackground in two halves, so a checkpoint is written only once
  // the ranks agree on the state it holds (worker/job_runner.cc: the state
  // identities every rank sends in the next step's combine). Capture copies
  // the state now (replacing an earlier capture not yet committed) and
  // restarts the time interval; CommitCaptured writes it as
  // WriteInBackground does; DropCaptured forgets it (never written).
  void Capture(const Replica& replica, int64_t next_step, int64_t total_steps,
               const SamplerPosition& sampler, const WeightHash& hash, absl::Time now);
  // The next step of the captured state (-1 = none).
  int64_t captured_step() const { return captured_ ? captured_state_.next_step : -1; }
  void CommitCaptured(WriteDone done);
  void DropCaptured() { captured_ = false; }

  // Waits for the write in flight, if any (the destructor does too).
  void Wait();
  ~JobCheckpointer();
  JobCheckpointer(const JobCheckpointer&) = delete;
  JobCheckpointer& operator=(const JobCheckpointer&) = delete;

 private:
  const bool enabled_;
  const std::string dir_;
  const v1::JobSpec spec_;
  const uint64_t job_id_;
  const int64_t every_steps_;
  const absl::Duration every_;
  const int keep_;
  absl::Time last_ = absl::InfinitePast();
  std::thread writer_;  // the write in flight (joinable) or none
  bool captured_ = false;
  TrainingState captured_state_;
  double capture_seconds_ = 0;
  TrainingState CaptureState(const Replica& replica, int64_t next_step, int64_t total_steps,
                        const SamplerPosition& sampler, const WeightHash& hash) const;
};

struct ResumePoint {
  std::string path;              // the checkpoint used
  int64_t next_step = 0;         // the first step this job runs
  WeightHash weights_hash;       // the restored weights' hash
  std::vector<std::string> skipped;  // newer files skipped: "<path>: <why>"
};

// Loads the checkpoint spec.resume_from names into `replica` (see the header
// comment). Errors name the file and the field: NotFound (no such
// directory / file / no checkpoint), DataLoss (every candidate corrupt),
// FailedPrecondition (another run's checkpoint, or a model or data size
// that does not fit).
absl::StatusOr<ResumePoint> ResumeReplica(const v1::JobSpec& spec,
                                          const SamplerPosition& sampler, int64_t total_steps,
                                          Replica* replica);

// A rank that finds no checkpoint of spec.resume_from in its own directory
// may fetch the file from the worker that wrote it (a resumed job's new
// rank 0 when the writer is busy): the largest file it accepts for
// `replica`'s model, and where it stores what it got, atomically, as
// <resume_from.checkpoint_dir>/job-<job_id>/step-<step>.ckpt (the
// directories are created), so that ResumeReplica then loads and checks it
// as any other. Returns the path.
uint64_t MaxResumeFileBytes(const Replica& replica);
absl::StatusOr<std::string> StoreFetchedCheckpoint(const v1::JobSpec& spec, int64_t step,
                                                   absl::string_view bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_JOB_CHECKPOINT_H_
