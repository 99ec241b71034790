// First: google.protobuf.Struct below has a map field (see the header).
#include "tests/tsan/protobuf_map_abi.h"

#include "client/scale_report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep {
namespace {

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::vector<scaling::Row> Rows(bool timing) {
  std::vector<scaling::Measurement> ms(3);
  ms[0] = {1, 128, 1000};
  ms[1] = {2, 256, 1800};
  ms[2] = {4, 512, 2400};
  if (timing) {
    for (auto& m : ms) {
      m.has_timing = true;
      m.step_seconds = m.global_batch / m.examples_per_second;
      m.compute_seconds = 0.1;
      m.communication_seconds = 0.03;
      m.exposed_seconds = 0.02;
      m.peer_wait_seconds = 0.005;
    }
  }
  return scaling::Summarize(ms);
}

ScaleReport Report(bool timing) {
  ScaleReport r;
  r.title = "mlp:256 on <fashion> & \"co\"";
  r.date = "2026-11-30 18:00 UTC";
  r.rows = Rows(timing);
  r.skipped = {8};
  r.threshold = 0.8;
  r.first_below = scaling::FirstKBelow(r.rows, 0.8);
  return r;
}

TEST(ScaleReport, CsvRowsAndColumns) {
  const std::string csv = ScaleCsv(Rows(false));
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "k,global_batch,examples_per_s,ideal_examples_per_s,efficiency,speedup,step_ms,"
            "compute_ms,communication_ms,exposed_ms,peer_wait_ms,timing,workers_per_host,"
            "median_step_ms");
  // K = 2: ideal 2000, efficiency 0.9, speedup 1.8, step 256/1800 s.
  EXPECT_EQ(lines[2], "2,256,1800.0,2000.0,0.9000,1.8000,142.2222,0.0000,0.0000,0.0000,0.0000,none,0,0.0000");
  const std::string timed = ScaleCsv(Rows(true));
  EXPECT_TRUE(absl::StrContains(
      timed,
      "\n4,512,2400.0,4000.0,0.6000,2.4000,213.3333,100.0000,30.0000,20.0000,5.0000,reported,0,"
      "213.3333\n"))
      << timed;
}

TEST(ScaleReport, ModelCsv) {
  scaling::Prediction p;
  p.k = 16;
  p.compute_seconds = 0.002;
  p.ring_seconds = 0.001;
  p.ps1_seconds = 0.004;
  p.best_shards = 4;
  p.best_ps_seconds = 0.0015;
  p.pick = "ring";
  p.comm_seconds = 0.001;
  p.efficiency = 2.0 / 3;
  p.examples_per_second = 1000;
  p.ideal_examples_per_second = 1500;
  std::vector<std::string> lines = absl::StrSplit(ModelCsv({p}), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "k,compute_ms,ring_ms,ps1_ms,best_ps_shards,best_ps_ms,pick,comm_ms,efficiency,"
            "examples_per_s,ideal_examples_per_s");
  EXPECT_EQ(lines[1], "16,2.0000,1.0000,4.0000,4,1.5000,ring,1.0000,0.6667,1000.0,1500.0");
}

