#include "server/watch_fanout.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

v1::JobStatus Snap(v1::JobState state, int64_t step) {
  v1::JobStatus s;
  s.set_state(state);
  s.set_step(step);
  return s;
}

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Duration kInterval = absl::Milliseconds(200);

TEST(WatchVersionsTest, OneIncreasingCounterAcrossJobs) {
  WatchVersions v;
  JobWatch a, b;
  v.Bump(&a);
  v.StateChanged(&b, Snap(v1::PENDING, 0));
  v.Bump(&a);
  EXPECT_EQ(a.version, 3u);
  EXPECT_EQ(b.version, 2u);
  EXPECT_EQ(v.version(), 3u);
  ASSERT_EQ(b.state_events.size(), 1u);
  EXPECT_EQ(b.state_events[0].first, 2u);
  EXPECT_TRUE(a.state_events.empty());
}

TEST(WatchNotBeforeTest, NothingSentYetMeansNoWait) {
  EXPECT_EQ(WatchNotBefore(absl::InfinitePast(), kInterval), absl::InfinitePast());
  EXPECT_EQ(WatchNotBefore(kT0, kInterval), kT0 + kInterval);
}

TEST(NextEventsTest, FirstLookGetsTheCurrentSnapshotAtOnce) {
  WatchVersions v;
  JobWatch w;
  v.StateChanged(&w, Snap(v1::PENDING, 0));
  v.StateChanged(&w, Snap(v1::RUNNING, 0));
  v.Bump(&w);
  int calls = 0;
  JobEvents e = NextEvents(w, 0, kT0, absl::InfinitePast(), [&] {
    ++calls;
    return Snap(v1::RUNNING, 7);
  });
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].step(), 7);
  EXPECT_EQ(e.version, 3u);
  EXPECT_EQ(e.sent, kT0);
  EXPECT_EQ(calls, 1);
}

TEST(NextEventsTest, ProgressIsCoalescedToOneEventPerInterval) {
  WatchVersions v;
  JobWatch w;
  v.StateChanged(&w, Snap(v1::RUNNING, 0));  // version 1
  for (int i = 0; i < 5; ++i) v.Bump(&w);    // versions 2..6: progress
  const absl::Time not_before = WatchNotBefore(kT0, kInterval);
  // Too soon after the last event: nothing, and the version stays.
  EXPECT_FALSE(WatchReady(w, 1, kT0 + absl::Milliseconds(100), not_before));
  JobEvents e = NextEvents(w, 1, kT0 + absl::Milliseconds(100), not_before,
                           [] { return Snap(v1::RUNNING, 5); });
  EXPECT_TRUE(e.events.empty());
  EXPECT_EQ(e.version, 1u);
  EXPECT_EQ(e.sent, absl::InfinitePast());
  // Interval over: one snapshot for the five changes.
  ASSERT_TRUE(WatchReady(w, 1, not_before, not_before));
  e = NextEvents(w, 1, not_before, not_before, [] { return Snap(v1::RUNNING, 5); });
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.events[0].step(), 5);
  EXPECT_EQ(e.version, 6u);
  // Nothing new after it.
  EXPECT_FALSE(WatchReady(w, 6, not_before + absl::Seconds(9), not_before));
}

TEST(NextEventsTest, StateChangesComeAtOnceInOrderAndTheEndIsLast) {
  WatchVersions v;
  JobWatch w;
  v.StateChanged(&w, Snap(v1::PENDING, 0));   // 1
  v.StateChanged(&w, Snap(v1::RUNNING, 0));   // 2
  v.Bump(&w);                                 // 3
  v.StateChanged(&w, Snap(v1::SUCCEEDED, 9)); // 4
  const absl::Time not_before = WatchNotBefore(kT0, kInterval);
  // Within the interval: state changes are not held back.
  const absl::Time now = kT0 + absl::Milliseconds(1);
  ASSERT_TRUE(WatchReady(w, 1, now, not_before));
  int calls = 0;
  JobEvents e = NextEvents(w, 1, now, not_before, [&] {
    ++calls;
    return Snap(v1::SUCCEEDED, 9);
  });
  ASSERT_EQ(e.events.size(), 2u);
  EXPECT_EQ(e.events[0].state(), v1::RUNNING);
  EXPECT_EQ(e.events[1].state(), v1::SUCCEEDED);
  EXPECT_EQ(e.version, 4u);
  EXPECT_EQ(calls, 0);  // the terminal snapshot is the last event
}

TEST(NextEventsTest, AStateChangeThenNewerProgressOnceTheIntervalIsOver) {
  WatchVersions v;
  JobWatch w;
  v.StateChanged(&w, Snap(v1::PENDING, 0));  // 1
  v.StateChanged(&w, Snap(v1::RUNNING, 0));  // 2
  v.Bump(&w);                                // 3
  const absl::Time not_before = WatchNotBefore(kT0, kInterval);
  auto current = [] { return Snap(v1::RUNNING, 1); };
  // Inside the interval: the state change alone.
  JobEvents e = NextEvents(w, 1, kT0, not_before, current);
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(e.version, 2u);
  // After it: the state change and the current snapshot.
  e = NextEvents(w, 1, not_before, not_before, current);
  ASSERT_EQ(e.events.size(), 2u);
  EXPECT_EQ(e.events[1].step(), 1);
  EXPECT_EQ(e.version, 3u);
}

}  // namespace
}  // namespace lockstep
