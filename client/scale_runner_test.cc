#include "client/scale_runner.h"

#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

// A coordinator with `idle` workers whose jobs finish at once (or never),
// at examples/s given per K, with per-rank medians when `timing` is set.
class FakeBackend : public ScaleBackend {
 public:
  int idle = 4;
  std::map<int, double> eps;      // K -> examples/s
  std::map<int, double> step_s;   // K -> per-rank median step seconds (0: no timing)
  std::map<std::string, double> comm_s;  // model -> transfer seconds per step (when timed)
  v1::JobState final_state = v1::SUCCEEDED;
  std::string fail_model;  // jobs of this model end FAILED
  bool never_ends = false;
  std::vector<v1::JobSpec> submitted;
  std::vector<uint64_t> cancelled;
  int gets = 0;
  absl::Time now = absl::UnixEpoch();

  absl::StatusOr<int> IdleWorkers() override { return idle; }
  absl::StatusOr<uint64_t> Submit(const v1::JobSpec& spec) override {
    submitted.push_back(spec);
    return submitted.size();
  }
  absl::StatusOr<v1::JobStatus> Get(uint64_t id) override {
    ++gets;
    const v1::JobSpec& spec = submitted.at(id - 1);
    const int k = spec.num_workers();
    v1::JobStatus st;
    st.set_job_id(id);
    *st.mutable_spec() = spec;
    if (never_ends) {
      st.set_state(v1::RUNNING);
      st.set_step(3);
      return st;
    }
    const v1::JobState state = spec.model() == fail_model ? v1::FAILED : final_state;
    st.set_state(state);
    if (state != v1::SUCCEEDED) st.set_reason("rank 1 lost");
    st.set_step(spec.steps());
    // Repeats differ: run r of a K gets eps x (1 + 0.1 r).
    int runs_of_k = 0;
    for (size_t i = 0; i < id; ++i) runs_of_k += submitted[i].num_workers() == k;
    st.set_examples_per_second(eps[k] * (1 + 0.1 * (runs_of_k - 1)));
    for (int r = 0; r < k; ++r) {
      v1::RankStatus* rs = st.add_ranks();
      rs->set_rank(r);
      rs->set_hostname(r < 3 ? "a" : "b");
      const double s = step_s[k];
      auto c = comm_s.find(spec.model());
      if (s > 0 && c != comm_s.end()) {
        // Every rank: compute 0.6 s x s, the model's communication (ring
        // alpha-beta) plus a 1 ms peer wait, all of it exposed.
        rs->set_median_step_seconds(s);
        rs->set_median_compute_seconds(0.6 * s);
        rs->set_median_communication_seconds(c->second + 0.001);
        rs->set_median_exposed_seconds(c->second + 0.001);
        rs->set_median_peer_wait_seconds(0.001);
      } else if (s > 0) {
        // Rank r: compute 0.6 s, communication 0.3 s + r x 0.02, exposed
        // 0.2 s, wait 0.1 s + r x 0.02.
        rs->set_median_step_seconds(s);
        rs->set_median_compute_seconds(0.6 * s);
        rs->set_median_communication_seconds((0.3 + 0.02 * r) * s);
        rs->set_median_exposed_seconds(0.2 * s);
        rs->set_median_peer_wait_seconds((0.1 + 0.02 * r) * s);
      }
    }
    return st;
  }
  absl::Status Cancel(uint64_t id) override {
    cancelled.push_back(id);
    return absl::OkStatus();
  }
  // mlp:256 on 784 features has 203,530 parameters, softmax 7,850.
  absl::StatusOr<int64_t> ParameterCount(uint64_t id) override {
    return submitted.at(id - 1).model() == "softmax" ? 7850 : 203530;
  }
  void Sleep(absl::Duration d) override { now += d; }
  absl::Time Now() override { return now; }
};

ScaleOptions Options(std::vector<int> ks, bool weak = true) {
  ScaleOptions o;
  o.base.set_model("mlp:256");
  o.base.set_global_batch(128);
  o.base.set_steps(30);
  o.base.set_num_workers(4);
  o.ks = std::move(ks);
  o.weak = weak;
  return o;
}

