// Metrics: counters, gauges and fixed-bucket histograms with label sets,
// and their rendering in the Prometheus text exposition format 0.0.4.
// No singletons: each daemon owns one MetricsRegistry and hands pointers to
// the code that counts.
//
//   MetricsRegistry registry;
//   Counter* steps = registry.AddCounter("lockstep_worker_steps_total", "Steps done.");
//   auto* sent = registry.AddCounterFamily("lockstep_transport_sent_bytes_total",
//                                          "Bytes sent.", {"transport"});
//   steps->Increment();
//   sent->WithLabels({"tcp"})->Increment(4096);
//   registry.AddCollector([&] { jobs->WithLabels({"RUNNING"})->Set(n); });
//   std::string text = registry.Render();
//
// Thread safety: everything may be called from any thread. Counter and
// Gauge updates are lock-free atomics; a Histogram takes its own small
// mutex; a family takes its mutex only to find or create a label set.
// Render() runs the collectors and then reads every value; concurrent
// Render() calls are serialised (so collectors never interleave), and no
// lock of the registry is held while a collector runs.
//
// Lifetime: the pointers Add*() and WithLabels() return stay valid for the
// registry's lifetime, except that Remove()/Clear() destroy the removed
// label sets: only the owner of a family (typically its collector) may
// call them, and it must not keep pointers across them.
//
// Names are fixed by the code, so a malformed metric or label name, a
// duplicate family name, or a label-value count that does not match the
// family's label names is a programming error (ABSL_RAW_CHECK).
#ifndef LOCKSTEP_COMMON_METRICS_METRICS_H_
#define LOCKSTEP_COMMON_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/http/http.h"

namespace lockstep {

// Monotonic; Increment() with a negative or NaN amount is ignored.
class Counter {
 public:
  void Increment(double amount = 1.0);
  // For collectors that mirror a monotonic count kept elsewhere (e.g. a
  // service's own call counter); ordinary code only increments.
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double amount);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, strictly increasing and finite;
  // the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> bounds);
  // A NaN observation is ignored.
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Get() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // non-cumulative, bounds_.size() + 1
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// `count` bounds start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric name with its label names; one child per label-value set.
template <typename M>
class Family {
 public:
  // The child for these label values (in the order of the family's label
  // names), created (at zero) on first use.
  M* WithLabels(const std::vector<std::string>& values);
  void Remove(const std::vector<std::string>& values);
  void Clear();

  const std::string& name() const { return name_; }

 private:
  friend class MetricsRegistry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}
  std::unique_ptr<M> Make() const;

  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histograms only
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_ ABSL_GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Family<Counter>* AddCounterFamily(std::string name, std::string help,
                                    std::vector<std::string> label_names);
  Family<Gauge>* AddGaugeFamily(std::string name, std::string help,
                                std::vector<std::string> label_names);
  Family<Histogram>* AddHistogramFamily(std::string name, std::string help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds);
  // Unlabelled shorthands.
  Counter* AddCounter(std::string name, std::string help);
  Gauge* AddGauge(std::string name, std::string help);
  Histogram* AddHistogram(std::string name, std::string help, std::vector<double> bounds);

  // Called at the start of every Render() (serialised), to fill gauges
  // from state that is read rather than counted (jobs by state, ...). It
  // must not call Render() and should be quick (it runs on a scrape).
  void AddCollector(std::function<void()> collect);

  // The text exposition format 0.0.4: families in name order, each with
  // "# HELP" and "# TYPE" lines, then its samples in label-value order.
  // Families without any label set yet are left out.
  std::string Render() const;

 private:
  struct Entry {
    MetricType type;
    const void* family;  // Family<Counter/Gauge/Histogram>
  };
  void Register(const std::string& name, const std::vector<std::string>& label_names,
                MetricType type, const void* family);

  mutable absl::Mutex render_mu_;  // serialises Render(); taken before mu_
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Counter>>> counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<std::function<void()>>> collectors_ ABSL_GUARDED_BY(mu_);
};

// The content type of Render()'s output.
inline constexpr char kPrometheusTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// A handler for GET /metrics: Render() with the right content type.
// `registry` must outlive the handler.
HttpHandler MetricsHttpHandler(const MetricsRegistry* registry);

// Value formatting used by Render(): integers without a fraction ("3"),
// other numbers with the fewest digits that read back to the same double,
// "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double v);
// Label value escaping: backslash, double quote and newline.
std::string EscapeLabelValue(absl::string_view v);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_METRICS_METRICS_H_
