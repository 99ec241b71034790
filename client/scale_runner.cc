#include "client/scale_runner.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace lockstep {
namespace {

bool Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Submits one run and waits for it to end.
absl::StatusOr<v1::JobStatus> RunOne(ScaleBackend* backend, const v1::JobSpec& spec,
                                     const ScaleOptions& options, uint64_t* id_out) {
  const int k = spec.num_workers();
  absl::StatusOr<uint64_t> id = backend->Submit(spec);
  if (!id.ok()) {
    return absl::Status(id.status().code(),
                        absl::StrCat("K=", k, ": submit: ", id.status().message()));
  }
  *id_out = *id;
  const absl::Time deadline = backend->Now() + options.job_timeout;
  while (true) {
    absl::StatusOr<v1::JobStatus> st = backend->Get(*id);
    if (!st.ok()) {
      return absl::Status(st.status().code(), absl::StrCat("K=", k, ": job ", *id, ": ",
                                                           st.status().message()));
    }
    if (Terminal(st->state())) {
      if (st->state() != v1::SUCCEEDED) {
        return absl::AbortedError(absl::StrCat("K=", k, ": job ", *id, " ",
                                               v1::JobState_Name(st->state()),
                                               st->reason().empty() ? "" : ": ", st->reason()));
      }
      return st;
    }
    if (backend->Now() >= deadline) {
      (void)backend->Cancel(*id);
      return absl::DeadlineExceededError(absl::StrCat(
          "K=", k, ": job ", *id, " still ", v1::JobState_Name(st->state()), " at step ",
          st->step(), " after ", absl::FormatDuration(options.job_timeout),
          " (--job_timeout_s); cancelled it"));
    }
    backend->Sleep(options.poll);
  }
}

// The base job at K workers: its global batch by the scaling mode.
v1::JobSpec SpecAt(const ScaleOptions& options, int k) {
  v1::JobSpec spec = options.base;
  spec.set_num_workers(k);
  spec.set_global_batch(options.weak ? options.base.global_batch() * k
                                     : options.base.global_batch());
  return spec;
}

// A finished job's parameter count, or why it is unknown ("no weights" or
// the call's error).
absl::StatusOr<int64_t> ParameterCountOf(ScaleBackend* backend, uint64_t id) {
  absl::StatusOr<int64_t> n = backend->ParameterCount(id);
  if (n.ok() && *n > 0) return n;
  return absl::NotFoundError(n.ok() ? std::string("no weights") : std::string(n.status().message()));
}

// A measurement with more workers on this host than it has CPUs: its time
// measures CPU sharing (ModelOptions::local_host).
bool CrowdedThisHost(const ModelOptions& o, const scaling::Measurement& m) {
  return o.local_cpus > 0 && !o.local_host.empty() && m.busiest_host == o.local_host &&
         m.max_workers_per_host > o.local_cpus;
}

// The probe's sample, appended to *samples when usable; a note either way.
// `crowded_fit`: the job's samples are themselves from crowded K (nothing
// else was measured), so a crowded probe is as good as they are.
void AddProbeSample(const ModelOptions& o, double job_bytes, int shards, bool crowded_fit,
                    std::vector<scaling::CommSample>* samples, ScaleReport* report) {
  const ProbeRun& p = o.probe;
  std::vector<std::string>* notes = &report->notes;
  if (!p.note.empty()) notes->push_back(p.note);
  if (p.model.empty() || p.parameter_count <= 0) return;
  const double bytes = static_cast<double>(o.bytes_per_value) * p.parameter_count;
  const double seconds = std::max(0.0, p.m.communication_seconds - p.m.peer_wait_seconds);
  report->probe_model = p.model;
  report->probe_k = p.k;
  report->probe_bytes = bytes;
  report->probe_transfer_seconds = seconds;
  const std::string what = absl::StrFormat("alpha probe: %s (%d parameters, %.1f KB) at K=%d",
                                           p.model, p.parameter_count, bytes / 1e3, p.k);
  if (!p.m.has_timing) {
    notes->push_back(absl::StrCat(what, ": the workers reported no timing; not used"));
    return;
  }
  if (bytes == job_bytes) {
    notes->push_back(absl::StrCat(what, ": the same gradient size as the job; not used"));
    return;
  }
  if (samples->empty()) {
    notes->push_back(absl::StrCat(what, ": no measured K of the job itself is in the fit; not "
                                        "used (a second size, not a substitute)"));
    return;
  }
  if (CrowdedThisHost(o, p.m) && !crowded_fit) {
    notes->push_back(absl::StrFormat("%s ran more workers on %s than its %d CPUs; not used", what,
                                     o.local_host, o.local_cpus));
    return;
  }
  samples->push_back(scaling::CommSample{p.k, shards, bytes, seconds});
  report->probe_used = true;
  notes->push_back(absl::StrFormat("%s: %.3f ms transfer per step (communication %.3f - peer "
                                   "wait %.3f), in the fit",
                                   what, seconds * 1e3, p.m.communication_seconds * 1e3,
                                   p.m.peer_wait_seconds * 1e3));
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseKList(const std::string& text, const std::string& flag) {
  std::vector<int> ks;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int k = 0;
    if (!absl::SimpleAtoi(part, &k) || k < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": expected comma-separated positive integers, got \"", text, "\""));
    }
    ks.push_back(k);
  }
  return ks;
}

