// The coordinator's Prometheus metrics, read from the Coordinator at scrape
// time by a collector (ListJobs / ListWorkers / counters(): each takes the
// coordinator's lock only to copy its state, never while rendering):
//
//   lockstep_jobs{state}                   gauge   PENDING RUNNING SUCCEEDED FAILED CANCELLED
//   lockstep_jobs_submitted_total          counter jobs accepted (ids handed out)
//   lockstep_workers{state}                gauge   IDLE BUSY LOST
//   lockstep_workers_lost_total            counter transitions to LOST
//   lockstep_steps_total                   counter steps every rank of a job completed
//   lockstep_hash_checks_total             counter per-step replica hash comparisons
//   lockstep_hash_mismatches_total         counter comparisons that found a differing rank
//   lockstep_job_examples_per_second{job}  gauge   RUNNING jobs' throughput
//
// (lockstep_rpc_errors_total{method,code} is counted by the gRPC server
// interceptor the main installs, see common/grpcutil/rpc_errors.h.)
#ifndef LOCKSTEP_SERVER_COORDINATOR_METRICS_H_
#define LOCKSTEP_SERVER_COORDINATOR_METRICS_H_

#include "common/metrics/metrics.h"
#include "server/coordinator.h"

namespace lockstep {

// Registers the families above and their collector on `registry`.
// `coordinator` must outlive every Render() of `registry`.
void RegisterCoordinatorMetrics(Coordinator* coordinator, MetricsRegistry* registry);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATOR_METRICS_H_
