#include "server/ps/ps_metrics.h"

namespace lockstep {

void RegisterPsMetrics(const PsService* service, MetricsRegistry* r) {
  Counter* pushes = r->AddCounter("lockstep_ps_pushes_total", "Successful ps pushes.");
  Counter* pulls = r->AddCounter("lockstep_ps_pulls_total", "Successful ps pulls.");
  Counter* received = r->AddCounter(
      "lockstep_ps_received_bytes_total",
      "Payload bytes of successful pushes (gradient floats x 4 + 8-byte count).");
  Counter* sent = r->AddCounter(
      "lockstep_ps_sent_bytes_total",
      "Payload bytes of successful pull replies (gradient floats x 4 + 8-byte count).");
  Gauge* jobs = r->AddGauge("lockstep_ps_jobs", "Jobs whose ps shards this server holds.");
  Gauge* waiting =
      r->AddGauge("lockstep_ps_waiting_pulls", "Pulls waiting for the rest of a step's pushes.");
  r->AddCollector([=] {
    const PsService::Stats s = service->stats();
    pushes->Set(static_cast<double>(s.pushes));
    pulls->Set(static_cast<double>(s.pulls));
    received->Set(static_cast<double>(s.pushed_bytes));
    sent->Set(static_cast<double>(s.pulled_bytes));
    jobs->Set(service->num_jobs());
    waiting->Set(service->waiting_pulls());
  });
}

}  // namespace lockstep
