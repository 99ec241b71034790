#include "common/clock.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(FakeClockTest, StartsAtGivenTimeAndOnlyMovesWhenTold) {
  const absl::Time start = absl::FromUnixSeconds(42);
  FakeClock clock(start);
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now(), start + absl::Milliseconds(1500));
  clock.Advance(absl::Seconds(-1));
  EXPECT_EQ(clock.Now(), start + absl::Milliseconds(500));
  clock.Set(absl::FromUnixSeconds(7));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(7));
}

TEST(FakeClockTest, DefaultStartIsFixed) {
  FakeClock a, b;
  EXPECT_EQ(a.Now(), b.Now());
  EXPECT_EQ(absl::ToUnixSeconds(a.Now()), 1000000000);
}

TEST(FakeClockTest, ConcurrentAdvancesAllCount) {
  FakeClock clock(absl::UnixEpoch());
  constexpr int kThreads = 4, kPerThread = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&clock] {
      for (int i = 0; i < kPerThread; ++i) {
        clock.Advance(absl::Microseconds(1));
        (void)clock.Now();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Microseconds(kThreads * kPerThread));
}

TEST(RealClockTest, FollowsAbslNow) {
  RealClock clock;
  const absl::Time before = absl::Now();
  const absl::Time now = clock.Now();
  const absl::Time after = absl::Now();
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
}

TEST(ClockTest, UsableThroughBaseClass) {
  FakeClock fake(absl::FromUnixSeconds(100));
  Clock* clock = &fake;
  fake.Advance(absl::Seconds(5));
  EXPECT_EQ(clock->Now(), absl::FromUnixSeconds(105));
}

}  // namespace
}  // namespace lockstep