TEST(ScaleRunner, WeakScalingSkipsKBeyondIdleWorkers) {
  FakeBackend b;
  b.idle = 2;
  b.eps = {{1, 1000}, {2, 1800}};
  std::vector<std::string> lines;
  auto run = RunScale(&b, Options({1, 2, 4, 8}),
                      [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->idle_workers, 2);
  EXPECT_EQ(run->measured_ks, (std::vector<int>{1, 2}));
  EXPECT_EQ(run->skipped, (std::vector<int>{4, 8}));
  ASSERT_EQ(b.submitted.size(), 2u);
  EXPECT_EQ(b.submitted[0].num_workers(), 1);
  EXPECT_EQ(b.submitted[0].global_batch(), 128);
  EXPECT_EQ(b.submitted[1].num_workers(), 2);
  EXPECT_EQ(b.submitted[1].global_batch(), 256);
  EXPECT_EQ(b.submitted[1].steps(), 30);
  EXPECT_EQ(b.submitted[1].name(), "scale weak K=2");
  ASSERT_EQ(run->measurements.size(), 2u);
  EXPECT_EQ(run->measurements[1].k, 2);
  EXPECT_EQ(run->measurements[1].global_batch, 256);
  EXPECT_DOUBLE_EQ(run->measurements[1].examples_per_second, 1800);
  EXPECT_FALSE(run->measurements[1].has_timing);
  EXPECT_EQ(run->parameter_count, 203530);
  EXPECT_EQ(lines.size(), 2u);
  EXPECT_EQ(run->job_ids, (std::vector<uint64_t>{1, 2}));
}

TEST(ScaleRunner, StrongScalingKeepsGlobalBatch) {
  FakeBackend b;
  b.eps = {{1, 1000}, {2, 1500}, {4, 2000}};
  auto run = RunScale(&b, Options({1, 2, 4}, false), nullptr);
  ASSERT_TRUE(run.ok()) << run.status();
  for (const v1::JobSpec& s : b.submitted) EXPECT_EQ(s.global_batch(), 128);
  EXPECT_EQ(b.submitted[2].num_workers(), 4);
}

TEST(ScaleRunner, RankMediansAveraged) {
  FakeBackend b;
  b.eps = {{2, 100}};
  b.step_s = {{2, 1.0}};
  auto run = RunScale(&b, Options({2}), nullptr);
  ASSERT_TRUE(run.ok()) << run.status();
  const scaling::Measurement& m = run->measurements[0];
  EXPECT_TRUE(m.has_timing);
  EXPECT_DOUBLE_EQ(m.step_seconds, 1.0);
  EXPECT_DOUBLE_EQ(m.compute_seconds, 0.6);
  EXPECT_DOUBLE_EQ(m.communication_seconds, 0.31);  // ranks 0.30 and 0.32
  EXPECT_DOUBLE_EQ(m.exposed_seconds, 0.2);
  EXPECT_DOUBLE_EQ(m.peer_wait_seconds, 0.11);
  EXPECT_EQ(m.max_workers_per_host, 2);
  EXPECT_EQ(m.busiest_host, "a");
}

TEST(ScaleRunner, RepeatsInterleaveAndTakeTheMedian) {
  FakeBackend b;
  b.eps = {{1, 1000}, {2, 1800}};
  ScaleOptions o = Options({1, 2});
  o.repeats = 3;
  auto run = RunScale(&b, o, nullptr);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(b.submitted.size(), 6u);
  std::vector<int> order;
  for (const auto& s : b.submitted) order.push_back(s.num_workers());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 1, 2, 1, 2}));
  // Runs at x1.0, x1.1, x1.2: the median is x1.1.
  EXPECT_DOUBLE_EQ(run->measurements[0].examples_per_second, 1100);
  EXPECT_DOUBLE_EQ(run->measurements[1].examples_per_second, 1980);
}

