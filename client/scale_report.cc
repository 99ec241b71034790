#include "client/scale_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/json.h"

namespace lockstep {
namespace {

using scaling::Prediction;
using scaling::Row;

double Ms(double seconds) { return seconds * 1e3; }

// Wall time per step: global batch / examples/s (the throughput's own
// step time, which the rank medians need not add up to).
double StepMs(const scaling::Measurement& m) {
  return m.examples_per_second > 0 ? Ms(m.global_batch / m.examples_per_second) : 0;
}

// The stacked parts of a step's wall time: the ranks' median compute,
// exposed transfer (exposed minus the peer wait inside it) and peer wait,
// and the rest of the wall time (service, scheduling, slower-than-median
// steps).
struct Parts {
  double compute = 0, transfer = 0, wait = 0, other = 0;
};

Parts StepParts(const scaling::Measurement& m) {
  Parts p;
  const double step = StepMs(m);
  if (!m.has_timing) {
    p.other = step;
    return p;
  }
  p.compute = Ms(m.compute_seconds);
  p.wait = std::min(Ms(m.peer_wait_seconds), Ms(m.exposed_seconds));
  p.transfer = std::max(0.0, Ms(m.exposed_seconds) - p.wait);
  p.other = std::max(0.0, step - p.compute - p.transfer - p.wait);
  return p;
}

std::string Escape(const std::string& s) {
  return absl::StrReplaceAll(s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// A nice tick step (1, 2 or 5 x 10^n) giving about `n` ticks up to `max`.
double TickStep(double max, int n) {
  if (!(max > 0)) return 1;
  const double raw = max / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= f * mag) return f * mag;
  }
  return 10 * mag;
}

std::string Num(double v) {
  if (std::fabs(v) >= 1e4) return absl::StrFormat("%gk", v / 1000);
  if (v != 0 && std::fabs(v) < 1e-2) return absl::StrFormat("%.3g", v);
  if (std::fabs(v - std::round(v)) < 1e-9) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.2f", v);
}

// One panel: a plot area at (x0, y0) of w x h pixels with a y axis from 0
// to ymax and an x axis over log2 K (or categories).
class Panel {
 public:
  Panel(std::string* out, double x0, double y0, double w, double h)
      : out_(out), x0_(x0), y0_(y0), w_(w), h_(h) {}

  // `pad`: pixels kept free at either end (room for a bar).
  void SetX(double lo, double hi, double pad = 20) {
    xlo_ = lo;
    xhi_ = hi;
    pad_ = pad;
  }
  void SetY(double ymax) { ymax_ = ymax > 0 ? ymax : 1; }
  double X(double v) const {
    if (xhi_ <= xlo_) return x0_ + w_ / 2;
    return x0_ + pad_ + (v - xlo_) / (xhi_ - xlo_) * (w_ - 2 * pad_);
  }
  double Y(double v) const { return y0_ + h_ - std::clamp(v / ymax_, 0.0, 1.05) * h_; }
  double Bottom() const { return y0_ + h_; }

