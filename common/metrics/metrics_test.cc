#include "common/metrics/metrics.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(Metrics, RendersCountersGaugesAndLabelsExactly) {
  MetricsRegistry r;
  Counter* steps = r.AddCounter("lockstep_worker_steps_total", "Training steps done.");
  auto* sent = r.AddCounterFamily("lockstep_transport_sent_bytes_total",
                                  "Payload bytes sent, by transport.", {"transport"});
  Gauge* eps = r.AddGauge("lockstep_worker_examples_per_second", "Examples/s of the last step.");
  auto* errors = r.AddCounterFamily("lockstep_rpc_errors_total", "RPC errors.", {"method", "code"});
  steps->Increment();
  steps->Increment(2);
  steps->Increment(-5);  // ignored: counters only go up
  sent->WithLabels({"tcp"})->Increment(4096);
  sent->WithLabels({"grpc"})->Increment(10);
  eps->Set(1234.5);
  errors->WithLabels({"ReportStep", "UNAVAILABLE"})->Increment();
  EXPECT_EQ(r.Render(),
            "# HELP lockstep_rpc_errors_total RPC errors.\n"
            "# TYPE lockstep_rpc_errors_total counter\n"
            "lockstep_rpc_errors_total{method=\"ReportStep\",code=\"UNAVAILABLE\"} 1\n"
            "# HELP lockstep_transport_sent_bytes_total Payload bytes sent, by transport.\n"
            "# TYPE lockstep_transport_sent_bytes_total counter\n"
            "lockstep_transport_sent_bytes_total{transport=\"grpc\"} 10\n"
            "lockstep_transport_sent_bytes_total{transport=\"tcp\"} 4096\n"
            "# HELP lockstep_worker_examples_per_second Examples/s of the last step.\n"
            "# TYPE lockstep_worker_examples_per_second gauge\n"
            "lockstep_worker_examples_per_second 1234.5\n"
            "# HELP lockstep_worker_steps_total Training steps done.\n"
            "# TYPE lockstep_worker_steps_total counter\n"
            "lockstep_worker_steps_total 3\n");
}

TEST(Metrics, HistogramBucketsSumAndCount) {
  MetricsRegistry r;
  auto* h = r.AddHistogramFamily("lockstep_step_seconds", "Step time.", {"phase"},
                                 {0.001, 0.01, 0.1});
  Histogram* c = h->WithLabels({"compute"});
  c->Observe(0.0005);
  c->Observe(0.01);  // on a bound: counts in that bucket (le = less or equal)
  c->Observe(0.05);
  c->Observe(2);
  c->Observe(std::nan(""));  // ignored
  EXPECT_EQ(r.Render(),
            "# HELP lockstep_step_seconds Step time.\n"
            "# TYPE lockstep_step_seconds histogram\n"
            "lockstep_step_seconds_bucket{phase=\"compute\",le=\"0.001\"} 1\n"
            "lockstep_step_seconds_bucket{phase=\"compute\",le=\"0.01\"} 2\n"
            "lockstep_step_seconds_bucket{phase=\"compute\",le=\"0.1\"} 3\n"
            "lockstep_step_seconds_bucket{phase=\"compute\",le=\"+Inf\"} 4\n"
            "lockstep_step_seconds_sum{phase=\"compute\"} 2.0605\n"
            "lockstep_step_seconds_count{phase=\"compute\"} 4\n");
  MetricsRegistry plain;
  plain.AddHistogram("x_seconds", "X.", {1})->Observe(0.5);
  EXPECT_EQ(plain.Render(),
            "# HELP x_seconds X.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"1\"} 1\n"
            "x_seconds_bucket{le=\"+Inf\"} 1\n"
            "x_seconds_sum 0.5\n"
            "x_seconds_count 1\n");
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  MetricsRegistry r;
  auto* g = r.AddGaugeFamily("g", "Help with \\ and\nnewline \"quoted\".", {"job"});
  g->WithLabels({"a\"b\\c\nd"})->Set(1);
  EXPECT_EQ(r.Render(),
            "# HELP g Help with \\\\ and\\nnewline \"quoted\".\n"
            "# TYPE g gauge\n"
            "g{job=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(Metrics, CollectorsFillGaugesAtScrapeTime) {
  MetricsRegistry r;
  auto* jobs = r.AddGaugeFamily("lockstep_jobs", "Jobs by state.", {"state"});
  int running = 0;
  r.AddCollector([&] {
    jobs->Clear();
    jobs->WithLabels({"RUNNING"})->Set(running);
    if (running > 1) jobs->WithLabels({"PENDING"})->Set(1);
  });
  running = 1;
  EXPECT_EQ(r.Render(),
            "# HELP lockstep_jobs Jobs by state.\n"
            "# TYPE lockstep_jobs gauge\n"
            "lockstep_jobs{state=\"RUNNING\"} 1\n");
  running = 2;
  EXPECT_EQ(r.Render(),
            "# HELP lockstep_jobs Jobs by state.\n"
            "# TYPE lockstep_jobs gauge\n"
            "lockstep_jobs{state=\"PENDING\"} 1\n"
            "lockstep_jobs{state=\"RUNNING\"} 2\n");
}

TEST(Metrics, FamiliesWithoutSamplesAreLeftOut) {
  MetricsRegistry r;
  r.AddCounterFamily("a_total", "A.", {"x"});
  EXPECT_EQ(r.Render(), "");
}

TEST(Metrics, FormatsValues) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 3), (std::vector<double>{0.001, 0.01, 0.1}));
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter* c = r.AddCounter("c_total", "C.");
  Gauge* g = r.AddGauge("g", "G.");
  Histogram* h = r.AddHistogram("h_seconds", "H.", {0.5});
  auto* fam = r.AddCounterFamily("f_total", "F.", {"t"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        g->Add(1);
        h->Observe(i % 2 ? 1.0 : 0.25);
        fam->WithLabels({t % 2 ? "odd" : "even"})->Increment();
        if (i % 1000 == 0) r.Render();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value(), 40000);
  EXPECT_EQ(g->Value(), 40000);
  const Histogram::Snapshot s = h->Get();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[0], 20000u);
  EXPECT_EQ(s.sum, 20000 * 1.0 + 20000 * 0.25);
  EXPECT_EQ(fam->WithLabels({"odd"})->Value(), 20000);
}

TEST(Metrics, HttpHandlerServesTheTextFormat) {
  MetricsRegistry r;
  r.AddCounter("up_total", "Up.")->Increment();
  HttpResponse resp = MetricsHttpHandler(&r)(HttpRequest{});
  EXPECT_EQ(resp.status, 200);
  EXPECT_EQ(resp.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(resp.body, "# HELP up_total Up.\n# TYPE up_total counter\nup_total 1\n");
}

TEST(MetricsDeathTest, BadNamesAreProgrammingErrors) {
  MetricsRegistry r;
  EXPECT_DEATH(r.AddCounter("9bad", "x"), "malformed metric name");
  EXPECT_DEATH(r.AddCounterFamily("ok_total", "x", {"__reserved"}), "malformed label name");
  r.AddCounter("dup_total", "x");
  EXPECT_DEATH(r.AddCounter("dup_total", "x"), "registered twice");
  auto* f = r.AddCounterFamily("two_total", "x", {"a", "b"});
  EXPECT_DEATH(f->WithLabels({"only-one"}), "label value count");
}

}  // namespace
}  // namespace lockstep
