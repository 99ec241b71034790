// Loads the dataset a lockstep.v1.DataSpec names, from this machine's disk.
// Used by every worker (each loads its own copy, as on real hosts) and by
// the single-process reference trainer.
#ifndef LOCKSTEP_WORKER_JOB_DATA_H_
#define LOCKSTEP_WORKER_JOB_DATA_H_

#include "absl/status/statusor.h"
#include "common/data/fashion_mnist.h"
#include "proto/job.pb.h"

namespace lockstep {

// DataSpec -> loader options; InvalidArgument naming the field
// ("data.normalize: expected none, scale255, minmax or standardize, got
// \"x\"") for values it does not know.
absl::StatusOr<DatasetOptions> ToDatasetOptions(const v1::DataSpec& spec);

// The dataset string with the default applied ("" -> "fashion-mnist").
std::string DatasetName(const v1::DataSpec& spec);

// Loads train and test splits; the loaders' errors name file and offset.
absl::StatusOr<TrainTest> LoadJobData(const v1::DataSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_JOB_DATA_H_
