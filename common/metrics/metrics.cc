#include "common/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

bool ValidMetricName(absl::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool ok = absl::ascii_isalpha(c) || c == '_' || c == ':' ||
                    (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

bool ValidLabelName(absl::string_view s) {
  if (s.empty() || absl::StartsWith(s, "__")) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool ok = absl::ascii_isalpha(c) || c == '_' || (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

std::string EscapeHelp(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void AtomicAdd(std::atomic<double>* a, double amount) {
  double cur = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(cur, cur + amount, std::memory_order_relaxed)) {
  }
}

// `{a="x",b="y"` plus an optional extra pair, then `}`; "" for no labels.
std::string LabelText(const std::vector<std::string>& names,
                      const std::vector<std::string>& values, absl::string_view extra_name = "",
                      absl::string_view extra_value = "") {
  if (names.empty() && extra_name.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, names.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  out += "}";
  return out;
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  for (int precision = 1; precision <= 17; ++precision) {
    std::string s = absl::StrFormat("%.*g", precision, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

std::string EscapeLabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Counter::Increment(double amount) {
  if (!(amount >= 0)) return;  // negative or NaN
  AtomicAdd(&value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(&value_, amount); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    ABSL_RAW_CHECK(std::isfinite(bounds_[i]), "Histogram: bucket bounds must be finite");
    ABSL_RAW_CHECK(i == 0 || bounds_[i - 1] < bounds_[i],
                   "Histogram: bucket bounds must increase strictly");
  }
  absl::MutexLock lock(&mu_);
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += v;
}

Histogram::Snapshot Histogram::Get() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  ABSL_RAW_CHECK(start > 0 && factor > 1 && count >= 1, "ExponentialBuckets: bad arguments");
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

template <typename M>
M* Family<M>::WithLabels(const std::vector<std::string>& values) {
  ABSL_RAW_CHECK(values.size() == label_names_.size(),
                 "Family::WithLabels: label value count differs from the label names");
  absl::MutexLock lock(&mu_);
  std::unique_ptr<M>& child = children_[values];
  if (child == nullptr) child = Make();
  return child.get();
}

template <typename M>
void Family<M>::Remove(const std::vector<std::string>& values) {
  absl::MutexLock lock(&mu_);
  children_.erase(values);
}

template <typename M>
void Family<M>::Clear() {
  absl::MutexLock lock(&mu_);
  children_.clear();
}

template <>
std::unique_ptr<Counter> Family<Counter>::Make() const {
  return std::make_unique<Counter>();
}
template <>
std::unique_ptr<Gauge> Family<Gauge>::Make() const {
  return std::make_unique<Gauge>();
}
template <>
std::unique_ptr<Histogram> Family<Histogram>::Make() const {
  return std::make_unique<Histogram>(bounds_);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void MetricsRegistry::Register(const std::string& name,
                               const std::vector<std::string>& label_names, MetricType type,
                               const void* family) {
  ABSL_RAW_CHECK(ValidMetricName(name), "MetricsRegistry: malformed metric name");
  for (const std::string& l : label_names) {
    ABSL_RAW_CHECK(ValidLabelName(l), "MetricsRegistry: malformed label name");
    ABSL_RAW_CHECK(type != MetricType::kHistogram || l != "le",
                   "MetricsRegistry: a histogram cannot have a label named le");
  }
  const bool inserted = entries_.emplace(name, Entry{type, family}).second;
  ABSL_RAW_CHECK(inserted, "MetricsRegistry: metric name registered twice");
}

Family<Counter>* MetricsRegistry::AddCounterFamily(std::string name, std::string help,
                                                   std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  counters_.push_back(std::unique_ptr<Family<Counter>>(
      new Family<Counter>(name, std::move(help), label_names, {})));
  Register(name, label_names, MetricType::kCounter, counters_.back().get());
  return counters_.back().get();
}

Family<Gauge>* MetricsRegistry::AddGaugeFamily(std::string name, std::string help,
                                               std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  gauges_.push_back(
      std::unique_ptr<Family<Gauge>>(new Family<Gauge>(name, std::move(help), label_names, {})));
  Register(name, label_names, MetricType::kGauge, gauges_.back().get());
  return gauges_.back().get();
}

Family<Histogram>* MetricsRegistry::AddHistogramFamily(std::string name, std::string help,
                                                       std::vector<std::string> label_names,
                                                       std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  histograms_.push_back(std::unique_ptr<Family<Histogram>>(
      new Family<Histogram>(name, std::move(help), label_names, std::move(bounds))));
  Register(name, label_names, MetricType::kHistogram, histograms_.back().get());
  return histograms_.back().get();
}

Counter* MetricsRegistry::AddCounter(std::string name, std::string help) {
  return AddCounterFamily(std::move(name), std::move(help), {})->WithLabels({});
}

Gauge* MetricsRegistry::AddGauge(std::string name, std::string help) {
  return AddGaugeFamily(std::move(name), std::move(help), {})->WithLabels({});
}

Histogram* MetricsRegistry::AddHistogram(std::string name, std::string help,
                                         std::vector<double> bounds) {
  return AddHistogramFamily(std::move(name), std::move(help), {}, std::move(bounds))
      ->WithLabels({});
}

void MetricsRegistry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::make_shared<std::function<void()>>(std::move(collect)));
}

namespace {

template <typename M>
void AppendHeader(const Family<M>& f, absl::string_view help, MetricType type, std::string* out) {
  absl::StrAppend(out, "# HELP ", f.name(), " ", EscapeHelp(help), "\n");
  absl::StrAppend(out, "# TYPE ", f.name(), " ", TypeName(type), "\n");
}

}  // namespace

std::string MetricsRegistry::Render() const {
  absl::MutexLock render_lock(&render_mu_);
  std::vector<std::shared_ptr<std::function<void()>>> collectors;
  std::map<std::string, Entry> entries;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
  }
  for (const auto& c : collectors) (*c)();
  {
    absl::MutexLock lock(&mu_);
    entries = entries_;  // families are never destroyed before the registry
  }
  std::string out;
  for (const auto& [name, e] : entries) {
    switch (e.type) {
      case MetricType::kCounter:
      case MetricType::kGauge: {
        // Counter and Gauge render alike; read values under the family lock.
        std::vector<std::pair<std::vector<std::string>, double>> samples;
        const std::vector<std::string>* label_names;
        const std::string* help;
        if (e.type == MetricType::kCounter) {
          const auto* f = static_cast<const Family<Counter>*>(e.family);
          absl::MutexLock lock(&f->mu_);
          for (const auto& [values, c] : f->children_) samples.emplace_back(values, c->Value());
          label_names = &f->label_names_;
          help = &f->help_;
        } else {
          const auto* f = static_cast<const Family<Gauge>*>(e.family);
          absl::MutexLock lock(&f->mu_);
          for (const auto& [values, g] : f->children_) samples.emplace_back(values, g->Value());
          label_names = &f->label_names_;
          help = &f->help_;
        }
        if (samples.empty()) break;
        absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(*help), "\n");
        absl::StrAppend(&out, "# TYPE ", name, " ", TypeName(e.type), "\n");
        for (const auto& [values, v] : samples) {
          absl::StrAppend(&out, name, LabelText(*label_names, values), " ",
                          FormatMetricValue(v), "\n");
        }
        break;
      }
      case MetricType::kHistogram: {
        const auto* f = static_cast<const Family<Histogram>*>(e.family);
        std::vector<std::pair<std::vector<std::string>, Histogram::Snapshot>> samples;
        {
          absl::MutexLock lock(&f->mu_);
          for (const auto& [values, h] : f->children_) samples.emplace_back(values, h->Get());
        }
        if (samples.empty()) break;
        AppendHeader(*f, f->help_, e.type, &out);
        for (const auto& [values, s] : samples) {
          for (size_t i = 0; i <= s.bounds.size(); ++i) {
            const std::string le =
                i < s.bounds.size() ? FormatMetricValue(s.bounds[i]) : std::string("+Inf");
            absl::StrAppend(&out, name, "_bucket", LabelText(f->label_names_, values, "le", le),
                            " ", s.cumulative[i], "\n");
          }
          absl::StrAppend(&out, name, "_sum", LabelText(f->label_names_, values), " ",
                          FormatMetricValue(s.sum), "\n");
          absl::StrAppend(&out, name, "_count", LabelText(f->label_names_, values), " ",
                          s.count, "\n");
        }
        break;
      }
    }
  }
  return out;
}

HttpHandler MetricsHttpHandler(const MetricsRegistry* registry) {
  return [registry](const HttpRequest&) {
    HttpResponse r;
    r.content_type = kPrometheusTextContentType;
    r.body = registry->Render();
    r.headers["Cache-Control"] = "no-store";
    return r;
  };
}

}  // namespace lockstep