// On one 2-CPU host only K = 2 is both parallel and uncrowded: the probe
// (the same job with softmax, 26x less gradient) gives the fit a second
// gradient size at K = 2, and alpha and beta come out exactly.
TEST(ScaleRunner, AlphaProbeSeparatesAlphaFromBeta) {
  const scaling::AlphaBeta truth{20e-6, 0.3e-9};
  FakeBackend b;
  b.idle = 4;
  b.eps = {{1, 1000}, {2, 1800}, {4, 2000}};
  b.step_s = {{1, 0.002}, {2, 0.002}, {4, 0.004}};
  b.comm_s = {{"mlp:256", scaling::RingAllReduceSeconds(2, 4.0 * 203530, truth)},
              {"softmax", scaling::RingAllReduceSeconds(2, 4.0 * 7850, truth)}};
  ScaleOptions o = Options({1, 2, 4});
  o.repeats = 2;
  o.probe_model = ProbeModelFor("auto", o.base.model());
  EXPECT_EQ(o.probe_model, "softmax");
  std::vector<std::string> lines;
  auto run = RunScale(&b, o, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(run.ok()) << run.status();
  // Each repeat: K = 1, 2, 4, then the probe at K = 2 (the smallest K > 1).
  std::vector<std::string> order;
  for (const auto& s : b.submitted) order.push_back(absl::StrCat(s.model(), "/", s.num_workers()));
  EXPECT_EQ(order, (std::vector<std::string>{"mlp:256/1", "mlp:256/2", "mlp:256/4", "softmax/2",
                                             "mlp:256/1", "mlp:256/2", "mlp:256/4",
                                             "softmax/2"}));
  EXPECT_EQ(b.submitted[3].global_batch(), 256);
  EXPECT_EQ(b.submitted[3].name(), "scale alpha probe K=2 softmax");
  EXPECT_EQ(run->probe.model, "softmax");
  EXPECT_EQ(run->probe.k, 2);
  EXPECT_EQ(run->probe.parameter_count, 7850);
  EXPECT_EQ(run->probe.job_ids, (std::vector<uint64_t>{4, 8}));
  EXPECT_EQ(lines.size(), 8u);
  EXPECT_EQ(run->measurements.size(), 3u);  // the probe is not a row

  ScaleReport report;
  report.rows = scaling::Summarize(run->measurements);
  for (auto& row : report.rows) {  // K = 4 crowds this 2-CPU host
    row.m.busiest_host = "vm";
    row.m.max_workers_per_host = row.m.k;
  }
  ModelOptions mo;
  mo.parameter_count = run->parameter_count;
  mo.extrapolate = {16};
  mo.local_host = "vm";
  mo.local_cpus = 2;
  mo.probe = run->probe;
  mo.probe.m.busiest_host = "vm";
  mo.probe.m.max_workers_per_host = 2;
  AddModel(&report, mo);
  ASSERT_TRUE(report.has_model) << report.model_note;
  EXPECT_EQ(report.fit.points, 2);
  EXPECT_EQ(report.fit.note, "");
  EXPECT_NEAR(report.fit.ab.alpha, 20e-6, 1e-12);
  EXPECT_NEAR(report.fit.ab.beta, 0.3e-9, 1e-17);
  EXPECT_TRUE(report.probe_used);
  EXPECT_EQ(report.probe_k, 2);
  EXPECT_DOUBLE_EQ(report.probe_bytes, 31400);
  ASSERT_EQ(report.notes.size(), 2u);
  EXPECT_EQ(report.notes[1],
            "alpha probe: softmax (7850 parameters, 31.4 KB) at K=2: 0.049 ms transfer per step "
            "(communication 1.049 - peer wait 1.000), in the fit")
      << report.notes[1];

  // Without the probe the same rows cannot separate them.
  ScaleReport without;
  without.rows = report.rows;
  mo.probe = ProbeRun();
  AddModel(&without, mo);
  EXPECT_EQ(without.fit.points, 1);
  EXPECT_EQ(without.fit.ab.alpha, 0);
  EXPECT_FALSE(without.probe_used);
}

TEST(ScaleRunner, AlphaProbeModelAndWhenItCannotRun) {
  EXPECT_EQ(ProbeModelFor("auto", "mlp:256,128"), "softmax");
  EXPECT_EQ(ProbeModelFor("auto", "softmax"), "mlp:256");
  EXPECT_EQ(ProbeModelFor("auto", "linear"), "");
  EXPECT_EQ(ProbeModelFor("none", "mlp:256"), "");
  EXPECT_EQ(ProbeModelFor("mlp:32", "mlp:256"), "mlp:32");
  // Only K = 1 (ring): no row to fit, so no probe job is submitted.
  FakeBackend b;
  b.eps = {{1, 1000}};
  ScaleOptions o = Options({1, 2});
  o.probe_model = "softmax";
  b.idle = 1;
  auto run = RunScale(&b, o, nullptr);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(b.submitted.size(), 1u);
  EXPECT_EQ(run->probe.model, "");
  EXPECT_EQ(run->probe.note,
            "no alpha probe: only K=1 measured (a ring's fit uses the K above the smallest)");
  // ps communicates at K = 1 too: the probe runs there.
  FakeBackend p;
  p.eps = {{1, 1000}};
  o.base.set_sync_mode(v1::PS);
  p.idle = 1;
  run = RunScale(&p, o, nullptr);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(p.submitted.size(), 2u);
  EXPECT_EQ(p.submitted[1].model(), "softmax");
  EXPECT_EQ(run->probe.k, 1);
  // A probe with no timing is named and not used.
  ScaleReport report;
  report.rows = scaling::Summarize(run->measurements);
  ModelOptions mo;
  mo.mode = v1::PS;
  mo.parameter_count = run->parameter_count;
  mo.extrapolate = {16};
  mo.probe = run->probe;
  AddModel(&report, mo);
  EXPECT_FALSE(report.probe_used);
  EXPECT_NE(absl::StrJoin(report.notes, "|").find("reported no timing; not used"),
            std::string::npos)
      << absl::StrJoin(report.notes, "|");
  // A probe that fails ends the run with an error naming it.
  FakeBackend f;
  f.eps = {{1, 1000}, {2, 1800}};
  f.fail_model = "softmax";
  o.base.set_sync_mode(v1::RING);
  auto failed = RunScale(&f, o, nullptr);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(failed.status().message(),
            "alpha probe (--alpha_probe_model=softmax): K=2: job 3 FAILED: rank 1 lost");
}

TEST(ScaleRunner, FailedJobNamesKJobAndReason) {
  FakeBackend b;
  b.final_state = v1::FAILED;
  auto run = RunScale(&b, Options({1}), nullptr);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(run.status().message(), "K=1: job 1 FAILED: rank 1 lost");
}

TEST(ScaleRunner, JobPastItsDeadlineIsCancelled) {
  FakeBackend b;
  b.never_ends = true;
  ScaleOptions o = Options({1});
  o.job_timeout = absl::Seconds(1);
  o.poll = absl::Milliseconds(100);
  auto run = RunScale(&b, o, nullptr);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(run.status().message().find("job 1 still RUNNING at step 3"), absl::string_view::npos)
      << run.status();
  EXPECT_EQ(b.cancelled, (std::vector<uint64_t>{1}));
  EXPECT_EQ(b.gets, 11);  // at 0, 0.1, ..., 1.0 s
}

TEST(ScaleRunner, BadOptionsNameTheFlag) {
  FakeBackend b;
  auto msg = [&](ScaleOptions o) { return std::string(RunScale(&b, o, nullptr).status().message()); };
  EXPECT_NE(msg(Options({})).find("--workers_list"), std::string::npos);
  EXPECT_NE(msg(Options({2, 1})).find("ascending"), std::string::npos);
  ScaleOptions o = Options({1});
  o.base.set_steps(0);
  EXPECT_NE(msg(o).find("--steps"), std::string::npos);
  o = Options({1});
  o.repeats = 0;
  EXPECT_NE(msg(o).find("--repeats"), std::string::npos);
  o = Options({1, 256}, false);
  b.idle = 300;
  EXPECT_NE(msg(o).find("--batch=128: strong scaling"), std::string::npos);
  b.idle = 0;
  auto none = RunScale(&b, Options({1, 2}), nullptr);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("0 idle worker(s)"), absl::string_view::npos);
  EXPECT_TRUE(b.submitted.empty());
}

