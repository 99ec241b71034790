#include "common/collective/ps_aggregator.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/collective/chunking.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kFar = absl::InfiniteFuture();

TEST(PsShardTest, InvalidArguments) {
  PsShard shard(2, 3, 4);
  const std::vector<float> x = {1, 2, 3};
  absl::Status s = shard.Push(1, 0, 2, x, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps shard 4"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("worker 2"));
  s = shard.Push(1, 0, 0, std::vector<float>{1, 2}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard length 3"));
  EXPECT_EQ(shard.Push(1, 0, 0, x, -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Push(1, -1, 0, x, 1).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> out(3);
  int64_t count;
  EXPECT_EQ(shard.Pull(1, 0, -1, absl::MakeSpan(out), &count, kFar).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Pull(1, 0, 0, absl::Span<float>(out.data(), 2), &count, kFar)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Pull(1, 0, 0, absl::MakeSpan(out), nullptr, kFar).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PsShardTest, ConflictingDuplicateIsRejected) {
  PsShard shard(2, 1);
  const std::vector<float> x = {1};
  ASSERT_TRUE(shard.Push(1, 0, 0, x, 3).ok());
  absl::Status s = shard.Push(1, 0, 0, x, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("count 3"));
}

TEST(PsShardTest, SumsInRankOrderWhateverTheArrivalOrder) {
  // x0 = 1, x1 = 1e8, x2 = -1e8 arriving as 2, 1, 0. Rank order gives
  // (1 + 1e8) + -1e8 = 0 in float (the 1 is absorbed); arrival order would
  // give (-1e8 + 1e8) + 1 = 1.
  PsShard shard(3, 1);
  ASSERT_TRUE(shard.Push(1, 0, 2, std::vector<float>{-1e8f}, 1).ok());
  ASSERT_TRUE(shard.Push(1, 0, 1, std::vector<float>{1e8f}, 1).ok());
  ASSERT_TRUE(shard.Push(1, 0, 0, std::vector<float>{1.0f}, 1).ok());
  std::vector<float> out(1);
  int64_t count = 0;
  ASSERT_TRUE(shard.Pull(1, 0, 0, absl::MakeSpan(out), &count, kFar).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(count, 3);
}

TEST(PsShardTest, KeepsOnlyTheTwoNewestStepsPerJob) {
  PsShard shard(1, 2);
  const std::vector<float> x = {1, 2};
  for (int64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(shard.Push(9, step, 0, x, 1).ok());
    if (step >= 1) {
      EXPECT_THAT(shard.RetainedSteps(9), ElementsAre(step - 1, step));
    }
  }
  // Another job is independent.
  ASSERT_TRUE(shard.Push(8, 0, 0, x, 1).ok());
  EXPECT_THAT(shard.RetainedSteps(8), ElementsAre(0));
  EXPECT_THAT(shard.RetainedSteps(9), ElementsAre(3, 4));
  // Old steps are refused by Push and Pull.
  absl::Status s = shard.Push(9, 2, 0, x, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("retained steps 3 and 4"));
  std::vector<float> out(2);
  int64_t count;
  EXPECT_EQ(shard.Pull(9, 1, 0, absl::MakeSpan(out), &count, kFar).code(),
            absl::StatusCode::kFailedPrecondition);
  // A jump ahead retires both older slots.
  ASSERT_TRUE(shard.Push(9, 10, 0, x, 1).ok());
  EXPECT_THAT(shard.RetainedSteps(9), ElementsAre(10));
  shard.ForgetJob(9);
  EXPECT_TRUE(shard.RetainedSteps(9).empty());
}

TEST(PsShardTest, AWaitingPullFailsWhenItsStepIsRecycled) {
  PsShard shard(2, 1);
  const std::vector<float> x = {1};
  ASSERT_TRUE(shard.Push(1, 0, 0, x, 1).ok());  // step 0 never completes
  absl::Notification started;
  absl::Status pulled;
  std::thread puller([&] {
    std::vector<float> out(1);
    int64_t count;
    started.Notify();
    pulled = shard.Pull(1, 0, 0, absl::MakeSpan(out), &count, kFar);
  });
  started.WaitForNotification();
  ASSERT_TRUE(shard.Push(1, 2, 0, x, 1).ok());  // recycles step 0's slot
  puller.join();
  EXPECT_EQ(pulled.code(), absl::StatusCode::kFailedPrecondition) << pulled;
}

TEST(PsShardTest, EmptyShard) {
  PsShard shard(2, 0);
  ASSERT_TRUE(shard.Push(1, 0, 0, {}, 0).ok());
  ASSERT_TRUE(shard.Push(1, 0, 1, {}, 5).ok());
  int64_t count = 0;
  ASSERT_TRUE(shard.Pull(1, 0, 1, {}, &count, kFar).ok());
  EXPECT_EQ(count, 5);
}

TEST(PsAllReduceTest, InvalidArguments) {
  auto owned = MakeInProcessPsClients(1, 2, 4);
  std::vector<PsClient*> clients = {owned[0].get(), owned[1].get()};
  std::vector<float> v(4);
  int64_t count = 1;
  PsAllReduceOptions o;
  EXPECT_EQ(PsAllReduce({}, absl::MakeSpan(v), &count, o).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<PsClient*> with_null = {clients[0], nullptr};
  EXPECT_EQ(PsAllReduce(with_null, absl::MakeSpan(v), &count, o).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PsAllReduce(clients, absl::MakeSpan(v), nullptr, o).code(),
            absl::StatusCode::kInvalidArgument);
  o.timeout = absl::ZeroDuration();
  EXPECT_EQ(PsAllReduce(clients, absl::MakeSpan(v), &count, o).code(),
            absl::StatusCode::kInvalidArgument);
  // Wrong vector length for the shards: the shard names the problem.
  o.timeout = absl::Seconds(10);
  std::vector<float> wrong(5);
  absl::Status s = PsAllReduce(clients, absl::MakeSpan(wrong), &count, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("push to shard 0"));
}

TEST(PsAllReduceTest, ShardsDisagreeingOnTheCountIsAnError) {
  // Worker 1 pushed different counts to the two shards (a buggy client):
  // worker 0's round notices.
  auto owned = MakeInProcessPsClients(2, 2, 4);
  std::vector<PsClient*> clients = {owned[0].get(), owned[1].get()};
  ASSERT_TRUE(clients[0]->Push(1, 0, 1, std::vector<float>(2), 5, kFar).ok());
  ASSERT_TRUE(clients[1]->Push(1, 0, 1, std::vector<float>(2), 6, kFar).ok());
  std::vector<float> v(4);
  int64_t count = 1;
  PsAllReduceOptions o;
  o.job = 1;
  o.worker = 0;
  o.timeout = absl::Seconds(10);
  absl::Status s = PsAllReduce(clients, absl::MakeSpan(v), &count, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard 1"));
  EXPECT_EQ(count, 1);
}

TEST(PsAllReduceTest, MissingWorkerTimesOutNamingIt) {
  auto owned = MakeInProcessPsClients(3, 1, 4);
  std::vector<PsClient*> clients = {owned[0].get()};
  std::vector<std::vector<float>> bufs(2, std::vector<float>(4, 1.0f));
  std::vector<absl::Status> st(2);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      int64_t count = 1;
      PsAllReduceOptions o;
      o.worker = w;
      o.timeout = absl::Seconds(2);  // both pushes land first, even under TSan
      st[w] = PsAllReduce(clients, absl::MakeSpan(bufs[w]), &count, o);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("workers [2]"));
  }
}

}  // namespace
}  // namespace lockstep
