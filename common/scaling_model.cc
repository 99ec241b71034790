#include "common/scaling_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace scaling {

double PerWorkerEfficiency(double compute_seconds, double exposed_seconds) {
  if (compute_seconds < 0 || exposed_seconds < 0) return 0;
  const double total = compute_seconds + exposed_seconds;
  return total > 0 ? compute_seconds / total : 1;
}

double ClusterThroughput(int k, double per_worker, double efficiency) {
  return static_cast<double>(k) * per_worker * efficiency;
}

ModelTerms Terms(int k, int shards, double bytes) {
  ModelTerms t;
  if (k < 1) return t;
  if (shards <= 0) {  // ring
    t.alpha_coef = 2.0 * (k - 1);
    t.beta_coef = 2.0 * (k - 1) / k * bytes;
  } else {
    t.alpha_coef = 2.0;
    t.beta_coef = 2.0 * std::max(1.0, static_cast<double>(k) / shards) * bytes;
  }
  return t;
}

double RingAllReduceSeconds(int k, double bytes, const AlphaBeta& ab) {
  const ModelTerms t = Terms(k, 0, bytes);
  return t.alpha_coef * ab.alpha + t.beta_coef * ab.beta;
}

double PsSeconds(int k, int shards, double bytes, const AlphaBeta& ab) {
  const ModelTerms t = Terms(k, std::max(1, shards), bytes);
  return t.alpha_coef * ab.alpha + t.beta_coef * ab.beta;
}

namespace {

struct Point {
  double a, b, y;
};

double Rms(const std::vector<Point>& pts, const AlphaBeta& ab) {
  double ss = 0;
  for (const Point& p : pts) {
    const double r = p.a * ab.alpha + p.b * ab.beta - p.y;
    ss += r * r;
  }
  return pts.empty() ? 0 : std::sqrt(ss / pts.size());
}

}  // namespace

absl::StatusOr<AlphaBetaFit> FitAlphaBeta(const std::vector<CommSample>& samples) {
  std::vector<Point> pts;
  for (size_t i = 0; i < samples.size(); ++i) {
    const CommSample& s = samples[i];
    if (s.k < 1 || s.shards < 0 || !(s.bytes >= 0) || !(s.seconds >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "communication sample ", i, ": expected K >= 1, shards >= 0, bytes >= 0 and seconds "
          ">= 0, got K=", s.k, " shards=", s.shards, " bytes=", s.bytes, " seconds=", s.seconds));
    }
    const ModelTerms t = Terms(s.k, s.shards, s.bytes);
    if (t.alpha_coef == 0 && t.beta_coef == 0) continue;
    pts.push_back({t.alpha_coef, t.beta_coef, s.seconds});
  }
  if (pts.empty()) {
    return absl::FailedPreconditionError(
        "no communication was measured (a ring at K = 1 does not communicate): measure at "
        "least one K > 1 to fit alpha and beta");
  }
  double saa = 0, sab = 0, sbb = 0, say = 0, sby = 0;
  for (const Point& p : pts) {
    saa += p.a * p.a;
    sab += p.a * p.b;
    sbb += p.b * p.b;
    say += p.a * p.y;
    sby += p.b * p.y;
  }
  AlphaBetaFit fit;
  fit.points = static_cast<int>(pts.size());
  // One-parameter fits through the origin.
  AlphaBeta alpha_only{saa > 0 ? std::max(0.0, say / saa) : 0, 0};
  AlphaBeta beta_only{0, sbb > 0 ? std::max(0.0, sby / sbb) : 0};
  const double det = saa * sbb - sab * sab;
  // Separable when the columns are not (nearly) parallel.
  const bool separable = det > 1e-9 * saa * sbb;
  if (!separable) {
    fit.ab = sbb > 0 ? beta_only : alpha_only;
    fit.note = sbb > 0 ? "alpha and beta not separable from these points: alpha taken as 0"
                       : "no bytes moved: beta taken as 0";
  } else {
    AlphaBeta full{(say * sbb - sby * sab) / det, (sby * saa - say * sab) / det};
    if (full.alpha >= 0 && full.beta >= 0) {
      fit.ab = full;
    } else {
      const bool alpha_better = Rms(pts, alpha_only) < Rms(pts, beta_only);
      fit.ab = alpha_better ? alpha_only : beta_only;
      fit.note = alpha_better ? "least squares gave beta < 0: beta taken as 0"
                              : "least squares gave alpha < 0: alpha taken as 0";
    }
  }
  fit.rms_residual = Rms(pts, fit.ab);
  return fit;
}