TEST(ScaleRunner, ParseKList) {
  EXPECT_EQ(*ParseKList("1,2,4,8", "workers_list"), (std::vector<int>{1, 2, 4, 8}));
  auto bad = ParseKList("1,two", "extrapolate");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--extrapolate"), absl::string_view::npos);
  EXPECT_FALSE(ParseKList("0", "workers_list").ok());
  EXPECT_FALSE(ParseKList("", "workers_list").ok());
}

// Rows whose reported communication follows a known ring alpha-beta: the
// model recovers it and extrapolates.
TEST(ScaleRunner, AddModelFitsReportedCommunication) {
  const scaling::AlphaBeta truth{20e-6, 0.5e-9};
  const int64_t params = 250000;  // 1e6 bytes
  std::vector<scaling::Measurement> ms;
  for (int k : {1, 2, 4}) {
    scaling::Measurement m;
    m.k = k;
    m.global_batch = 128 * k;
    m.has_timing = true;
    m.compute_seconds = 0.002;
    m.peer_wait_seconds = 0.0001 * (k - 1);
    m.communication_seconds =
        scaling::RingAllReduceSeconds(k, 4.0 * params, truth) + m.peer_wait_seconds;
    m.exposed_seconds = 0.5 * m.communication_seconds;
    m.step_seconds = m.compute_seconds + m.exposed_seconds;
    m.examples_per_second = m.global_batch / m.step_seconds;
    ms.push_back(m);
  }
  ScaleReport report;
  report.rows = scaling::Summarize(ms);
  ModelOptions o;
  o.parameter_count = params;
  o.link.latency_seconds = 50e-6;
  o.link.bandwidth_bytes_per_second = 1.25e9;
  o.extrapolate = {16, 1024};
  o.max_ps_shards = 8;
  AddModel(&report, o);
  ASSERT_TRUE(report.has_model) << report.model_note;
  EXPECT_FALSE(report.fit_inferred);
  EXPECT_EQ(report.fit.points, 2);
  EXPECT_NEAR(report.fit.ab.alpha, 20e-6, 1e-12);
  EXPECT_NEAR(report.fit.ab.beta, 0.5e-9, 1e-16);
  EXPECT_NEAR(report.link_ab.alpha, 70e-6, 1e-12);
  EXPECT_NEAR(report.link_ab.beta, 1.3e-9, 1e-16);
  EXPECT_DOUBLE_EQ(report.exposed_fraction, 0.5);
  EXPECT_DOUBLE_EQ(report.gradient_bytes, 1e6);
  ASSERT_EQ(report.predictions.size(), 2u);
  const scaling::Prediction& p16 = report.predictions[0];
  EXPECT_EQ(p16.k, 16);
  EXPECT_DOUBLE_EQ(p16.compute_seconds, 0.002);
  EXPECT_NEAR(p16.ring_seconds, 30 * 70e-6 + 2.0 * 15 / 16 * 1e6 * 1.3e-9, 1e-12);
  // K = 1024: ring 2046 alpha + ~2 n beta = 145.8 ms beats ps S=8's
  // 2 alpha + 256 n beta = 332.9 ms.
  EXPECT_EQ(report.predictions[1].pick, "ring");
  EXPECT_EQ(report.predictions[1].best_shards, 8);

  // The same job compressed to 16 bits on the wire: the same measured
  // seconds over half the bytes (the fitted per-byte cost doubles), and
  // the extrapolation moves half the bytes over the link (link beta 0.8 ns
  // plus the fitted 1 ns).
  ScaleReport half;
  half.rows = report.rows;
  o.bytes_per_value = 2;
  AddModel(&half, o);
  ASSERT_TRUE(half.has_model) << half.model_note;
  EXPECT_DOUBLE_EQ(half.gradient_bytes, 5e5);
  EXPECT_NEAR(half.fit.ab.beta, 1e-9, 1e-16);
  EXPECT_NEAR(half.link_ab.beta, 1.8e-9, 1e-16);
  EXPECT_NEAR(half.predictions[0].ring_seconds, 30 * 70e-6 + 2.0 * 15 / 16 * 5e5 * 1.8e-9,
              1e-12);
  o.bytes_per_value = 3;
  AddModel(&half, o);
  EXPECT_FALSE(half.has_model);
  EXPECT_EQ(half.model_note, "bytes per gradient value: expected 4 or 2, got 3");
}

