// TrainSpec: everything that determines a training run's arithmetic, the
// same for the single-process reference trainer and for every worker of a
// distributed job (the coordinator converts lockstep.v1.JobSpec into it).
#ifndef LOCKSTEP_COMMON_TRAIN_TRAIN_SPEC_H_
#define LOCKSTEP_COMMON_TRAIN_TRAIN_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/optim/lr_schedule.h"
#include "common/optim/optimizer.h"

namespace lockstep {

struct TrainSpec {
  std::string model = "mlp:256";  // see CreateModel()
  int64_t global_batch = 128;     // B: examples per step over all workers
  int64_t epochs = 1;             // used when steps == 0
  int64_t steps = 0;              // exact step count (0 = epochs * steps/epoch)
  uint64_t seed = 1;              // initialisation and sampling
  OptimizerConfig optimizer;
  LrScheduleConfig lr;
};

// InvalidArgument naming the field when the spec cannot run on `world`
// workers (e.g. "global_batch: expected >= number of workers (4), got 3").
absl::Status ValidateTrainSpec(const TrainSpec& spec, int world);

// Steps the run takes on a training set of `num_examples`.
int64_t TotalSteps(const TrainSpec& spec, int64_t num_examples);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_TRAIN_SPEC_H_
