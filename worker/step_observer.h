// StepObserver: what the job runner tells an observer (the worker's
// metrics) about each finished step. Keeps JobRunner free of any metrics
// registry.
#ifndef LOCKSTEP_WORKER_STEP_OBSERVER_H_
#define LOCKSTEP_WORKER_STEP_OBSERVER_H_

#include <cstdint>

namespace lockstep {

// One step's wall time, split into three consecutive, non-overlapping parts
// (their sum is the step's time from sampling its batch to the
// coordinator's reply):
//   compute_seconds        this rank's work: slicing the batch, forward +
//                          backward, applying the update and hashing the
//                          weights;
//   communication_seconds  the gradient combine (ring all-reduce or ps
//                          push/pull): moving bytes AND waiting there for
//                          slower peers / the other ranks' pushes, which
//                          cannot be told apart from outside the collective;
//   wait_seconds           blocked on the coordinator: the ReportStep round
//                          trip whose reply lets the next step start.
// The rank-0 test evaluation at an epoch end is not part of any step.
struct StepTiming {
  uint64_t job = 0;
  int64_t step = 0;
  int64_t examples = 0;  // this rank's slice
  double compute_seconds = 0;
  double communication_seconds = 0;
  double wait_seconds = 0;
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Called on the job's thread after each step's ReportStep returned OK.
  // Must be quick and must not block.
  virtual void OnStep(const StepTiming& t) = 0;
  // Called by the worker daemon when a job's run ended (any outcome).
  virtual void OnJobEnd(uint64_t job) { (void)job; }
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_STEP_OBSERVER_H_
