#include "client/scale_report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

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
