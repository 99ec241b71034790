#include "server/job_series.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

LossPoint At(int64_t step) {
  LossPoint p;
  p.step = step;
  p.loss = 1.0 / static_cast<double>(step + 1);
  p.examples = 8 * (step + 1);
  return p;
}

std::vector<int64_t> Steps(const std::vector<LossPoint>& points) {
  std::vector<int64_t> out;
  for (const LossPoint& p : points) out.push_back(p.step);
  return out;
}

TEST(DownsampledSeriesTest, KeepsEverythingUntilFull) {
  JobSeries series(4);
  for (int64_t s = 0; s < 4; ++s) series.AddStep(At(s));
  const JobSeriesSnapshot snap = series.Snapshot();
  EXPECT_EQ(Steps(snap.loss), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(snap.loss_stride, 1);
  EXPECT_EQ(snap.steps_offered, 4);
  EXPECT_DOUBLE_EQ(snap.loss[3].loss, 0.25);
}

TEST(DownsampledSeriesTest, HalvesWhenFullAndKeepsTheLatest) {
  JobSeries series(4);
  // 0..4: the 5th point overflows -> keep 0, 2, 4; stride 2.
  for (int64_t s = 0; s < 5; ++s) series.AddStep(At(s));
  EXPECT_EQ(Steps(series.Snapshot().loss), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(series.Snapshot().loss_stride, 2);
  // Step 5 is not on the stride: returned as the latest, not kept.
  series.AddStep(At(5));
  EXPECT_EQ(Steps(series.Snapshot().loss), (std::vector<int64_t>{0, 2, 4, 5}));
  // 6 kept (0 2 4 6), 7 latest; 8 overflows -> 0 4 8, stride 4.
  series.AddStep(At(6));
  series.AddStep(At(7));
  EXPECT_EQ(Steps(series.Snapshot().loss), (std::vector<int64_t>{0, 2, 4, 6, 7}));
  series.AddStep(At(8));
  EXPECT_EQ(Steps(series.Snapshot().loss), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(series.Snapshot().loss_stride, 4);
  EXPECT_EQ(series.Snapshot().steps_offered, 9);
}

TEST(DownsampledSeriesTest, LongJobStaysBoundedAndEvenlySpaced) {
  JobSeries series;  // 1024 points
  const int64_t n = 26000;
  for (int64_t s = 0; s < n; ++s) series.AddStep(At(s));
  const JobSeriesSnapshot snap = series.Snapshot();
  // 26000 steps: stride 32 keeps 0, 32, ..., 25984 (813 points) + latest.
  EXPECT_EQ(snap.loss_stride, 32);
  ASSERT_EQ(snap.loss.size(), 814u);
  for (size_t i = 0; i + 1 < snap.loss.size(); ++i) EXPECT_EQ(snap.loss[i].step, 32 * int64_t(i));
  EXPECT_EQ(snap.loss.back().step, n - 1);
  EXPECT_EQ(snap.steps_offered, n);
}

TEST(JobSeriesTest, EvalPoints) {
  JobSeries series(4);
  series.AddEval(EvalPoint{10, 0.5, 1.5});
  series.AddEval(EvalPoint{20, 0.75, 0.5});
  const JobSeriesSnapshot snap = series.Snapshot();
  ASSERT_EQ(snap.eval.size(), 2u);
  EXPECT_EQ(snap.eval[1].step, 20);
  EXPECT_DOUBLE_EQ(snap.eval[1].test_accuracy, 0.75);
  EXPECT_DOUBLE_EQ(snap.eval[1].test_loss, 0.5);
  EXPECT_EQ(snap.evals_offered, 2);
}

TEST(JobSeriesTest, SyncStripOneCellPerCheckUntilFull) {
  JobSeries series(4);
  series.AddCheck(0, true);
  series.AddCheck(1, true);
  series.AddCheck(2, false);
  const JobSeriesSnapshot snap = series.Snapshot();
  ASSERT_EQ(snap.sync.size(), 3u);
  EXPECT_EQ(snap.sync[2].first_step, 2);
  EXPECT_EQ(snap.sync[2].last_step, 2);
  EXPECT_EQ(snap.sync[2].checks, 1);
  EXPECT_EQ(snap.sync[2].mismatches, 1);
  EXPECT_EQ(snap.sync[0].mismatches, 0);
  EXPECT_EQ(snap.checks_per_cell, 1);
}

TEST(JobSeriesTest, SyncStripMergesPairwiseAndKeepsMismatches) {
  JobSeries series(4);
  // Steps 0..4, a mismatch at step 3: the 5th cell overflows -> cells
  // [0-1] [2-3 bad] [4], two checks per cell.
  for (int64_t s = 0; s < 5; ++s) series.AddCheck(s, s != 3);
  JobSeriesSnapshot snap = series.Snapshot();
  ASSERT_EQ(snap.sync.size(), 3u);
  EXPECT_EQ(snap.checks_per_cell, 2);
  EXPECT_EQ(snap.sync[0].first_step, 0);
  EXPECT_EQ(snap.sync[0].last_step, 1);
  EXPECT_EQ(snap.sync[0].checks, 2);
  EXPECT_EQ(snap.sync[0].mismatches, 0);
  EXPECT_EQ(snap.sync[1].first_step, 2);
  EXPECT_EQ(snap.sync[1].last_step, 3);
  EXPECT_EQ(snap.sync[1].mismatches, 1);
  EXPECT_EQ(snap.sync[2].checks, 1);
  // Step 5 fills the last cell.
  series.AddCheck(5, true);
  snap = series.Snapshot();
  ASSERT_EQ(snap.sync.size(), 3u);
  EXPECT_EQ(snap.sync[2].first_step, 4);
  EXPECT_EQ(snap.sync[2].last_step, 5);
  EXPECT_EQ(snap.sync[2].checks, 2);
  EXPECT_EQ(snap.checks_offered, 6);
}

TEST(JobSeriesTest, SyncStripOfALongJobIsBoundedAndCountsEveryCheck) {
  JobSeries series;  // 1024 cells
  const int64_t n = 26000;
  for (int64_t s = 0; s < n; ++s) series.AddCheck(s, s != 12345);
  const JobSeriesSnapshot snap = series.Snapshot();
  EXPECT_LE(snap.sync.size(), 1024u);
  EXPECT_EQ(snap.checks_per_cell, 32);
  int64_t checks = 0, mismatches = 0, next = 0;
  for (const SyncCell& c : snap.sync) {
    EXPECT_EQ(c.first_step, next);
    next = c.last_step + 1;
    checks += c.checks;
    mismatches += c.mismatches;
    if (c.mismatches > 0) {
      EXPECT_LE(c.first_step, 12345);
      EXPECT_GE(c.last_step, 12345);
    }
  }
  EXPECT_EQ(checks, n);
  EXPECT_EQ(mismatches, 1);
  EXPECT_EQ(next, n);
}

}  // namespace
}  // namespace lockstep