  void Frame(const std::string& title, const std::string& ylabel) {
    absl::StrAppendFormat(out_, "<g class=\"panel\">\n");
    absl::StrAppendFormat(out_,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
                          x0_, y0_ - 12, Escape(title));
    absl::StrAppendFormat(out_,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                          "stroke=\"#999\"/>\n",
                          x0_, y0_, w_, h_);
    const double step = TickStep(ymax_, 5);
    for (double v = 0; v <= ymax_ * 1.0001; v += step) {
      absl::StrAppendFormat(out_,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n",
                            x0_, Y(v), x0_ + w_, Y(v), x0_ - 4, Y(v) + 3, Num(v));
    }
    absl::StrAppendFormat(out_,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                          "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
                          x0_ - 44, y0_ + h_ / 2, x0_ - 44, y0_ + h_ / 2, Escape(ylabel));
    absl::StrAppendFormat(out_,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">"
                          "workers K</text>\n",
                          x0_ + w_ / 2, y0_ + h_ + 30);
  }
  void XTick(double v, const std::string& label) {
    absl::StrAppendFormat(out_,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%s</text>\n",
                          X(v), Bottom() + 14, Escape(label));
  }
  void Polyline(const std::vector<std::pair<double, double>>& pts, const std::string& color,
                bool dashed, const std::string& cls) {
    if (pts.empty()) return;
    std::string p;
    for (const auto& [x, y] : pts) absl::StrAppendFormat(&p, "%.1f,%.1f ", X(x), Y(y));
    absl::StrAppendFormat(out_,
                          "<polyline class=\"%s\" points=\"%s\" fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"2\"%s/>\n",
                          cls, p, color, dashed ? " stroke-dasharray=\"6,4\"" : "");
    for (const auto& [x, y] : pts) {
      absl::StrAppendFormat(out_, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", X(x),
                            Y(y), color);
    }
  }
  void Text(double x, double y, const std::string& s, const std::string& color, int size = 10,
            const char* anchor = "start") {
    absl::StrAppendFormat(out_,
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" fill=\"%s\" "
                          "text-anchor=\"%s\">%s</text>\n",
                          x, y, size, color, anchor, Escape(s));
  }
  void Legend(int i, const std::string& color, const std::string& label, bool dashed = false) {
    const double x = x0_ + 8, y = y0_ + 14 + 14 * i;
    absl::StrAppendFormat(out_,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"3\"%s/>\n",
                          x, y - 4, x + 18, y - 4, color, dashed ? " stroke-dasharray=\"4,3\"" : "");
    Text(x + 22, y, label, "#333");
  }
  void Close() { absl::StrAppend(out_, "</g>\n"); }

