#include "server/state/sync_history.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = lockstep::v1;

// A 32-hex-digit hash that differs per step.
std::string Hash(int64_t step) {
  std::string h = absl::StrCat(step);
  return std::string(32 - h.size(), '0') + h;
}

v1::SyncCheck Check(int64_t step, int k, bool match) {
  v1::SyncCheck c;
  c.set_step(step);
  c.set_all_match(match);
  c.set_majority_hash(Hash(step));
  for (int r = 0; r < k; ++r) c.add_rank_hashes(match || r != 1 ? Hash(step) : Hash(-step));
  if (!match) c.add_differing_ranks(1);
  return c;
}

TEST(SyncHistoryBufferTest, KeepsWindowAndSummarisesOlderRuns) {
  SyncHistoryBuffer b({/*recent=*/4, /*max_mismatches=*/8, /*max_runs=*/8});
  for (int64_t s = 0; s < 20; ++s) b.Add(Check(s, 4, s != 7));
  EXPECT_EQ(b.checked_steps(), 20);
  EXPECT_EQ(b.mismatched_steps(), 1);
  EXPECT_EQ(b.first_mismatch_step(), 7);
  EXPECT_EQ(b.OldestFullStep(), 16);
  v1::SyncHistory h;
  b.Snapshot(0, &h);
  // Runs: steps 0..6 (7 checks), 8..15 (8 checks); mismatch 7 kept in full.
  ASSERT_EQ(h.runs_size(), 2);
  EXPECT_EQ(h.runs(0).first_step(), 0);
  EXPECT_EQ(h.runs(0).last_step(), 6);
  EXPECT_EQ(h.runs(0).checks(), 7);
  EXPECT_EQ(h.runs(0).last_majority_hash(), Hash(6));
  EXPECT_EQ(h.runs(1).first_step(), 8);
  EXPECT_EQ(h.runs(1).last_step(), 15);
  EXPECT_EQ(h.runs(1).checks(), 8);
  ASSERT_EQ(h.checks_size(), 5);
  EXPECT_EQ(h.checks(0).step(), 7);
  EXPECT_FALSE(h.checks(0).all_match());
  EXPECT_EQ(h.checks(4).step(), 19);
  EXPECT_EQ(h.next_step(), -1);

  v1::SyncHistory one;
  b.Snapshot(1, &one);
  ASSERT_EQ(one.checks_size(), 1);
  EXPECT_EQ(one.checks(0).step(), 19);
  EXPECT_EQ(one.checked_steps(), 20);
}

TEST(SyncHistoryBufferTest, BoundsMismatchesAndRuns) {
  SyncHistoryBuffer b({/*recent=*/2, /*max_mismatches=*/3, /*max_runs=*/2});
  // Every third step mismatches: runs of 2, split by mismatches.
  for (int64_t s = 0; s < 300; ++s) b.Add(Check(s, 2, s % 3 != 2));
  EXPECT_EQ(b.checked_steps(), 300);
  EXPECT_EQ(b.mismatched_steps(), 100);
  EXPECT_EQ(b.first_mismatch_step(), 2);
  EXPECT_EQ(b.held_checks(), 2u + 3u);
  EXPECT_EQ(b.held_runs(), 2u);
  v1::SyncHistory h;
  b.Snapshot(0, &h);
  // Window: steps 298 (match), 299 (mismatch). Evicted 0..297: 199
  // matching steps, all in the two runs (merging keeps the count); the
  // newest 3 of the 99 evicted mismatches kept.
  ASSERT_EQ(h.runs_size(), 2);
  EXPECT_EQ(h.runs(0).first_step(), 0);
  EXPECT_EQ(h.runs(0).checks() + h.runs(1).checks(), 199);
  EXPECT_EQ(h.runs(1).last_step(), 297);
  ASSERT_EQ(h.checks_size(), 5);
  EXPECT_EQ(h.checks(0).step(), 290);
  EXPECT_EQ(h.checks(1).step(), 293);
  EXPECT_EQ(h.checks(2).step(), 296);
  EXPECT_EQ(h.checks(3).step(), 298);
  EXPECT_EQ(h.checks(4).step(), 299);
}

TEST(SyncHistoryBufferTest, ReplyOf26000StepsAtK4StaysSmall) {
  // The reported failure: 26000 steps, K = 4, a full-history fetch of
  // 4.6 MB. Any request now gets at most kMaxReplyChecks checks.
  SyncHistoryBuffer b;  // defaults
  for (int64_t s = 0; s < 26000; ++s) b.Add(Check(s, 4, true));
  v1::SyncHistory all;
  b.Snapshot(0, &all);
  EXPECT_EQ(all.checked_steps(), 26000);
  EXPECT_LE(all.checks_size(), SyncHistoryBuffer::kMaxReplyChecks);
  EXPECT_LT(all.ByteSizeLong(), 4u << 20);
  EXPECT_EQ(all.checks(all.checks_size() - 1).step(), 25999);
  ASSERT_EQ(all.runs_size(), 1);
  EXPECT_EQ(all.runs(0).first_step(), 0);
  EXPECT_EQ(all.runs(0).checks() + static_cast<int64_t>(b.held_checks()), 26000);
}

TEST(SyncHistoryBufferTest, ByteCapHoldsForManyRanks) {
  SyncHistoryBuffer b({/*recent=*/2000, 16, 16});
  for (int64_t s = 0; s < 2000; ++s) b.Add(Check(s, 256, true));  // ~9 KB per check, 18 MB
  v1::SyncHistory h;
  b.Snapshot(0, &h);
  EXPECT_LE(h.ByteSizeLong(), SyncHistoryBuffer::kMaxReplyBytes + 16 * 1024);
  EXPECT_GT(h.checks_size(), 50);
  EXPECT_EQ(h.checks(h.checks_size() - 1).step(), 1999);
}