scaling::Measurement MeasurementFromStatus(int k, const v1::JobStatus& status) {
  scaling::Measurement m;
  m.k = k;
  m.global_batch = status.spec().global_batch();
  m.examples_per_second = status.examples_per_second();
  std::map<std::string, int> per_host;
  for (const v1::RankStatus& r : status.ranks()) {
    const int c = ++per_host[r.hostname()];
    if (c > m.max_workers_per_host) {
      m.max_workers_per_host = c;
      m.busiest_host = r.hostname();
    }
  }
  int n = 0;
  for (const v1::RankStatus& r : status.ranks()) {
    if (!(r.median_step_seconds() > 0)) continue;
    ++n;
    m.step_seconds += r.median_step_seconds();
    m.compute_seconds += r.median_compute_seconds();
    m.communication_seconds += r.median_communication_seconds();
    m.exposed_seconds += r.median_exposed_seconds();
    m.peer_wait_seconds += r.median_peer_wait_seconds();
  }
  if (n > 0) {
    m.has_timing = true;
    m.step_seconds /= n;
    m.compute_seconds /= n;
    m.communication_seconds /= n;
    m.exposed_seconds /= n;
    m.peer_wait_seconds /= n;
  }
  return m;
}

scaling::Measurement MedianMeasurement(const std::vector<scaling::Measurement>& runs) {
  scaling::Measurement m;
  if (runs.empty()) return m;
  m.k = runs.front().k;
  m.global_batch = runs.front().global_batch;
  m.max_workers_per_host = runs.front().max_workers_per_host;
  m.busiest_host = runs.front().busiest_host;
  auto med = [&](double scaling::Measurement::*field, bool timed_only) {
    std::vector<double> v;
    for (const scaling::Measurement& r : runs) {
      if (!timed_only || r.has_timing) v.push_back(r.*field);
    }
    return Median(v);
  };
  m.examples_per_second = med(&scaling::Measurement::examples_per_second, false);
  m.has_timing = std::any_of(runs.begin(), runs.end(),
                             [](const scaling::Measurement& r) { return r.has_timing; });
  if (m.has_timing) {
    m.step_seconds = med(&scaling::Measurement::step_seconds, true);
    m.compute_seconds = med(&scaling::Measurement::compute_seconds, true);
    m.communication_seconds = med(&scaling::Measurement::communication_seconds, true);
    m.exposed_seconds = med(&scaling::Measurement::exposed_seconds, true);
    m.peer_wait_seconds = med(&scaling::Measurement::peer_wait_seconds, true);
  }
  return m;
}

