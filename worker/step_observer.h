// StepObserver: what the job runner tells an observer (the worker's
// metrics) about each finished step. Keeps JobRunner free of any metrics
// registry.
#ifndef LOCKSTEP_WORKER_STEP_OBSERVER_H_
#define LOCKSTEP_WORKER_STEP_OBSERVER_H_

#include <cstdint>

namespace lockstep {

// One step's wall time on the job thread, from the moment it waits for
// room in the report window (step_reporter.h) to the moment its report is
// queued. It splits into three consecutive, non-overlapping parts:
//   wait_seconds      blocked on the coordinator: waiting for room in the
//                     report window (more than `report_lag` replies
//                     outstanding) and for the previous step's weights hash
//                     (or computing it here, when the reporter thread was
//                     busy with a reply);
//   exposed_seconds   the gradient combine's time that backward did not
//                     hide: the job thread waited for the combine (without
//                     overlap, the whole combine);
//   compute_seconds   everything else on the job thread: slicing the batch,
//                     forward + backward, applying the update, filling the
//                     report.
// So step = wait + exposed + compute. Two more figures describe the
// combine and may overlap compute_seconds:
//   communication_seconds  the combine's buckets in flight (sum over
//                          buckets of call to return; without overlap, the
//                          whole combine, = exposed_seconds);
//   peer_wait_seconds      the part of communication_seconds spent blocked
//                          until the peers' data for a bucket started to
//                          arrive (ring: the first receive of each bucket
//                          from the left neighbour; direct exchange: the
//                          peers' messages; ps: the pulls). It includes
//                          about one message latency per bucket besides the
//                          wait for the slowest peer. K = 1: 0.
// (CombineTiming in worker/combiner.h measures the last two.) The same
// figures go into ReportStepRequest (step_seconds = the step's wall time).
// The rank-0 test evaluation at an epoch end is not part of any step.
struct StepTiming {
  uint64_t job = 0;
  int64_t step = 0;
  int64_t examples = 0;  // this rank's slice
  double compute_seconds = 0;
  double exposed_seconds = 0;
  double wait_seconds = 0;
  double communication_seconds = 0;
  double peer_wait_seconds = 0;
  double step_seconds() const { return compute_seconds + exposed_seconds + wait_seconds; }
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Called on the job's thread after each step's report was queued.
  // Must be quick and must not block.
  virtual void OnStep(const StepTiming& t) = 0;
  // Called by the worker daemon when a job's run ended (any outcome).
  virtual void OnJobEnd(uint64_t job) { (void)job; }
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_STEP_OBSERVER_H_