TEST(ScaleRunner, AddModelInfersCommunicationWithoutTiming) {
  scaling::Measurement one{1, 100, 1000};  // 0.1 s per step
  scaling::Measurement two{2, 200, 1600};  // 0.125 s: 25 ms of communication
  ScaleReport report;
  report.rows = scaling::Summarize({one, two});
  ModelOptions o;
  o.parameter_count = 1000;  // 4000 bytes
  o.extrapolate = {16};
  AddModel(&report, o);
  ASSERT_TRUE(report.has_model) << report.model_note;
  EXPECT_TRUE(report.fit_inferred);
  // One point: alpha taken as 0, 4000 beta = 25 ms.
  EXPECT_EQ(report.fit.ab.alpha, 0);
  EXPECT_NEAR(report.fit.ab.beta, 0.025 / 4000, 1e-15);
  EXPECT_DOUBLE_EQ(report.exposed_fraction, 1);
  EXPECT_DOUBLE_EQ(report.predictions[0].compute_seconds, 0.1);
}

// K = 4 ran 4 workers on this 2-CPU host: left out of the fit, which then
// has only K = 2 (alpha taken as 0).
TEST(ScaleRunner, AddModelLeavesOutKThatCrowdedThisHost) {
  std::vector<scaling::Measurement> ms = {{1, 100, 1000}, {2, 200, 1600}, {4, 400, 1000}};
  for (auto& m : ms) {
    m.busiest_host = "vm";
    m.max_workers_per_host = m.k;
  }
  ScaleReport report;
  report.rows = scaling::Summarize(ms);
  ModelOptions o;
  o.parameter_count = 1000;
  o.extrapolate = {16};
  o.local_host = "vm";
  o.local_cpus = 2;
  AddModel(&report, o);
  ASSERT_TRUE(report.has_model) << report.model_note;
  EXPECT_EQ(report.fit.points, 1);
  EXPECT_NEAR(report.fit.ab.beta, 0.025 / 4000, 1e-15);  // K = 2's 25 ms only
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.notes[0],
            "K=4 ran more workers on vm than its 2 CPUs: left out of the fit (the step time "
            "there measures CPU sharing, not the network)");
  // Another host's crowding is not this host's business.
  ScaleReport other;
  other.rows = report.rows;
  o.local_host = "elsewhere";
  AddModel(&other, o);
  EXPECT_EQ(other.fit.points, 2);
  EXPECT_TRUE(other.notes.empty());
}

TEST(ScaleRunner, AddModelExplainsWhyNot) {
  ScaleReport report;
  report.rows = scaling::Summarize({scaling::Measurement{1, 100, 1000}});
  ModelOptions o;
  o.parameter_count = 1000;
  o.extrapolate = {16};
  AddModel(&report, o);
  EXPECT_FALSE(report.has_model);
  EXPECT_NE(report.model_note.find("at least one K > 1"), std::string::npos) << report.model_note;
  o.parameter_count = 0;
  AddModel(&report, o);
  EXPECT_NE(report.model_note.find("parameter count"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