absl::StatusOr<ScaleRun> RunScale(ScaleBackend* backend, const ScaleOptions& options,
                                  const std::function<void(const std::string&)>& progress) {
  if (options.ks.empty()) {
    return absl::InvalidArgumentError("--workers_list: expected at least one K");
  }
  for (size_t i = 0; i < options.ks.size(); ++i) {
    if (options.ks[i] < 1 || (i > 0 && options.ks[i] <= options.ks[i - 1])) {
      return absl::InvalidArgumentError(
          "--workers_list: expected distinct positive K in ascending order, e.g. 1,2,4,8");
    }
  }
  if (options.base.steps() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--steps: expected a fixed number of steps per run (> 0), got ", options.base.steps()));
  }
  if (options.repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repeats: expected >= 1, got ", options.repeats));
  }
  const int64_t batch = options.base.global_batch();
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch: expected >= 1, got ", batch));
  }
  if (!options.weak && batch < options.ks.back()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--batch=%d: strong scaling splits one global batch over K=%d workers; expected "
        "--batch >= %d",
        batch, options.ks.back(), options.ks.back()));
  }
  ScaleRun run;
  absl::StatusOr<int> idle = backend->IdleWorkers();
  if (!idle.ok()) {
    return absl::Status(idle.status().code(),
                        absl::StrCat("listing workers: ", idle.status().message()));
  }
  run.idle_workers = *idle;
  for (int k : options.ks) (k <= *idle ? run.measured_ks : run.skipped).push_back(k);
  if (run.measured_ks.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--workers_list: the coordinator lists ", *idle, " idle worker(s), fewer than the "
        "smallest K (", options.ks.front(), ")"));
  }
  std::vector<std::vector<scaling::Measurement>> runs(run.measured_ks.size());
  std::vector<scaling::Measurement> probe_runs;
  int probe_k = 0;
  if (!options.probe_model.empty()) {
    // The fit's rows (AddModel): every K above the smallest in a ring, every
    // K in ps. The probe runs at the smallest of them.
    const bool ps = options.base.sync_mode() == v1::PS;
    if (ps) {
      probe_k = run.measured_ks.front();
    } else if (run.measured_ks.size() > 1) {
      probe_k = run.measured_ks[1];
    } else {
      run.probe.note = absl::StrCat(
          "no alpha probe: only K=", run.measured_ks.front(),
          " measured (a ring's fit uses the K above the smallest)");
    }
  }
  for (int rep = 0; rep < options.repeats; ++rep) {
    for (size_t i = 0; i < run.measured_ks.size(); ++i) {
      const int k = run.measured_ks[i];
      v1::JobSpec spec = SpecAt(options, k);
      if (spec.name().empty()) {
        spec.set_name(absl::StrCat("scale ", options.weak ? "weak" : "strong", " K=", k));
      }
      uint64_t id = 0;
      absl::StatusOr<v1::JobStatus> st = RunOne(backend, spec, options, &id);
      if (!st.ok()) return st.status();
      run.job_ids.push_back(id);
      runs[i].push_back(MeasurementFromStatus(k, *st));
      if (progress) {
        progress(absl::StrFormat("K=%d run %d/%d: job %d, batch %d, %d steps, %.0f examples/s", k,
                                 rep + 1, options.repeats, id, spec.global_batch(), st->step(),
                                 st->examples_per_second()));
      }
      if (run.parameter_count == 0 && run.parameter_note.empty()) {
        absl::StatusOr<int64_t> n = ParameterCountOf(backend, id);
        if (n.ok()) {
          run.parameter_count = *n;
        } else {
          run.parameter_note =
              absl::StrCat("parameter count of job ", id, " unknown: ", n.status().message());
        }
      }
    }
    if (probe_k > 0) {
      v1::JobSpec spec = SpecAt(options, probe_k);
      spec.set_model(options.probe_model);
      spec.set_name(absl::StrCat("scale alpha probe K=", probe_k, " ", options.probe_model));
      uint64_t id = 0;
      absl::StatusOr<v1::JobStatus> st = RunOne(backend, spec, options, &id);
      if (!st.ok()) {
        return absl::Status(st.status().code(), absl::StrCat("alpha probe (--alpha_probe_model=",
                                                             options.probe_model, "): ",
                                                             st.status().message()));
      }
      run.probe.job_ids.push_back(id);
      probe_runs.push_back(MeasurementFromStatus(probe_k, *st));
      if (progress) {
        progress(absl::StrFormat("alpha probe %s K=%d run %d/%d: job %d, %.0f examples/s",
                                 options.probe_model, probe_k, rep + 1, options.repeats, id,
                                 st->examples_per_second()));
      }
      if (run.probe.parameter_count == 0 && run.probe.note.empty()) {
        absl::StatusOr<int64_t> n = ParameterCountOf(backend, id);
        if (n.ok()) {
          run.probe.parameter_count = *n;
        } else {
          run.probe.note = absl::StrCat("alpha probe job ", id, ": parameter count unknown (",
                                        n.status().message(), "): not used");
        }
      }
    }
  }
  for (const auto& r : runs) run.measurements.push_back(MedianMeasurement(r));
  if (probe_k > 0) {
    run.probe.model = options.probe_model;
    run.probe.k = probe_k;
    run.probe.m = MedianMeasurement(probe_runs);
  }
  return run;
}

