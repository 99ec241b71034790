// What `lockstep scale` writes: the measured rows as CSV, the model's
// extrapolation as CSV, a self-contained SVG figure and the text table.
// Pure formatting (no gRPC, no clock); the caller supplies every figure.
#ifndef LOCKSTEP_CLIENT_SCALE_REPORT_H_
#define LOCKSTEP_CLIENT_SCALE_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/scaling_model.h"

namespace lockstep {

struct ScaleReport {
  std::string title;           // the job: model, data, mode, batch, steps
  std::string date;            // when measured (shown in the figure)
  bool weak = true;
  double threshold = 0.8;
  std::vector<scaling::Row> rows;    // sorted by K
  std::vector<int> skipped;          // K beyond the idle workers
  int first_below = 0;               // scaling::FirstKBelow, 0 = none
  // The model (has_model false: not fitted, model_note says why).
  bool has_model = false;
  std::string model_note;
  scaling::AlphaBetaFit fit;
  bool fit_inferred = false;         // fitted to step-time growth, not reported comm time
  std::string link;                  // e.g. "10 Gbit/s, 50 us"
  scaling::AlphaBeta link_ab;        // scaling::WithLink(fit.ab, link)
  double exposed_fraction = 1;       // the workload's, as extrapolated
  double gradient_bytes = 0;
  std::vector<scaling::Prediction> predictions;
  std::vector<std::string> notes;    // printed under the table and the figure
  // The alpha probe (scale_runner.h ProbeRun): "" = none ran.
  std::string probe_model;
  int probe_k = 0;
  double probe_bytes = 0;              // its gradient on the wire
  double probe_transfer_seconds = 0;   // communication - peer wait per step
  bool probe_used = false;             // one of the fit's samples
};

// Header: k,global_batch,examples_per_s,ideal_examples_per_s,efficiency,
// speedup,step_ms,compute_ms,communication_ms,exposed_ms,peer_wait_ms,timing,
// workers_per_host (the most ranks on one host)
// then one row per K; timing is "reported" or "none" (the workers sent no
// breakdown: the ms columns are 0 except step_ms = global batch / examples/s).
std::string ScaleCsv(const std::vector<scaling::Row>& rows);

// Header: k,compute_ms,ring_ms,ps1_ms,best_ps_shards,best_ps_ms,pick,
// comm_ms,efficiency,examples_per_s,ideal_examples_per_s
std::string ModelCsv(const std::vector<scaling::Prediction>& predictions);

// The figure: throughput against the ideal line, efficiency per K with the
// threshold and the first K below it marked, the per-step time breakdown
// (compute / exposed transfer / peer wait / other) as stacked bars, and the
// model's extrapolated efficiency (ring and ps) when fitted.
std::string ScaleSvg(const ScaleReport& report);

// The table and summary lines printed on stdout.
std::string ScaleTable(const ScaleReport& report);

// The same report as one JSON object (`lockstep scale --json`, printed on
// stdout instead of the table): title, date, scaling ("weak"/"strong"),
// threshold, first_k_below (0 = none), skipped, rows (the CSV's columns,
// times in ms), model ({"fitted": false, "note"} or the fit: alpha_s,
// beta_s_per_byte, points, rms_residual_s, inferred, note, link, link_alpha_s,
// link_beta_s_per_byte, gradient_bytes, exposed_fraction, predictions with
// the model CSV's columns), probe (null, or model, k, bytes, transfer_ms,
// used), notes and `files` (the paths written). A non-finite figure is null.
std::string ScaleJson(const ScaleReport& report, const std::vector<std::string>& files);

// Writes `text` to `path`; errors name the file.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_SCALE_REPORT_H_
