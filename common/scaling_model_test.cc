#include "common/scaling_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lockstep {
namespace scaling {
namespace {

// The seed's worked example: 50 ms compute + 10 ms communication per step.
TEST(ScalingModel, SeedWorkedExampleEfficiency) {
  EXPECT_DOUBLE_EQ(PerWorkerEfficiency(0.050, 0.010), 50.0 / 60.0);
  EXPECT_NEAR(PerWorkerEfficiency(0.050, 0.010), 0.8333333, 1e-7);
  // 8 workers at 200 examples/s each: 1,333.3 instead of 1,600.
  EXPECT_NEAR(ClusterThroughput(8, 200, PerWorkerEfficiency(0.050, 0.010)), 4000.0 / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(ClusterThroughput(8, 200, 1.0), 1600);
}

TEST(ScalingModel, SeedWorkedExampleThroughExtrapolate) {
  // 200 examples/s per worker at 50 ms per step: 10 examples per step. A
  // link with 10 ms latency and (practically) infinite bandwidth gives a
  // ps with one shard 2 x 10 ms: use alpha = 5 ms so the round trip is 10 ms.
  Workload w;
  w.compute_seconds = 0.050;
  w.batch = 10;
  w.weak = true;
  w.bytes = 1;
  AlphaBeta ab{0.005, 0};
  auto p = Extrapolate(w, ab, {8}, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].pick, "ps S=1");  // ring: 14 alpha = 70 ms
  EXPECT_DOUBLE_EQ((*p)[0].comm_seconds, 0.010);
  EXPECT_DOUBLE_EQ((*p)[0].efficiency, 50.0 / 60.0);
  EXPECT_NEAR((*p)[0].examples_per_second, 4000.0 / 3.0, 1e-9);
  EXPECT_NEAR((*p)[0].ideal_examples_per_second, 1600, 1e-9);
}

TEST(ScalingModel, EfficiencyEdges) {
  EXPECT_EQ(PerWorkerEfficiency(0, 0), 1);
  EXPECT_EQ(PerWorkerEfficiency(1, 0), 1);
  EXPECT_EQ(PerWorkerEfficiency(0, 1), 0);
  EXPECT_EQ(PerWorkerEfficiency(-1, 1), 0);
}

TEST(ScalingModel, RingClosedForm) {
  const AlphaBeta ab{1e-3, 1e-6};
  EXPECT_EQ(RingAllReduceSeconds(1, 1000, ab), 0);
  // K = 2: 2 alpha + 2 (1/2) n beta = 2 ms + 1 ms.
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(2, 1000, ab), 0.003);
  // K = 4: 6 alpha + 2 (3/4) 1000 beta = 6 ms + 1.5 ms.
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(4, 1000, ab), 0.0075);
}

TEST(ScalingModel, PsClosedForm) {
  const AlphaBeta ab{1e-3, 1e-6};
  // K = 1, S = 1: 2 alpha + 2 n beta = 2 ms + 2 ms.
  EXPECT_DOUBLE_EQ(PsSeconds(1, 1, 1000, ab), 0.004);
  // K = 4, S = 1: the shard receives 4 n: 2 alpha + 8 n beta.
  EXPECT_DOUBLE_EQ(PsSeconds(4, 1, 1000, ab), 0.010);
  // K = 4, S = 2: 2 alpha + 4 n beta.
  EXPECT_DOUBLE_EQ(PsSeconds(4, 2, 1000, ab), 0.006);
  // S >= K: the worker's own link bounds it: 2 alpha + 2 n beta.
  EXPECT_DOUBLE_EQ(PsSeconds(4, 8, 1000, ab), 0.004);
}

TEST(ScalingModel, FitRecoversKnownAlphaBetaFromRing) {
  const AlphaBeta truth{50e-6, 1e-9};
  std::vector<CommSample> s;
  for (int k : {1, 2, 4, 8}) s.push_back({k, 0, 1e6, RingAllReduceSeconds(k, 1e6, truth)});
  auto fit = FitAlphaBeta(s);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->points, 3);  // K = 1 carries nothing
  EXPECT_NEAR(fit->ab.alpha, 50e-6, 1e-15);
  EXPECT_NEAR(fit->ab.beta, 1e-9, 1e-20);
  EXPECT_NEAR(fit->rms_residual, 0, 1e-15);
  EXPECT_EQ(fit->note, "");
}

