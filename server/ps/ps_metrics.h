// A parameter-server shard's Prometheus metrics, read from PsService at
// scrape time (lockstep-server --role=ps, and the coordinator's own shard):
//
//   lockstep_ps_pushes_total          counter  successful pushes
//   lockstep_ps_pulls_total           counter  successful pulls
//   lockstep_ps_received_bytes_total  counter  push payload bytes (floats x 4 + 8-byte count)
//   lockstep_ps_sent_bytes_total      counter  pull reply payload bytes (same)
//   lockstep_ps_jobs                  gauge    jobs whose shards are held
//   lockstep_ps_waiting_pulls         gauge    pulls waiting for the step's pushes
//
// Failed pushes and pulls: the RPC-error interceptor's counter of the daemon
// (methods Push / Pull).
#ifndef LOCKSTEP_SERVER_PS_PS_METRICS_H_
#define LOCKSTEP_SERVER_PS_PS_METRICS_H_

#include "common/metrics/metrics.h"
#include "server/ps/ps_service.h"

namespace lockstep {

// `service` must outlive every Render() of `registry`.
void RegisterPsMetrics(const PsService* service, MetricsRegistry* registry);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_PS_METRICS_H_