  std::string* out_;
  double x0_, y0_, w_, h_;
  double xlo_ = 0, xhi_ = 1, ymax_ = 1, pad_ = 20;
};

const char* kBlue = "#1f77b4";
const char* kGray = "#888888";
const char* kOrange = "#ff7f0e";
const char* kRed = "#d62728";
const char* kGreen = "#2ca02c";
const char* kLight = "#c7c7c7";

double Log2(int k) { return std::log2(static_cast<double>(std::max(1, k))); }

void XAxisOverK(Panel* p, const std::vector<int>& ks) {
  if (ks.empty()) return;
  p->SetX(Log2(ks.front()), Log2(ks.back()));
  for (int k : ks) p->XTick(Log2(k), absl::StrCat(k));
}

}  // namespace

std::string ScaleCsv(const std::vector<Row>& rows) {
  std::string out =
      "k,global_batch,examples_per_s,ideal_examples_per_s,efficiency,speedup,step_ms,compute_ms,"
      "communication_ms,exposed_ms,peer_wait_ms,timing,workers_per_host,median_step_ms\n";
  for (const Row& r : rows) {
    const scaling::Measurement& m = r.m;
    absl::StrAppendFormat(&out, "%d,%d,%.1f,%.1f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s,%d,%.4f\n", m.k,
                          m.global_batch, m.examples_per_second, r.ideal_examples_per_second,
                          r.efficiency, r.speedup, StepMs(m), Ms(m.compute_seconds),
                          Ms(m.communication_seconds), Ms(m.exposed_seconds),
                          Ms(m.peer_wait_seconds), m.has_timing ? "reported" : "none",
                          m.max_workers_per_host, Ms(m.step_seconds));
  }
  return out;
}

std::string ModelCsv(const std::vector<Prediction>& predictions) {
  std::string out =
      "k,compute_ms,ring_ms,ps1_ms,best_ps_shards,best_ps_ms,pick,comm_ms,efficiency,"
      "examples_per_s,ideal_examples_per_s\n";
  for (const Prediction& p : predictions) {
    absl::StrAppendFormat(&out, "%d,%.4f,%.4f,%.4f,%d,%.4f,%s,%.4f,%.4f,%.1f,%.1f\n", p.k,
                          Ms(p.compute_seconds), Ms(p.ring_seconds), Ms(p.ps1_seconds),
                          p.best_shards, Ms(p.best_ps_seconds), p.pick, Ms(p.comm_seconds),
                          p.efficiency, p.examples_per_second, p.ideal_examples_per_second);
  }
  return out;
}

namespace {

// A JSON number, or null when not finite.
std::string JsonNum(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.10g", v) : "null";
}

std::string JsonStrings(const std::vector<std::string>& v) {
  std::vector<std::string> quoted;
  for (const std::string& s : v) quoted.push_back(JsonQuote(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ","), "]");
}

}  // namespace

std::string ScaleJson(const ScaleReport& r, const std::vector<std::string>& files) {
  std::string out = absl::StrCat(
      "{\"title\":", JsonQuote(r.title), ",\"date\":", JsonQuote(r.date),
      ",\"scaling\":", r.weak ? "\"weak\"" : "\"strong\"", ",\"threshold\":",
      JsonNum(r.threshold), ",\"first_k_below\":", r.first_below, ",\"skipped\":[",
      absl::StrJoin(r.skipped, ","), "],\"rows\":[");
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Row& row = r.rows[i];
    const scaling::Measurement& m = row.m;
    absl::StrAppend(
        &out, i ? "," : "", "{\"k\":", m.k, ",\"global_batch\":", m.global_batch,
        ",\"examples_per_s\":", JsonNum(m.examples_per_second),
        ",\"ideal_examples_per_s\":", JsonNum(row.ideal_examples_per_second),
        ",\"efficiency\":", JsonNum(row.efficiency), ",\"speedup\":", JsonNum(row.speedup),
        ",\"step_ms\":", JsonNum(StepMs(m)), ",\"compute_ms\":", JsonNum(Ms(m.compute_seconds)),
        ",\"communication_ms\":", JsonNum(Ms(m.communication_seconds)),
        ",\"exposed_ms\":", JsonNum(Ms(m.exposed_seconds)),
        ",\"peer_wait_ms\":", JsonNum(Ms(m.peer_wait_seconds)),
        ",\"timing\":", m.has_timing ? "\"reported\"" : "\"none\"",
        ",\"workers_per_host\":", m.max_workers_per_host,
        ",\"median_step_ms\":", JsonNum(Ms(m.step_seconds)), "}");
  }
  absl::StrAppend(&out, "],\"model\":");
  if (!r.has_model) {
    absl::StrAppend(&out, "{\"fitted\":false,\"note\":", JsonQuote(r.model_note), "}");
  } else {
    absl::StrAppend(
        &out, "{\"fitted\":true,\"alpha_s\":", JsonNum(r.fit.ab.alpha),
        ",\"beta_s_per_byte\":", JsonNum(r.fit.ab.beta), ",\"points\":", r.fit.points,
        ",\"rms_residual_s\":", JsonNum(r.fit.rms_residual),
        ",\"inferred\":", r.fit_inferred ? "true" : "false", ",\"note\":", JsonQuote(r.fit.note),
        ",\"link\":", JsonQuote(r.link), ",\"link_alpha_s\":", JsonNum(r.link_ab.alpha),
        ",\"link_beta_s_per_byte\":", JsonNum(r.link_ab.beta),
        ",\"gradient_bytes\":", JsonNum(r.gradient_bytes),
        ",\"exposed_fraction\":", JsonNum(r.exposed_fraction), ",\"predictions\":[");
    for (size_t i = 0; i < r.predictions.size(); ++i) {
      const Prediction& p = r.predictions[i];
      absl::StrAppend(
          &out, i ? "," : "", "{\"k\":", p.k, ",\"compute_ms\":", JsonNum(Ms(p.compute_seconds)),
          ",\"ring_ms\":", JsonNum(Ms(p.ring_seconds)), ",\"ps1_ms\":", JsonNum(Ms(p.ps1_seconds)),
          ",\"best_ps_shards\":", p.best_shards,
          ",\"best_ps_ms\":", JsonNum(Ms(p.best_ps_seconds)), ",\"pick\":", JsonQuote(p.pick),
          ",\"comm_ms\":", JsonNum(Ms(p.comm_seconds)), ",\"efficiency\":", JsonNum(p.efficiency),
          ",\"examples_per_s\":", JsonNum(p.examples_per_second),
          ",\"ideal_examples_per_s\":", JsonNum(p.ideal_examples_per_second), "}");
    }
    absl::StrAppend(&out, "]}");
  }
  absl::StrAppend(&out, ",\"probe\":");
  if (r.probe_model.empty()) {
    absl::StrAppend(&out, "null");
  } else {
    absl::StrAppend(&out, "{\"model\":", JsonQuote(r.probe_model), ",\"k\":", r.probe_k,
                    ",\"bytes\":", JsonNum(r.probe_bytes),
                    ",\"transfer_ms\":", JsonNum(Ms(r.probe_transfer_seconds)),
                    ",\"used\":", r.probe_used ? "true" : "false", "}");
  }
  absl::StrAppend(&out, ",\"notes\":", JsonStrings(r.notes), ",\"files\":", JsonStrings(files),
                  "}\n");
  return out;
}

