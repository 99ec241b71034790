// WorkerMetrics: the worker daemon's Prometheus metrics (registered on a
// MetricsRegistry the daemon's main owns), fed by
//   * the job runner, through StepObserver (steps, step time split into
//     compute / communication / wait, examples);
//   * counting decorators around the ring transport and the ps clients
//     (payload bytes sent and received per transport);
//   * the coordinator channel's interceptor and the ps decorator (RPC
//     errors by method and code).
//
// Metric names (see README "Metrics"):
//   lockstep_worker_steps_total                          counter
//   lockstep_worker_examples_total                       counter (this rank's examples)
//   lockstep_worker_examples_per_second                  gauge
//   lockstep_worker_step_compute_seconds                 histogram
//   lockstep_worker_step_communication_seconds           histogram
//   lockstep_worker_step_wait_seconds                    histogram
//   lockstep_worker_jobs_total                           counter (jobs run to any end)
//   lockstep_transport_sent_bytes_total{transport}       counter, tcp|grpc|ps
//   lockstep_transport_received_bytes_total{transport}   counter, tcp|grpc|ps
//   lockstep_worker_rpc_errors_total{method,code}        counter
//
// Thread-safe; no gRPC here.
#ifndef LOCKSTEP_WORKER_WORKER_METRICS_H_
#define LOCKSTEP_WORKER_WORKER_METRICS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/transport.h"
#include "common/metrics/metrics.h"
#include "worker/step_observer.h"

namespace lockstep {

// Upper bounds of the step-time histograms: 100 us to 10 s.
std::vector<double> StepSecondsBuckets();

class WorkerMetrics : public StepObserver {
 public:
  // Registers the families above on `registry` (not owned; must outlive
  // this).
  explicit WorkerMetrics(MetricsRegistry* registry);

  void OnStep(const StepTiming& t) override;
  // Sets the examples/s gauge to 0 (no job runs).
  void OnJobEnd(uint64_t job) override;

  // A Transport that forwards to `inner` (not owned; must outlive the
  // result) and counts the payload bytes of every successful Send /
  // SendBorrowed / Recv under transport="<transport>" (e.g. "tcp").
  std::unique_ptr<Transport> CountTransport(Transport* inner, const std::string& transport);
  // A PsClient that forwards to `inner` (not owned) and counts
  // transport="ps" bytes: a Push sends the shard's floats plus the 8-byte
  // count, a Pull receives the same. Failed pushes and pulls count as RPC
  // errors (method Push / Pull).
  std::unique_ptr<PsClient> CountPs(PsClient* inner);

  // One failed RPC (method "ReportStep", code "UNAVAILABLE").
  void RpcError(absl::string_view method, absl::string_view code);

 private:
  Counter* steps_;
  Counter* examples_;
  Counter* jobs_;
  Gauge* examples_per_second_;
  Histogram* compute_;
  Histogram* communication_;
  Histogram* wait_;
  Family<Counter>* sent_;
  Family<Counter>* received_;
  Family<Counter>* rpc_errors_;

  // examples/s over windows of at least 1 s of step time.
  absl::Mutex mu_;
  double window_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t window_examples_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_WORKER_METRICS_H_
