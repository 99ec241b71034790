// PsKeyTable, and a PsShardRegistry that asks it before creating a key (as
// lockstep-server runs them): K and S come from the coordinator's word, a
// shard's length from the key's first request.
#include "server/ps/ps_key_table.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/collective/ps_aggregator.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(PsKeyTableTest, SetWaitForget) {
  PsKeyTable t;
  EXPECT_EQ(t.Wait(5, absl::InfinitePast()).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(t.Set(5, {3, 2}).ok());
  absl::StatusOr<PsKeyShape> s = t.Wait(5, absl::InfinitePast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_workers, 3);
  EXPECT_EQ(s->num_shards, 2);
  ASSERT_TRUE(t.Set(5, {2, 2}).ok());  // a regroup's new K replaces it
  EXPECT_EQ(t.Wait(5, absl::InfinitePast())->num_workers, 2);
  t.Forget(5);
  t.Forget(5);
  EXPECT_EQ(t.Wait(5, absl::InfinitePast()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.size(), 0);
}

TEST(PsKeyTableTest, RefusesShapesOutOfRange) {
  PsKeyTable t;
  EXPECT_EQ(t.Set(1, {0, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Set(1, {PsShardRegistry::kMaxWorkers + 1, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Set(1, {2, 0}).code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = t.Set(1, {2, PsShardRegistry::kMaxShards + 1});
  EXPECT_NE(s.message().find("ps key 1: num_shards is 4097, expected 1..4096"),
            std::string::npos)
      << s;
  EXPECT_EQ(t.size(), 0);
}

TEST(PsKeyTableTest, AWaitEndsWhenTheKeyArrives) {
  PsKeyTable t;
  absl::StatusOr<PsKeyShape> got;
  std::thread waiter([&] { got = t.Wait(7, absl::Now() + absl::Seconds(60)); });
  ASSERT_TRUE(t.Set(7, {4, 1}).ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->num_workers, 4);
}

TEST(PsKeyTableTest, HoldsAtMostItsCapacityDroppingTheOldest) {
  PsKeyTable t(3);
  for (uint64_t k = 1; k <= 3; ++k) ASSERT_TRUE(t.Set(k, {1, 1}).ok());
  ASSERT_TRUE(t.Set(1, {2, 1}).ok());  // set again: now the newest
  ASSERT_TRUE(t.Set(4, {1, 1}).ok());  // drops 2, the oldest
  EXPECT_EQ(t.size(), 3);
  EXPECT_FALSE(t.Wait(2, absl::InfinitePast()).ok());
  for (uint64_t k : {1, 3, 4}) EXPECT_TRUE(t.Wait(k, absl::InfinitePast()).ok()) << k;
  t.Forget(3);
  for (uint64_t k = 10; k < 1000; ++k) ASSERT_TRUE(t.Set(k, {1, 1}).ok());
  EXPECT_EQ(t.size(), 3);
}

// At most kMaxWaiters calls wait for unknown keys; one more is refused at
// once, and a known key is answered whatever the number waiting.
TEST(PsKeyTableTest, AtMostMaxWaitersWait) {
  PsKeyTable t;
  ASSERT_TRUE(t.Set(1, {1, 1}).ok());
  std::vector<std::thread> waiters;
  std::vector<absl::StatusOr<PsKeyShape>> got(PsKeyTable::kMaxWaiters);
  for (int i = 0; i < PsKeyTable::kMaxWaiters; ++i) {
    waiters.emplace_back([&, i] { got[i] = t.Wait(100, absl::Now() + absl::Seconds(60)); });
  }
  // Once all of them wait (polled, no sleep), one more is refused at once.
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (t.waiting() < PsKeyTable::kMaxWaiters && absl::Now() < until) std::this_thread::yield();
  ASSERT_EQ(t.waiting(), PsKeyTable::kMaxWaiters);
  const absl::Status refused = t.Wait(101, absl::Now() + absl::Seconds(30)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("64 requests already wait"), std::string::npos) << refused;
  EXPECT_TRUE(t.Wait(1, absl::Now() + absl::Seconds(1)).ok());
  ASSERT_TRUE(t.Set(100, {2, 1}).ok());
  for (std::thread& w : waiters) w.join();
  for (const auto& g : got) EXPECT_TRUE(g.ok()) << g.status();
}

// The registry with the table as its key_shape.
TEST(PsKeyTableTest, TheRegistryCreatesOnlyStartedKeysWithTheirKAndS) {
  PsKeyTable t;
  PsRegistryLimits limits;
  limits.key_shape = [&t](uint64_t job, absl::Time deadline) { return t.Wait(job, deadline); };
  PsShardRegistry r(limits);
  absl::StatusOr<std::shared_ptr<PsShard>> s = r.GetShard(9, 0, 2, 100);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("ps: job 9 shard 0: job key 9 was not started"),
            std::string::npos)
      << s.status();
  ASSERT_TRUE(t.Set(9, {2, 2}).ok());
  s = r.GetShard(9, 0, 3, 100);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_workers is 3, expected 2 (the job's K"),
            std::string::npos)
      << s.status();
  s = r.GetShard(9, 2, 2, 100);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("shard is 2, expected 0..1 (the job's shards"),
            std::string::npos)
      << s.status();
  EXPECT_EQ(r.num_jobs(), 0);
  ASSERT_TRUE(r.GetShard(9, 0, 2, 100).ok());
  ASSERT_TRUE(r.GetShard(9, 1, 2, 99).ok());  // each shard's own length
  EXPECT_EQ(r.GetShard(9, 1, 2, 98).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetShard(9, 2, 2, 99).status().code(), absl::StatusCode::kInvalidArgument);
  // Held keys are not asked again (the table may have dropped them).
  t.Forget(9);
  EXPECT_TRUE(r.GetShard(9, 0, 2, 100).ok());
  EXPECT_EQ(r.num_jobs(), 1);
}

// A key the registry forgot is never created again, even by a request
// that got its shape before the forget (its coordinator's word may lag).
TEST(PsKeyTableTest, AForgottenKeyStaysGone) {
  PsKeyTable t;
  PsRegistryLimits limits;
  limits.key_shape = [&t](uint64_t job, absl::Time deadline) { return t.Wait(job, deadline); };
  PsShardRegistry r(limits);
  ASSERT_TRUE(t.Set(9, {2, 1}).ok());
  ASSERT_TRUE(r.GetShard(9, 0, 2, 100).ok());
  EXPECT_TRUE(r.Forget(9));
  absl::StatusOr<std::shared_ptr<PsShard>> s = r.GetShard(9, 0, 2, 100);  // t still has 9
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("the job key was forgotten (its job ended or regrouped)"),
            std::string::npos)
      << s.status();
  EXPECT_EQ(r.num_jobs(), 0);
  // Never held, forgotten (an older generation the coordinator drops).
  ASSERT_TRUE(t.Set(10, {2, 1}).ok());
  r.Forget(10);
  EXPECT_EQ(r.GetShard(10, 0, 2, 100).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(t.Set(11, {2, 1}).ok());
  EXPECT_TRUE(r.GetShard(11, 0, 2, 100).ok());
}

// Without key_shape (a server without a coordinator) the first request
// fixes K, as before.
TEST(PsKeyTableTest, WithoutKeyShapeTheFirstRequestFixesK) {
  PsShardRegistry r;
  ASSERT_TRUE(r.GetShard(9, 5, 3, 10).ok());
  EXPECT_EQ(r.GetShard(9, 0, 2, 10).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