TEST(ScalingModel, FitRecoversKnownAlphaBetaFromPsAndRing) {
  const AlphaBeta truth{2e-4, 3e-9};
  std::vector<CommSample> s = {
      {2, 1, 8e5, PsSeconds(2, 1, 8e5, truth)},
      {4, 2, 8e5, PsSeconds(4, 2, 8e5, truth)},
      {4, 0, 8e5, RingAllReduceSeconds(4, 8e5, truth)},
  };
  auto fit = FitAlphaBeta(s);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->ab.alpha, 2e-4, 1e-15);
  EXPECT_NEAR(fit->ab.beta, 3e-9, 1e-20);
}

TEST(ScalingModel, FitLeastSquaresOfNoisyPoints) {
  // Ring, n = 1: K = 2 gives the row (2a + b), K = 4 gives (6a + 1.5b).
  // Truth a = 0.5, b = 1 (2 and 4.5 s); K = 2 measured twice, 1 s either
  // side. Normal equations 44a + 13b = 35, 13a + 4.25b = 10.75 give
  // a = 0.5, b = 1 back, residuals -1, +1, 0.
  std::vector<CommSample> s = {{2, 0, 1, 1}, {2, 0, 1, 3}, {4, 0, 1, 4.5}};
  auto fit = FitAlphaBeta(s);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->ab.alpha, 0.5, 1e-12);
  EXPECT_NEAR(fit->ab.beta, 1.0, 1e-12);
  EXPECT_NEAR(fit->rms_residual, std::sqrt(2.0 / 3.0), 1e-12);
  EXPECT_EQ(fit->note, "");
}

TEST(ScalingModel, FitOnePointTakesAlphaZero) {
  auto fit = FitAlphaBeta({{2, 0, 1000, 0.002}});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->ab.alpha, 0);
  EXPECT_DOUBLE_EQ(fit->ab.beta, 0.002 / 1000);  // 2 (1/2) n beta = n beta
  EXPECT_NE(fit->note.find("not separable"), std::string::npos) << fit->note;
}

TEST(ScalingModel, FitClampsNegativeAlpha) {
  // Time falls with K (contention at K = 2 only): the free fit wants
  // alpha < 0; the constrained fit keeps alpha = 0.
  auto fit = FitAlphaBeta({{2, 0, 1, 10}, {8, 0, 1, 1}});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GE(fit->ab.alpha, 0);
  EXPECT_GE(fit->ab.beta, 0);
  EXPECT_FALSE(fit->note.empty());
}