std::string ProbeModelFor(const std::string& flag, const std::string& job_model) {
  if (flag == "none" || flag.empty()) return "";
  if (flag != "auto") return flag;
  if (absl::StartsWith(job_model, "mlp:")) return "softmax";
  if (job_model == "softmax") return "mlp:256";
  return "";
}

void AddModel(ScaleReport* report, const ModelOptions& o) {
  report->has_model = false;
  if (report->rows.empty()) {
    report->model_note = "no K measured";
    return;
  }
  if (o.parameter_count <= 0) {
    report->model_note = "the job's parameter count is unknown";
    return;
  }
  if (o.bytes_per_value != 4 && o.bytes_per_value != 2) {
    report->model_note = absl::StrCat("bytes per gradient value: expected 4 or 2, got ",
                                      o.bytes_per_value);
    return;
  }
  const double gradient_bytes = static_cast<double>(o.bytes_per_value) * o.parameter_count;
  const bool ps = o.mode == v1::PS;
  const int shards = ps ? std::max(1, o.ps_shards) : 0;
  const scaling::Row& base = report->rows.front();
  std::vector<scaling::CommSample> samples, crowded;
  std::vector<int> crowded_ks;
  std::vector<double> exposed_share;
  bool inferred = false;
  for (const scaling::Row& row : report->rows) {
    const bool is_base = &row == &base;
    if (is_base && !(ps && row.m.has_timing)) continue;
    const scaling::CommEstimate e = scaling::TransferSeconds(row, base, report->weak);
    const scaling::CommSample sample{row.m.k, shards, gradient_bytes, e.seconds};
    if (CrowdedThisHost(o, row.m)) {
      crowded.push_back(sample);
      crowded_ks.push_back(row.m.k);
      continue;
    }
    inferred = inferred || e.inferred;
    samples.push_back(sample);
    if (row.m.has_timing && row.m.communication_seconds > 0) {
      exposed_share.push_back(std::min(1.0, row.m.exposed_seconds / row.m.communication_seconds));
    }
  }
  bool kept_crowded = false;
  if (!crowded.empty()) {
    const bool keep = samples.empty();
    kept_crowded = keep;
    report->notes.push_back(absl::StrFormat(
        "K=%s ran more workers on %s than its %d CPUs: %s", absl::StrJoin(crowded_ks, ","),
        o.local_host, o.local_cpus,
        keep ? "no other K to fit, so the fit includes CPU sharing"
             : "left out of the fit (the step time there measures CPU sharing, not the network)"));
    if (keep) {
      samples = crowded;
      for (const scaling::Row& row : report->rows) inferred = inferred || !row.m.has_timing;
    }
  }
  AddProbeSample(o, gradient_bytes, shards, kept_crowded, &samples, report);
  absl::StatusOr<scaling::AlphaBetaFit> fit = scaling::FitAlphaBeta(samples);
  if (!fit.ok()) {
    report->model_note = std::string(fit.status().message());
    return;
  }
  scaling::Workload w;
  w.weak = report->weak;
  w.bytes = gradient_bytes;
  // Everything in the smallest K's wall time per step but its exposed
  // communication: the model then reproduces that K's measured examples/s.
  const double base_wall =
      base.m.examples_per_second > 0 ? base.m.global_batch / base.m.examples_per_second : 0;
  const double base_compute =
      base.m.has_timing ? std::max(0.5 * base_wall, base_wall - base.m.exposed_seconds)
                        : base_wall;
  w.compute_seconds = report->weak ? base_compute : base_compute * base.m.k;
  w.batch = report->weak ? base.m.global_batch / std::max(1, base.m.k) : base.m.global_batch;
  w.exposed_fraction = exposed_share.empty() ? 1.0 : Median(exposed_share);
  const scaling::AlphaBeta ab = scaling::WithLink(fit->ab, o.link);
  absl::StatusOr<std::vector<scaling::Prediction>> pred =
      scaling::Extrapolate(w, ab, o.extrapolate, o.max_ps_shards);
  if (!pred.ok()) {
    report->model_note = std::string(pred.status().message());
    return;
  }
  report->has_model = true;
  report->fit = *fit;
  report->fit_inferred = inferred;
  report->link_ab = ab;
  report->gradient_bytes = w.bytes;
  report->exposed_fraction = w.exposed_fraction;
  report->predictions = *std::move(pred);
}

}  // namespace lockstep
