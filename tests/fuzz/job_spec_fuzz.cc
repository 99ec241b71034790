// Fuzz target: JobSpec parsing, validation and conversion
// (common/train/job_spec_convert.h), what the coordinator runs on every
// SubmitJob and every worker on every assignment.
// Input: a serialized lockstep.v1.JobSpec (a malformed proto is rejected by
// the parser and skipped). Checks that ValidateJobSpec, ToTrainSpec,
// PsShards and the single-field checks never crash, overflow or allocate
// beyond libFuzzer's limit, and that a spec ValidateJobSpec accepts also
// converts (ToTrainSpec ok).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "google/protobuf/stubs/logging.h"
#include "common/train/job_spec_convert.h"
#include "proto/job.pb.h"

// Malformed protos are the point here: keep protobuf's per-parse error
// lines (invalid UTF-8 ...) off stderr, they slow the run down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lockstep::v1::JobSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return 0;
  const absl::Status valid = lockstep::ValidateJobSpec(spec);
  auto train = lockstep::ToTrainSpec(spec);
  if (valid.ok() && !train.ok()) std::abort();
  (void)lockstep::CheckModelSyntax(spec.model());
  (void)lockstep::CheckDatasetSyntax(spec.data().dataset());
  (void)lockstep::CheckCheckpointFields(spec);
  (void)lockstep::CheckWorkerLostPolicy(spec);
  if (valid.ok() && lockstep::PsShards(spec) < 1) std::abort();
  return 0;
}