TEST(ScalingModel, FitErrors) {
  EXPECT_EQ(FitAlphaBeta({}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FitAlphaBeta({{1, 0, 100, 0}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto bad = FitAlphaBeta({{0, 0, 100, 1}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("sample 0"), absl::string_view::npos);
}

TEST(ScalingModel, WithLinkAddsLatencyAndWireTime) {
  Link link;
  link.latency_seconds = 50e-6;
  link.bandwidth_bytes_per_second = 1.25e9;  // 10 Gbit/s
  const AlphaBeta ab = WithLink({10e-6, 0.2e-9}, link);
  EXPECT_DOUBLE_EQ(ab.alpha, 60e-6);
  EXPECT_DOUBLE_EQ(ab.beta, 0.2e-9 + 0.8e-9);
}

TEST(ScalingModel, ExtrapolatePicksPsWithShardsAtLargeK) {
  Workload w;
  w.compute_seconds = 0.01;
  w.batch = 128;
  w.bytes = 1e6;
  const AlphaBeta ab{50e-6, 1e-9};
  auto p = Extrapolate(w, ab, {2, 1024}, 64);
  ASSERT_TRUE(p.ok()) << p.status();
  // K = 2: ring 2a + n b = 100 us + 1 ms; ps S=2: 2a + 2 n b = 2.1 ms.
  EXPECT_EQ((*p)[0].pick, "ring");
  EXPECT_DOUBLE_EQ((*p)[0].ring_seconds, 100e-6 + 1e-3);
  // K = 1024: ring 2046 a = 102.3 ms + ~2 ms; ps S=64: 2a + 32 n b = 32.1 ms.
  EXPECT_EQ((*p)[1].pick, "ps S=64");
  EXPECT_EQ((*p)[1].best_shards, 64);
  EXPECT_DOUBLE_EQ((*p)[1].best_ps_seconds, 100e-6 + 32e-3);
  EXPECT_DOUBLE_EQ((*p)[1].efficiency, 0.01 / (0.01 + 0.0321));
  EXPECT_DOUBLE_EQ((*p)[1].ps_efficiency, (*p)[1].efficiency);
  EXPECT_DOUBLE_EQ((*p)[1].ring_efficiency, 0.01 / (0.01 + (*p)[1].ring_seconds));
  EXPECT_DOUBLE_EQ((*p)[1].examples_per_second, 128.0 * 1024 / (0.01 + 0.0321));
}

TEST(ScalingModel, ExtrapolateStrongScalingSplitsCompute) {
  Workload w;
  w.compute_seconds = 0.08;
  w.batch = 256;
  w.weak = false;
  w.bytes = 1000;
  w.exposed_fraction = 0.5;
  auto p = Extrapolate(w, {1e-3, 0}, {4}, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ((*p)[0].compute_seconds, 0.02);
  EXPECT_EQ((*p)[0].pick, "ps S=1");  // 2 ms < ring's 6 ms
  // Half of the 2 ms is exposed.
  EXPECT_DOUBLE_EQ((*p)[0].efficiency, 0.02 / 0.021);
  EXPECT_DOUBLE_EQ((*p)[0].examples_per_second, 256 / 0.021);
  EXPECT_DOUBLE_EQ((*p)[0].ideal_examples_per_second, 4 * 256 / 0.08);
}

TEST(ScalingModel, ExtrapolateRejectsBadInput) {
  Workload w;
  EXPECT_EQ(Extrapolate(w, {}, {2}, 1).status().code(), absl::StatusCode::kInvalidArgument);
  w.compute_seconds = 1;
  w.batch = 1;
  w.bytes = 1;
  EXPECT_EQ(Extrapolate(w, {}, {0}, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Extrapolate(w, {}, {2}, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ScalingModel, SummarizeRelatesToSmallestK) {
  std::vector<Measurement> m(3);
  m[0] = {4, 512, 2400};
  m[1] = {1, 128, 1000};
  m[2] = {2, 256, 1800};
  auto rows = Summarize(m);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].m.k, 1);
  EXPECT_DOUBLE_EQ(rows[1].ideal_examples_per_second, 2000);
  EXPECT_DOUBLE_EQ(rows[1].efficiency, 0.9);
  EXPECT_DOUBLE_EQ(rows[1].speedup, 1.8);
  EXPECT_DOUBLE_EQ(rows[2].efficiency, 0.6);
  EXPECT_DOUBLE_EQ(rows[2].speedup, 2.4);
  EXPECT_EQ(FirstKBelow(rows, 0.8), 4);
  EXPECT_EQ(FirstKBelow(rows, 0.5), 0);
  // Without K = 1 the base is the smallest K: ideal(4) = 1800 x 4 / 2.
  auto no_one = Summarize({m[0], m[2]});
  EXPECT_DOUBLE_EQ(no_one[1].ideal_examples_per_second, 3600);
  EXPECT_DOUBLE_EQ(no_one[1].speedup, 2400.0 / 1800 * 2);
  EXPECT_TRUE(Summarize({}).empty());
}

TEST(ScalingModel, TransferSecondsMeasuredOrInferred) {
  Measurement base{1, 100, 1000};  // 0.1 s per step
  Measurement two{2, 200, 1600};   // 0.125 s per step
  auto rows = Summarize({base, two});
  CommEstimate weak = TransferSeconds(rows[1], rows[0], true);
  EXPECT_TRUE(weak.inferred);
  EXPECT_DOUBLE_EQ(weak.seconds, 0.025);
  // Strong (same batch 100 at K = 2 taking 0.08 s): expected 0.05 s.
  Measurement strong2{2, 100, 1250};
  auto srows = Summarize({base, strong2});
  EXPECT_DOUBLE_EQ(TransferSeconds(srows[1], srows[0], false).seconds, 0.03);
  rows[1].m.has_timing = true;
  rows[1].m.communication_seconds = 0.02;
  rows[1].m.peer_wait_seconds = 0.005;
  CommEstimate measured = TransferSeconds(rows[1], rows[0], true);
  EXPECT_FALSE(measured.inferred);
  EXPECT_DOUBLE_EQ(measured.seconds, 0.015);
}

}  // namespace
}  // namespace scaling
}  // namespace lockstep