TEST(SyncHistoryBufferTest, PagesInStepOrder) {
  SyncHistoryBuffer b({/*recent=*/100, 4, 4});
  for (int64_t s = 0; s < 100; ++s) b.Add(Check(s, 2, true));
  int64_t from = 10;
  int64_t seen = 0;
  while (from >= 0) {
    v1::SyncHistory page;
    b.Page(from, 25, &page);
    ASSERT_LE(page.checks_size(), 25);
    for (const auto& c : page.checks()) EXPECT_EQ(c.step(), 10 + seen++);
    from = page.next_step();
  }
  EXPECT_EQ(seen, 90);
}

// Late checks (a closed generation's steps reported again after a
// coordinator restart): held in step order inside the window, counted only
// when older than it; the first mismatch is the smallest step.
TEST(SyncHistoryBufferTest, LateChecksGoInStepOrderOrAreOnlyCounted) {
  SyncHistoryBuffer b({/*recent=*/4, /*max_mismatches=*/8, /*max_runs=*/8});
  b.AddLate(Check(10, 2, true));  // newer than everything: appended
  b.Add(Check(15, 2, true));
  b.Add(Check(16, 2, false));
  b.AddLate(Check(12, 2, false));  // inside the window: in step order
  b.AddLate(Check(11, 2, true));
  EXPECT_EQ(b.checked_steps(), 5);
  EXPECT_EQ(b.mismatched_steps(), 2);
  EXPECT_EQ(b.first_mismatch_step(), 12);
  EXPECT_EQ(b.LastStep(), 16);
  // The window holds 4: step 10 left it, summarised as a run.
  EXPECT_EQ(b.OldestFullStep(), 11);
  b.AddLate(Check(9, 2, false));  // older than the window: only counted
  EXPECT_EQ(b.checked_steps(), 6);
  EXPECT_EQ(b.first_mismatch_step(), 9);
  v1::SyncHistory h;
  b.Page(0, 0, &h);
  std::vector<int64_t> steps;
  for (const v1::SyncCheck& c : h.checks()) steps.push_back(c.step());
  EXPECT_EQ(steps, (std::vector<int64_t>{11, 12, 15, 16}));
  EXPECT_EQ(h.checks(0).rank_hashes_size(), 2);  // held compactly, filled in again
}

TEST(SyncHistoryBufferTest, RestoredCountersContinue) {
  SyncHistoryBuffer b;
  b.RestoreCounters(500, 2, 40, 499);
  b.Add(Check(500, 2, false));
  EXPECT_EQ(b.checked_steps(), 501);
  EXPECT_EQ(b.mismatched_steps(), 3);
  EXPECT_EQ(b.first_mismatch_step(), 40);
  EXPECT_EQ(b.LastStep(), 500);
}

TEST(SyncHistoryBufferTest, MatchingChecksAreHeldWithoutRankHashesAndShrinkOnFinish) {
  SyncHistoryBuffer b({/*recent=*/100, 8, 8});
  for (int64_t s = 0; s < 100; ++s) b.Add(Check(s, 64, s != 40));
  // 64 hashes per check on the way out, but only mismatches hold them.
  v1::SyncHistory h;
  b.Snapshot(0, &h);
  ASSERT_EQ(h.checks_size(), 100);
  EXPECT_EQ(h.checks(0).rank_hashes_size(), 64);
  EXPECT_EQ(h.checks(0).rank_hashes(63), Hash(0));
  EXPECT_EQ(h.checks(40).rank_hashes(1), Hash(-40));
  EXPECT_LT(b.SpaceUsed(), 100u * 400u + 64u * 100u) << b.SpaceUsed();
  const size_t full = b.SpaceUsed();
  b.SetLimits({10, 1, 1});
  EXPECT_EQ(b.held_checks(), 11u);  // window 90..99 + the mismatch at 40
  EXPECT_EQ(b.held_runs(), 1u);     // 0..39 and 41..89 merged
  EXPECT_LT(b.SpaceUsed(), full / 2);  // the mismatch with its 64 hashes is most of it
  v1::SyncHistory after;
  b.Snapshot(0, &after);
  ASSERT_EQ(after.runs_size(), 1);
  EXPECT_EQ(after.runs(0).first_step(), 0);
  EXPECT_EQ(after.runs(0).last_step(), 89);
  EXPECT_EQ(after.runs(0).checks(), 89);
  EXPECT_EQ(after.checks(0).step(), 40);
  EXPECT_EQ(after.checked_steps(), 100);
  // A noted all-matching check (a repair) is an event: kept, not a run.
  SyncHistoryBuffer n({/*recent=*/1, 4, 4});
  n.Add(Check(0, 2, true));
  n.MutableNewest()->set_note("repaired: rank 1 copied rank 0's state at step 0");
  n.Add(Check(1, 2, true));
  n.Add(Check(2, 2, true));
  v1::SyncHistory noted;
  EXPECT_EQ(n.Summary(0, 2, &noted), 1);
  EXPECT_EQ(noted.checks(0).step(), 0);
  ASSERT_EQ(noted.runs_size(), 1);
  EXPECT_EQ(noted.runs(0).first_step(), 1);
}

}  // namespace
}  // namespace lockstep