AlphaBeta WithLink(const AlphaBeta& fitted, const Link& link) {
  AlphaBeta ab = fitted;
  ab.alpha += link.latency_seconds;
  if (link.bandwidth_bytes_per_second > 0) ab.beta += 1.0 / link.bandwidth_bytes_per_second;
  return ab;
}

absl::StatusOr<std::vector<Prediction>> Extrapolate(const Workload& w, const AlphaBeta& ab,
                                                    const std::vector<int>& ks, int max_shards) {
  if (!(w.compute_seconds > 0) || w.batch <= 0 || !(w.bytes > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workload: expected compute time > 0, batch > 0 and gradient bytes > 0, got ",
        w.compute_seconds, " s, batch ", w.batch, ", ", w.bytes, " bytes"));
  }
  if (max_shards < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max ps shards: expected >= 1, got ", max_shards));
  }
  const double exposed = std::clamp(w.exposed_fraction, 0.0, 1.0);
  std::vector<Prediction> out;
  for (int k : ks) {
    if (k < 1) return absl::InvalidArgumentError(absl::StrCat("K: expected >= 1, got ", k));
    Prediction p;
    p.k = k;
    p.compute_seconds = w.weak ? w.compute_seconds : w.compute_seconds / k;
    p.ring_seconds = RingAllReduceSeconds(k, w.bytes, ab);
    p.ps1_seconds = PsSeconds(k, 1, w.bytes, ab);
    p.best_shards = 1;
    p.best_ps_seconds = p.ps1_seconds;
    for (int s = 2; s <= max_shards; s *= 2) {
      const double t = PsSeconds(k, s, w.bytes, ab);
      if (t < p.best_ps_seconds) {
        p.best_ps_seconds = t;
        p.best_shards = s;
      }
    }
    const bool ring = p.ring_seconds <= p.best_ps_seconds;
    p.pick = ring ? "ring" : absl::StrCat("ps S=", p.best_shards);
    p.comm_seconds = ring ? p.ring_seconds : p.best_ps_seconds;
    const double exposed_s = exposed * p.comm_seconds;
    p.efficiency = PerWorkerEfficiency(p.compute_seconds, exposed_s);
    p.ring_efficiency = PerWorkerEfficiency(p.compute_seconds, exposed * p.ring_seconds);
    p.ps_efficiency = PerWorkerEfficiency(p.compute_seconds, exposed * p.best_ps_seconds);
    const double global_batch = w.weak ? static_cast<double>(w.batch) * k : w.batch;
    p.examples_per_second = global_batch / (p.compute_seconds + exposed_s);
    p.ideal_examples_per_second = static_cast<double>(k) * w.batch / w.compute_seconds;
    out.push_back(p);
  }
  return out;
}

std::vector<Row> Summarize(std::vector<Measurement> measured) {
  std::sort(measured.begin(), measured.end(),
            [](const Measurement& a, const Measurement& b) { return a.k < b.k; });
  std::vector<Row> rows;
  if (measured.empty()) return rows;
  const Measurement& base = measured.front();
  const double per_k = base.k > 0 ? base.examples_per_second / base.k : 0;
  for (const Measurement& m : measured) {
    Row r;
    r.m = m;
    r.ideal_examples_per_second = per_k * m.k;
    r.speedup = base.examples_per_second > 0
                    ? m.examples_per_second / base.examples_per_second * base.k
                    : 0;
    r.efficiency = r.ideal_examples_per_second > 0
                       ? m.examples_per_second / r.ideal_examples_per_second
                       : 0;
    rows.push_back(r);
  }
  return rows;
}

int FirstKBelow(const std::vector<Row>& rows, double threshold) {
  for (const Row& r : rows) {
    if (r.efficiency < threshold) return r.m.k;
  }
  return 0;
}

namespace {

double StepSeconds(const Measurement& m) {
  if (m.has_timing && m.step_seconds > 0) return m.step_seconds;
  return m.examples_per_second > 0 ? static_cast<double>(m.global_batch) / m.examples_per_second
                                   : 0;
}

}  // namespace

CommEstimate TransferSeconds(const Row& row, const Row& base, bool weak) {
  CommEstimate e;
  if (row.m.has_timing) {
    e.seconds = std::max(0.0, row.m.communication_seconds - row.m.peer_wait_seconds);
    return e;
  }
  e.inferred = true;
  const double t = StepSeconds(row.m);
  const double t0 = StepSeconds(base.m);
  const double expected = weak ? t0 : t0 * base.m.k / std::max(1, row.m.k);
  e.seconds = std::max(0.0, t - expected);
  return e;
}

}  // namespace scaling
}  // namespace lockstep