TEST(ScaleReport, SvgMarksFirstKBelowThreshold) {
  const std::string svg = ScaleSvg(Report(true));
  EXPECT_TRUE(absl::StartsWith(svg, "<?xml")) << svg.substr(0, 80);
  EXPECT_TRUE(absl::StrContains(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(absl::EndsWith(svg, "</svg>\n"));
  EXPECT_EQ(Count(svg, "<g"), Count(svg, "</g>"));
  // The title is escaped.
  EXPECT_TRUE(absl::StrContains(svg, "mlp:256 on &lt;fashion&gt; &amp; &quot;co&quot;"));
  EXPECT_FALSE(absl::StrContains(svg, "<fashion>"));
  EXPECT_EQ(Count(svg, "class=\"first-below\""), 1);
  EXPECT_TRUE(absl::StrContains(svg, "efficiency &lt; 0.80 from K=4"));
  EXPECT_TRUE(absl::StrContains(svg, "class=\"threshold\""));
  EXPECT_TRUE(absl::StrContains(svg, "skipped K=8"));
  // Three K, four parts each (compute, transfer, wait, other > 0).
  EXPECT_EQ(Count(svg, "class=\"bar\""), 12);
  EXPECT_TRUE(absl::StrContains(svg, "waiting for the slowest peer"));
  EXPECT_TRUE(absl::StrContains(svg, "not fitted: "));
}

TEST(ScaleReport, SvgWithoutTimingOrBelowThreshold) {
  ScaleReport r = Report(false);
  r.threshold = 0.5;
  r.first_below = scaling::FirstKBelow(r.rows, 0.5);
  const std::string svg = ScaleSvg(r);
  EXPECT_EQ(Count(svg, "class=\"first-below\""), 0);
  EXPECT_TRUE(absl::StrContains(svg, "efficiency &gt;= 0.50 at every K measured"));
  EXPECT_EQ(Count(svg, "class=\"bar\""), 3);  // one grey step bar per K
  EXPECT_TRUE(absl::StrContains(svg, "reported no breakdown"));
}

TEST(ScaleReport, SvgDrawsTheModel) {
  ScaleReport r = Report(true);
  r.has_model = true;
  r.link = "10 Gbit/s, 50 us";
  for (int k : {16, 32}) {
    scaling::Prediction p;
    p.k = k;
    p.pick = k == 16 ? "ring" : "ps S=4";
    p.best_shards = 4;
    p.ring_efficiency = 0.9;
    p.ps_efficiency = 0.8;
    r.predictions.push_back(p);
  }
  const std::string svg = ScaleSvg(r);
  EXPECT_TRUE(absl::StrContains(svg, "Model: efficiency at 10 Gbit/s, 50 us"));
  EXPECT_EQ(Count(svg, "class=\"model-ring\""), 1);
  EXPECT_EQ(Count(svg, "class=\"model-ps\""), 1);
  EXPECT_EQ(Count(svg, ">S=4<"), 1);  // labelled only where ps wins
  EXPECT_FALSE(absl::StrContains(svg, "not fitted"));
}

// `lockstep scale --json`: the same figures as the table and CSVs, as one
// JSON object that protobuf's parser accepts; a non-finite figure is null.
TEST(ScaleReport, JsonHoldsTheRowsTheModelAndTheFiles) {
  using google::protobuf::Struct;
  using google::protobuf::Value;
  auto parse = [](const std::string& json) {
    Struct s;
    const auto status = google::protobuf::util::JsonStringToMessage(json, &s);
    EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
    return s;
  };
  ScaleReport r = Report(true);
  r.model_note = "only K = 1 measured";
  r.notes = {"a \"quoted\" note"};
  Struct j = parse(ScaleJson(r, {"p.csv", "p.svg", "p.model.csv"}));
  const auto& f = j.fields();
  EXPECT_EQ(f.at("title").string_value(), r.title);
  EXPECT_EQ(f.at("scaling").string_value(), "weak");
  EXPECT_EQ(f.at("threshold").number_value(), 0.8);
  EXPECT_EQ(f.at("first_k_below").number_value(), 4);
  ASSERT_EQ(f.at("skipped").list_value().values_size(), 1);
  EXPECT_EQ(f.at("skipped").list_value().values(0).number_value(), 8);
  const auto& rows = f.at("rows").list_value();
  ASSERT_EQ(rows.values_size(), 3);
  // K = 2: ideal 2000, efficiency 0.9, speedup 1.8, step 256/1800 s.
  const auto& k2 = rows.values(1).struct_value().fields();
  EXPECT_EQ(k2.at("k").number_value(), 2);
  EXPECT_EQ(k2.at("global_batch").number_value(), 256);
  EXPECT_EQ(k2.at("examples_per_s").number_value(), 1800);
  EXPECT_EQ(k2.at("ideal_examples_per_s").number_value(), 2000);
  EXPECT_NEAR(k2.at("efficiency").number_value(), 0.9, 1e-9);
  EXPECT_NEAR(k2.at("speedup").number_value(), 1.8, 1e-9);
  EXPECT_NEAR(k2.at("step_ms").number_value(), 256.0 / 1800 * 1e3, 1e-6);
  EXPECT_NEAR(k2.at("compute_ms").number_value(), 100, 1e-9);
  EXPECT_NEAR(k2.at("exposed_ms").number_value(), 20, 1e-9);
  EXPECT_EQ(k2.at("timing").string_value(), "reported");
  EXPECT_FALSE(f.at("model").struct_value().fields().at("fitted").bool_value());
  EXPECT_EQ(f.at("model").struct_value().fields().at("note").string_value(), r.model_note);
  EXPECT_EQ(f.at("notes").list_value().values(0).string_value(), r.notes[0]);
  ASSERT_EQ(f.at("files").list_value().values_size(), 3);
  EXPECT_EQ(f.at("files").list_value().values(2).string_value(), "p.model.csv");

  // A fitted model with its predictions; an infinite figure becomes null.
  r.has_model = true;
  r.fit.ab = {2e-5, 1e-9};
  r.fit.points = 1;
  r.link = "10 Gbit/s, 50 us";
  scaling::Prediction p;
  p.k = 16;
  p.pick = "ps S=4";
  p.best_shards = 4;
  p.comm_seconds = 0.004;
  p.efficiency = 0.75;
  p.ring_seconds = std::numeric_limits<double>::infinity();
  r.predictions.push_back(p);
  j = parse(ScaleJson(r, {}));
  const auto& m = j.fields().at("model").struct_value().fields();
  EXPECT_TRUE(m.at("fitted").bool_value());
  EXPECT_EQ(m.at("alpha_s").number_value(), 2e-5);
  EXPECT_EQ(m.at("beta_s_per_byte").number_value(), 1e-9);
  EXPECT_EQ(m.at("link").string_value(), "10 Gbit/s, 50 us");
  const auto& pred = m.at("predictions").list_value().values(0).struct_value().fields();
  EXPECT_EQ(pred.at("k").number_value(), 16);
  EXPECT_EQ(pred.at("pick").string_value(), "ps S=4");
  EXPECT_NEAR(pred.at("comm_ms").number_value(), 4, 1e-9);
  EXPECT_EQ(pred.at("efficiency").number_value(), 0.75);
  EXPECT_EQ(pred.at("ring_ms").kind_case(), Value::kNullValue);
  EXPECT_EQ(j.fields().at("probe").kind_case(), Value::kNullValue);  // no probe ran

  // The alpha probe, when one ran.
  r.probe_model = "softmax";
  r.probe_k = 2;
  r.probe_bytes = 31400;
  r.probe_transfer_seconds = 49e-6;
  r.probe_used = true;
  j = parse(ScaleJson(r, {}));
  const auto& probe = j.fields().at("probe").struct_value().fields();
  EXPECT_EQ(probe.at("model").string_value(), "softmax");
  EXPECT_EQ(probe.at("k").number_value(), 2);
  EXPECT_EQ(probe.at("bytes").number_value(), 31400);
  EXPECT_NEAR(probe.at("transfer_ms").number_value(), 0.049, 1e-12);
  EXPECT_TRUE(probe.at("used").bool_value());
}

TEST(ScaleReport, TableSaysWhereEfficiencyFalls) {
  const std::string t = ScaleTable(Report(false));
  EXPECT_TRUE(absl::StrContains(t, "efficiency falls below 0.80 at K=4")) << t;
  EXPECT_TRUE(absl::StrContains(t, "skipped K=8: more than the idle workers")) << t;
  EXPECT_TRUE(absl::StrContains(t, "model: not fitted")) << t;
  EXPECT_EQ(Count(t, "\n"), 1 + 2 + 3 + 3);
}

TEST(ScaleReport, NotesUnderTableAndFigure) {
  ScaleReport r = Report(false);
  r.notes = {"K=4 ran <more> workers"};
  EXPECT_TRUE(absl::StrContains(ScaleTable(r), "\nnote: K=4 ran <more> workers\n"));
  EXPECT_TRUE(absl::StrContains(ScaleSvg(r), ">note: K=4 ran &lt;more&gt; workers</text>"));
}

TEST(ScaleReport, WriteTextFile) {
  const std::string dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/scale_report_test.csv";
  ASSERT_TRUE(WriteTextFile(path, "a,b\n").ok());
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "a,b\n");
  absl::Status bad = WriteTextFile(dir + "/no/such/dir/x.csv", "x");
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.message(), "no/such/dir/x.csv")) << bad;
}

}  // namespace
}  // namespace lockstep
