// lockstep.v1.JobSpec -> TrainSpec, and the checks the coordinator can make
// on a JobSpec without loading any data.
//
// Proto3 zero values are mapped to the documented defaults (job.proto):
//   optimizer.kind ""  -> "sgd"        optimizer.beta1 0 -> 0.9
//   optimizer.beta2 0  -> 0.999        optimizer.eps 0   -> 1e-8
//   lr.reference_batch 0 -> 256        lr.gamma 0        -> 0.1
//   lr.decay ""        -> "constant"
// seed is taken as is (0 is a valid seed).
//
// Cosine decay needs the run's total step count. With spec.steps > 0 it is
// spec.steps and ToTrainSpec sets lr.total_steps to it. With spec.steps == 0
// (epoch-based) the count depends on the training set, which only workers
// load: ToTrainSpec leaves lr.total_steps = 0 and each worker must set
// lr.total_steps = TotalSteps(spec, train.num_examples) and re-run
// ValidateTrainSpec before training (it then also checks total_steps >
// warmup_steps against the real data).
//
// Error messages name the JobSpec field path ("spec.lr.base_lr: ...").
//
// Thread-safety: pure functions.
#ifndef LOCKSTEP_COMMON_TRAIN_JOB_SPEC_CONVERT_H_
#define LOCKSTEP_COMMON_TRAIN_JOB_SPEC_CONVERT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/train/train_spec.h"
#include "proto/job.pb.h"

namespace lockstep {

// Converts `spec` (defaults as above) and validates the result with
// ValidateTrainSpec(result, spec.num_workers()). InvalidArgument naming the
// JobSpec field ("spec.global_batch: ...", "spec.optimizer.momentum: ...",
// "spec.lr.warmup_steps: ...") when the spec cannot run on num_workers
// workers.
absl::StatusOr<TrainSpec> ToTrainSpec(const lockstep::v1::JobSpec& spec);

// Every data-independent check of a submitted JobSpec, in this order, each
// an InvalidArgument naming the field:
//   spec.sync_mode     RING or PS
//   spec.peer_transport  GRPC (the default, 0), TCP or SHM
//   spec.ps_transport  GRPC (the default, 0) or TCP
//   spec.num_workers   >= 1
//   spec.global_batch  >= num_workers
//   spec.lr.base_lr    finite and > 0
//   spec.model         syntactically valid (CreateModel on a dummy input)
//   spec.data.dataset  known prefix with a non-empty path
//   spec.data.normalize  "", "scale255", "none", "minmax" or "standardize"
//   spec.data.num_classes  >= -1
//   spec.data.dim      >= 0
//   spec.ps_shards     >= 0
//   spec.steps / spec.epochs and everything else ToTrainSpec checks.
// Checks that need the data (input dimension, class count, file existence)
// happen on the workers.
absl::Status ValidateJobSpec(const lockstep::v1::JobSpec& spec);

// The model check of ValidateJobSpec alone: OK when `model` parses
// ("linear", "logistic", "softmax", "mlp:H1[,H2...]"), else InvalidArgument
// "spec.model: unknown model \"resnet\" (expected ...)".
absl::Status CheckModelSyntax(absl::string_view model);

// The dataset check of ValidateJobSpec alone: "" (= "fashion-mnist"),
// "fashion-mnist", "mnist-dir:<dir>", "idx:<...>", "csv:<...>",
// "libsvm:<...>" with a non-empty part after the colon.
absl::Status CheckDatasetSyntax(absl::string_view dataset);

// The checkpoint fields' check of ValidateJobSpec alone (it runs last):
// checkpoint_every_steps, checkpoint_every_seconds, checkpoint_keep >= 0;
// resume_from, when any of its fields is set, needs a checkpoint_dir, a
// job_id and step >= 0. InvalidArgument naming the field.
absl::Status CheckCheckpointFields(const lockstep::v1::JobSpec& spec);

// spec.on_worker_lost: "", "fail", "shrink" or "wait"; anything else
// InvalidArgument naming the field and the expected values;
// spec.wait_timeout_ms >= 0; spec.stall_timeout_ms 0 or in
// [kMinStallTimeoutMs, kMaxStallTimeoutMs].
absl::Status CheckWorkerLostPolicy(const lockstep::v1::JobSpec& spec);
inline constexpr int64_t kMinStallTimeoutMs = 100;
inline constexpr int64_t kMaxStallTimeoutMs = 3600000;

// on_worker_lost = "wait": how long a job waits for a worker to replace a
// lost rank (spec.wait_timeout_ms; 0 = kDefaultWaitTimeoutMs, 10 minutes).
inline constexpr int64_t kDefaultWaitTimeoutMs = 600000;
inline absl::Duration WorkerLostWaitTimeout(const lockstep::v1::JobSpec& spec) {
  return absl::Milliseconds(spec.wait_timeout_ms() > 0 ? spec.wait_timeout_ms()
                                                       : kDefaultWaitTimeoutMs);
}

// The number of parameter-server shards a job uses: spec.ps_shards, 0 -> 1.
int PsShards(const lockstep::v1::JobSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_JOB_SPEC_CONVERT_H_
