#include "server/coordinator_metrics.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace lockstep {

void RegisterCoordinatorMetrics(Coordinator* coordinator, MetricsRegistry* r) {
  auto* jobs = r->AddGaugeFamily("lockstep_jobs", "Jobs by state.", {"state"});
  Counter* submitted =
      r->AddCounter("lockstep_jobs_submitted_total", "Jobs accepted by SubmitJob.");
  auto* workers = r->AddGaugeFamily("lockstep_workers", "Registered workers by state.", {"state"});
  Counter* lost = r->AddCounter("lockstep_workers_lost_total",
                                "Workers marked LOST (no heartbeat within --lost_after_ms).");
  Counter* steps = r->AddCounter("lockstep_steps_total",
                                 "Training steps that every rank of a job completed.");
  Counter* checks = r->AddCounter("lockstep_hash_checks_total",
                                  "Per-step comparisons of all ranks' weight hashes.");
  Counter* mismatches = r->AddCounter(
      "lockstep_hash_mismatches_total",
      "Per-step hash comparisons in which some rank differed from the majority.");
  auto* eps = r->AddGaugeFamily("lockstep_job_examples_per_second",
                                "Training throughput of each RUNNING job (examples/s).", {"job"});
  r->AddCollector([=] {
    const v1::JobList list = coordinator->ListJobs();
    std::map<std::string, int64_t> by_state;
    for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
      if (v1::JobState_IsValid(s) && s != v1::JOB_STATE_UNSPECIFIED) {
        by_state[v1::JobState_Name(static_cast<v1::JobState>(s))] = 0;
      }
    }
    int64_t step_sum = 0, check_sum = 0, mismatch_sum = 0;
    eps->Clear();
    for (const v1::JobStatus& j : list.jobs()) {
      ++by_state[v1::JobState_Name(j.state())];
      step_sum += j.step();
      check_sum += j.checked_steps();
      mismatch_sum += j.mismatched_steps();
      if (j.state() == v1::RUNNING) {
        eps->WithLabels({absl::StrCat(j.job_id())})->Set(j.examples_per_second());
      }
    }
    for (const auto& [state, n] : by_state) jobs->WithLabels({state})->Set(n);
    // Jobs are kept for the coordinator's life, so these sums only grow.
    submitted->Set(list.jobs_size());
    steps->Set(step_sum);
    checks->Set(check_sum);
    mismatches->Set(mismatch_sum);

    std::map<std::string, int64_t> workers_by_state;
    for (int s = v1::WorkerState_MIN; s <= v1::WorkerState_MAX; ++s) {
      if (v1::WorkerState_IsValid(s) && s != v1::WORKER_STATE_UNSPECIFIED) {
        workers_by_state[v1::WorkerState_Name(static_cast<v1::WorkerState>(s))] = 0;
      }
    }
    const v1::WorkerList worker_list = coordinator->ListWorkers();
    for (const v1::WorkerInfo& w : worker_list.workers()) {
      ++workers_by_state[v1::WorkerState_Name(w.state())];
    }
    for (const auto& [state, n] : workers_by_state) workers->WithLabels({state})->Set(n);
    lost->Set(coordinator->counters().workers_lost);
  });
}

}  // namespace lockstep
