// `lockstep scale`'s driver: runs the same job at each K, one after the
// other, waits for each (with a deadline) and turns the final JobStatus
// into a scaling::Measurement. Talks to the cluster through ScaleBackend,
// so tests can drive it with a fake (client/scale_command.cc adapts the
// coordinator's gRPC API).
//
// Throughput of a run is JobStatus.examples_per_second of the SUCCEEDED
// job: the coordinator's examples completed after the first step divided
// by the wall time from the first step's completion to the last one's
// (server/coordinator.h). The first step (dataset load, connection set-up,
// first-touch page faults) is the warm-up it leaves out; submission,
// PENDING time and the final evaluation and weight upload fall outside it
// too. With --repeats=R the runs interleave (K=1,2,4, K=1,2,4, ...) so
// slow drifts of a shared machine hit every K alike, and each field is the
// median over the R runs.
#ifndef LOCKSTEP_CLIENT_SCALE_RUNNER_H_
#define LOCKSTEP_CLIENT_SCALE_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/scale_report.h"
#include "common/scaling_model.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

class ScaleBackend {
 public:
  virtual ~ScaleBackend() = default;
  // Workers free for the next job: IDLE, or BUSY with a job that has ended.
  virtual absl::StatusOr<int> IdleWorkers() = 0;
  // Submits the job (it may wait PENDING for its workers); returns its id.
  virtual absl::StatusOr<uint64_t> Submit(const v1::JobSpec& spec) = 0;
  virtual absl::StatusOr<v1::JobStatus> Get(uint64_t job_id) = 0;
  virtual absl::Status Cancel(uint64_t job_id) = 0;
  // Floats in the job's final weights (its parameter count).
  virtual absl::StatusOr<int64_t> ParameterCount(uint64_t job_id) = 0;
  // Waits `d` between polls of a running job.
  virtual void Sleep(absl::Duration d) = 0;
  virtual absl::Time Now() = 0;
};

struct ScaleOptions {
  v1::JobSpec base;           // the job; num_workers, global_batch overwritten per K
  std::vector<int> ks;        // K to measure, ascending
  bool weak = true;           // weak: global batch = base.global_batch x K; strong: fixed
  int repeats = 1;            // runs per K (median)
  absl::Duration job_timeout = absl::Minutes(10);  // per job, from submission
  absl::Duration poll = absl::Milliseconds(100);
  // The alpha probe ("" = none): after each repeat's runs, the same job with
  // this model instead (a much smaller gradient) at the probe K: the
  // smallest measured K > 1 (ring), or the smallest measured K (ps, where
  // K = 1 communicates too). Two gradient sizes at one K separate the
  // per-round cost alpha from the per-byte cost beta, which a single host
  // cannot do from K alone (K above its CPUs measures CPU sharing).
  std::string probe_model;
};

// The probe's result (ScaleRun::probe).
struct ProbeRun {
  std::string model;              // "" = no probe ran (note says why, when one was asked for)
  int k = 0;
  scaling::Measurement m;         // median over the repeats
  int64_t parameter_count = 0;    // 0 = unknown
  std::vector<uint64_t> job_ids;
  std::string note;
};

struct ScaleRun {
  int idle_workers = 0;
  std::vector<int> measured_ks;  // the K run, ascending
  std::vector<int> skipped;      // K above idle_workers
  std::vector<scaling::Measurement> measurements;  // one per measured K
  std::vector<uint64_t> job_ids;
  int64_t parameter_count = 0;   // 0 = could not be read (parameter_note says why)
  std::string parameter_note;
  ProbeRun probe;
};

// Validates the options (InvalidArgument naming the flag: empty or
// non-ascending K list, K < 1, steps <= 0, repeats < 1, strong scaling with a
// global batch below the largest K), lists the idle workers, skips the K
// above them (FailedPrecondition when none is left), runs every job and
// returns the measurements. A job that does not SUCCEED ends the run with
// an error naming K, the job and its reason; one still running at its
// deadline is cancelled (DeadlineExceeded). `progress` gets a line per job.
absl::StatusOr<ScaleRun> RunScale(ScaleBackend* backend, const ScaleOptions& options,
                                  const std::function<void(const std::string&)>& progress);

// The measurement of a finished job: its examples/s and the mean over its
// ranks of each per-rank median (ranks that reported no timing left out;
// has_timing false when none did).
scaling::Measurement MeasurementFromStatus(int k, const v1::JobStatus& status);

// Field-wise median of several runs of one K (the middle two averaged for
// an even count).
scaling::Measurement MedianMeasurement(const std::vector<scaling::Measurement>& runs);

struct ModelOptions {
  v1::SyncMode mode = v1::RING;    // of the measured job
  int ps_shards = 1;               // of the measured job (ps mode)
  int64_t parameter_count = 0;     // 0: the model is not fitted
  // Bytes a gradient value takes on the wire: 4, or 2 with bf16 / fp16
  // compression (spec.compression; wire_format.h WireBytesPerFloat). The
  // fit and the predictions count parameter_count x this many bytes.
  int bytes_per_value = 4;
  scaling::Link link;
  std::vector<int> extrapolate;    // K to predict
  int max_ps_shards = 64;          // ps shard counts tried: 1, 2, 4, ... <= this
  // This host and its CPUs (0 = unknown): a K whose busiest host is this
  // one with more workers than CPUs measured CPU sharing, and is left out
  // of the fit (report->notes says so) unless nothing else is left.
  std::string local_host;
  int local_cpus = 0;
  // ScaleRun::probe: a second gradient size for the fit (used when it
  // reported timing and its parameter count is known; notes say so).
  ProbeRun probe;
};

// "auto" -> the probe model for a job's model: "softmax" for an mlp (one
// layer, ~1/26 of mlp:256's gradient on 784 features), "mlp:256" for
// softmax, "" for linear and logistic (no model of the same task with a
// different size: name one); "none" or "" -> ""; anything else as given.
std::string ProbeModelFor(const std::string& flag, const std::string& job_model);

// Fits alpha and beta to report->rows (each row above the smallest K, and
// in ps mode the smallest K too: a ps at K = 1 still communicates) and
// extrapolates. The fit explains each row's transfer time
// (scaling::TransferSeconds: reported communication minus peer wait, or
// the step time's growth when the workers reported no breakdown). The
// workload: compute per step of the smallest K's row (its wall time per
// step, global batch / examples/s, minus its reported exposed
// communication, at least half the wall time; times K0 for strong scaling),
// batch at K = 1, 4 bytes per parameter, and the median share of
// communication that was exposed (1 without a breakdown). The probe (when
// it has timing and a parameter count) is one more sample: its
// communication minus peer wait, at its own gradient size, under the same
// crowding rule. Sets has_model, or model_note saying why not.
void AddModel(ScaleReport* report, const ModelOptions& options);

// "1,2,4,8" -> {1, 2, 4, 8}; InvalidArgument naming `flag` for anything
// that is not a comma-separated list of positive integers.
absl::StatusOr<std::vector<int>> ParseKList(const std::string& text, const std::string& flag);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_SCALE_RUNNER_H_