std::string ScaleSvg(const ScaleReport& r) {
  const double W = 1000, H = 800;
  std::string out = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      W, H, W, H);
  absl::StrAppendFormat(&out, "<text x=\"20\" y=\"26\" font-size=\"16\" font-weight=\"bold\">%s</text>\n",
                        Escape(absl::StrCat("lockstep scale: ", r.title)));
  std::string sub = absl::StrCat(r.weak ? "weak" : "strong", " scaling, efficiency threshold ",
                                 Num(r.threshold));
  if (!r.date.empty()) absl::StrAppend(&sub, ", measured ", r.date);
  if (!r.skipped.empty()) {
    absl::StrAppend(&sub, "; skipped K=", absl::StrJoin(r.skipped, ","), " (too few idle workers)");
  }
  absl::StrAppendFormat(&out, "<text x=\"20\" y=\"46\" font-size=\"12\" fill=\"#444\">%s</text>\n",
                        Escape(sub));
  std::vector<int> ks;
  for (const Row& row : r.rows) ks.push_back(row.m.k);

  // 1. Throughput against the ideal line.
  {
    Panel p(&out, 80, 90, 380, 260);
    double ymax = 0;
    for (const Row& row : r.rows) {
      ymax = std::max({ymax, row.m.examples_per_second, row.ideal_examples_per_second});
    }
    p.SetY(ymax * 1.1);
    XAxisOverK(&p, ks);
    p.Frame("Throughput vs ideal linear scaling", "examples/s");
    std::vector<std::pair<double, double>> ideal, measured;
    for (const Row& row : r.rows) {
      ideal.push_back({Log2(row.m.k), row.ideal_examples_per_second});
      measured.push_back({Log2(row.m.k), row.m.examples_per_second});
    }
    p.Polyline(ideal, kGray, true, "ideal");
    p.Polyline(measured, kBlue, false, "measured");
    for (const Row& row : r.rows) {
      p.Text(p.X(Log2(row.m.k)) + 5, p.Y(row.m.examples_per_second) + 14,
             absl::StrFormat("%.0f", row.m.examples_per_second), kBlue);
    }
    p.Legend(0, kGray, "ideal: K x X(K0) / K0", true);
    p.Legend(1, kBlue, "measured");
    p.Close();
  }
  // 2. Efficiency per K, threshold and the first K below it.
  {
    Panel p(&out, 580, 90, 380, 260);
    double ymax = 1.1;
    for (const Row& row : r.rows) ymax = std::max(ymax, row.efficiency * 1.05);
    p.SetY(ymax);
    XAxisOverK(&p, ks);
    p.Frame("Scaling efficiency = measured / ideal", "efficiency");
    absl::StrAppendFormat(&out,
                          "<line class=\"threshold\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                          "stroke=\"%s\" stroke-dasharray=\"6,4\"/>\n",
                          p.x0_, p.Y(r.threshold), p.x0_ + p.w_, p.Y(r.threshold), kRed);
    p.Text(p.x0_ + p.w_ - 4, p.Y(r.threshold) - 4, absl::StrCat("threshold ", Num(r.threshold)),
           kRed, 10, "end");
    std::vector<std::pair<double, double>> eff;
    for (const Row& row : r.rows) eff.push_back({Log2(row.m.k), row.efficiency});
    p.Polyline(eff, kBlue, false, "efficiency");
    for (const Row& row : r.rows) {
      p.Text(p.X(Log2(row.m.k)) + 5, p.Y(row.efficiency) + 14,
             absl::StrFormat("%.2f", row.efficiency), kBlue);
    }
    if (r.first_below > 0) {
      for (const Row& row : r.rows) {
        if (row.m.k != r.first_below) continue;
        absl::StrAppendFormat(&out,
                              "<circle class=\"first-below\" cx=\"%.1f\" cy=\"%.1f\" r=\"9\" "
                              "fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                              p.X(Log2(row.m.k)), p.Y(row.efficiency), kRed);
      }
      p.Text(p.x0_ + 8, p.Bottom() - 8,
             absl::StrFormat("efficiency < %s from K=%d", Num(r.threshold), r.first_below), kRed,
             12);
    } else {
      p.Text(p.x0_ + 8, p.Bottom() - 8,
             absl::StrFormat("efficiency >= %s at every K measured", Num(r.threshold)), kGreen,
             12);
    }
    p.Close();
  }
  // 3. Where a step's time goes, stacked per K.
  {
    Panel p(&out, 80, 450, 380, 260);
    double ymax = 0;
    bool any_timing = false;
    for (const Row& row : r.rows) {
      const Parts parts = StepParts(row.m);
      ymax = std::max(ymax, parts.compute + parts.transfer + parts.wait + parts.other);
      any_timing = any_timing || row.m.has_timing;
    }
    p.SetY(ymax * 1.15);
    const int n = static_cast<int>(r.rows.size());
    const double bw = std::min(50.0, 240.0 / std::max(1, n));
    p.SetX(0, std::max(1, n - 1), bw);
    for (int i = 0; i < n; ++i) p.XTick(i, absl::StrCat(r.rows[i].m.k));
    p.Frame("Wall time per step = batch / examples/s", "ms per step");
    for (int i = 0; i < n; ++i) {
      const Parts parts = StepParts(r.rows[i].m);
      double base = 0;
      const std::pair<double, const char*> stack[] = {{parts.compute, kBlue},
                                                      {parts.transfer, kOrange},
                                                      {parts.wait, kRed},
                                                      {parts.other, kLight}};
      for (const auto& [v, color] : stack) {
        if (v <= 0) continue;
        absl::StrAppendFormat(&out,
                              "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                              "height=\"%.1f\" fill=\"%s\"/>\n",
                              p.X(i) - bw / 2, p.Y(base + v), bw, p.Y(base) - p.Y(base + v), color);
        base += v;
      }
      p.Text(p.X(i), p.Y(base) - 4, absl::StrFormat("%.2f", base), "#333", 10, "middle");
    }
    if (any_timing) {
      p.Legend(0, kBlue, "compute");
      p.Legend(1, kOrange, "exposed communication (transfer)");
      p.Legend(2, kRed, "waiting for the slowest peer");
      p.Legend(3, kLight, "rest of the wall time per step");
    } else {
      p.Legend(0, kLight, "step time; the workers reported no breakdown");
    }
    p.Close();
  }
  // 4. The model's extrapolation.
  {
    Panel p(&out, 580, 450, 380, 260);
    if (!r.has_model || r.predictions.empty()) {
      p.SetY(1);
      p.Frame("Model extrapolation", "efficiency");
      p.Text(p.x0_ + 8, p.y0_ + 40, absl::StrCat("not fitted: ", r.model_note), "#333", 11);
      p.Close();
    } else {
      std::vector<int> pk;
      for (const Prediction& q : r.predictions) pk.push_back(q.k);
      XAxisOverK(&p, pk);
      p.SetY(1.1);
      p.Frame(absl::StrCat("Model: efficiency at ", r.link), "efficiency");
      std::vector<std::pair<double, double>> ring, ps;
      for (const Prediction& q : r.predictions) {
        ring.push_back({Log2(q.k), q.ring_efficiency});
        ps.push_back({Log2(q.k), q.ps_efficiency});
      }
      absl::StrAppendFormat(&out,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                            "stroke-dasharray=\"6,4\"/>\n",
                            p.x0_, p.Y(r.threshold), p.x0_ + p.w_, p.Y(r.threshold), kRed);
      p.Polyline(ring, kBlue, false, "model-ring");
      p.Polyline(ps, kGreen, false, "model-ps");
      for (const Prediction& q : r.predictions) {
        if (q.pick == "ring") continue;
        p.Text(p.X(Log2(q.k)), p.Y(q.ps_efficiency) - 6, absl::StrCat("S=", q.best_shards), kGreen,
               9, "middle");
      }
      p.Legend(0, kBlue, "ring all-reduce");
      p.Legend(1, kGreen, "ps, best S (labelled where it wins)");
      p.Text(p.x0_ + 8, p.Bottom() + 44,
             absl::StrFormat("alpha %.1f us, beta %.3f ns/B (loopback fit + link); %s", 
                             r.link_ab.alpha * 1e6, r.link_ab.beta * 1e9,
                             r.weak ? "weak scaling" : "strong scaling"),
             "#444", 10);
      p.Close();
    }
  }
  double y = 770;
  for (const std::string& note : r.notes) {
    absl::StrAppendFormat(&out, "<text x=\"20\" y=\"%.0f\" font-size=\"11\" fill=\"#444\">%s</text>\n",
                          y, Escape(absl::StrCat("note: ", note)));
    y += 14;
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

std::string ScaleTable(const ScaleReport& r) {
  std::string out = absl::StrCat("lockstep scale: ", r.title, "\n");
  absl::StrAppend(&out,
                  "(step ms: wall time per step, batch / examples/s; the rest: medians over the "
                  "steps, averaged over the ranks)\n");
  absl::StrAppendFormat(&out, "%4s %7s %12s %12s %10s %8s %8s %8s %8s %8s %8s %8s\n", "K",
                        "batch", "examples/s", "ideal", "efficiency", "speedup", "step ms",
                        "med step", "compute", "comm", "exposed", "wait");
  for (const Row& row : r.rows) {
    const scaling::Measurement& m = row.m;
    const auto ms = [&](double s) {
      return m.has_timing ? absl::StrFormat("%.3f", Ms(s)) : std::string("-");
    };
    absl::StrAppendFormat(&out, "%4d %7d %12.0f %12.0f %10.3f %8.2f %8.3f %8s %8s %8s %8s %8s\n",
                          m.k, m.global_batch, m.examples_per_second,
                          row.ideal_examples_per_second, row.efficiency, row.speedup, StepMs(m),
                          ms(m.step_seconds), ms(m.compute_seconds),
                          ms(m.communication_seconds), ms(m.exposed_seconds),
                          ms(m.peer_wait_seconds));
  }
  if (!r.skipped.empty()) {
    absl::StrAppendFormat(&out, "skipped K=%s: more than the idle workers\n",
                          absl::StrJoin(r.skipped, ","));
  }
  if (r.first_below > 0) {
    absl::StrAppendFormat(&out, "efficiency falls below %s at K=%d\n", Num(r.threshold),
                          r.first_below);
  } else {
    absl::StrAppendFormat(&out, "efficiency stays at or above %s at every K measured\n",
                          Num(r.threshold));
  }
  for (const std::string& note : r.notes) absl::StrAppend(&out, "note: ", note, "\n");
  if (!r.has_model) {
    absl::StrAppend(&out, "model: not fitted: ", r.model_note, "\n");
    return out;
  }
  absl::StrAppendFormat(
      &out,
      "model: loopback fit alpha = %.2f us, beta = %.4f ns/byte (%.2f GB/s) from %d point(s)%s, "
      "rms residual %.3f ms%s%s\n",
      r.fit.ab.alpha * 1e6, r.fit.ab.beta * 1e9,
      r.fit.ab.beta > 0 ? 1e-9 / r.fit.ab.beta : 0.0, r.fit.points,
      r.fit_inferred ? " (communication inferred from step-time growth over the smallest K)" : "",
      Ms(r.fit.rms_residual), r.fit.note.empty() ? "" : "; ", r.fit.note);
  absl::StrAppendFormat(&out,
                        "extrapolated over a %s link: alpha = %.2f us, beta = %.4f ns/byte; "
                        "gradient %.0f bytes per worker; %.0f%% of communication exposed\n",
                        r.link, r.link_ab.alpha * 1e6, r.link_ab.beta * 1e9, r.gradient_bytes,
                        100 * r.exposed_fraction);
  absl::StrAppend(&out, "(ps S=n: n parameter-server hosts beside the K workers)\n");
  absl::StrAppendFormat(&out, "%5s %10s %10s %10s %10s %8s %10s %12s\n", "K", "compute ms",
                        "ring ms", "ps S=1 ms", "best ps ms", "pick", "efficiency", "examples/s");
  for (const Prediction& q : r.predictions) {
    absl::StrAppendFormat(&out, "%5d %10.3f %10.3f %10.3f %10s %8s %10.3f %12.0f\n", q.k,
                          Ms(q.compute_seconds), Ms(q.ring_seconds), Ms(q.ps1_seconds),
                          absl::StrFormat("%.3f/S=%d", Ms(q.best_ps_seconds), q.best_shards),
                          q.pick, q.efficiency, q.examples_per_second);
  }
  return out;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  f << text;
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace lockstep
