#include "common/collective/fault_transport.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/collective/inproc_transport.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

const absl::Time kFar = absl::InfiniteFuture();

MessageKey Key(int32_t chunk) { return MakeKey(1, 0, 0, chunk); }

std::vector<uint8_t> Msg(uint8_t v) { return std::vector<uint8_t>(4, v); }

// Receives the next message from `from` with key chunk `chunk`.
std::vector<uint8_t> RecvOrDie(Transport& t, int from, int32_t chunk) {
  std::vector<uint8_t> got(4);
  absl::Status s = t.Recv(from, Key(chunk), absl::MakeSpan(got), kFar);
  EXPECT_TRUE(s.ok()) << s;
  return got;
}

TEST(FaultTransportTest, NoRulesForwardsEverything) {
  InProcessHub hub(2);
  FaultTransport ft(hub.endpoint(0), {});
  EXPECT_EQ(ft.rank(), 0);
  EXPECT_EQ(ft.world_size(), 2);
  ASSERT_TRUE(ft.Send(1, Key(0), Msg(1), kFar).ok());
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 0), Msg(1));
  ASSERT_TRUE(hub.endpoint(1)->Send(0, Key(0), Msg(2), kFar).ok());
  EXPECT_EQ(RecvOrDie(ft, 1, 0), Msg(2));
}

TEST(FaultTransportTest, FailTheNthSendNamesThePeer) {
  InProcessHub hub(2);
  FaultTransport ft(hub.endpoint(0),
                    {FaultRule::Nth(FaultDirection::kSend, 1,
                                    FaultAction::kFail)});
  ASSERT_TRUE(ft.Send(1, Key(0), Msg(1), kFar).ok());
  absl::Status s = ft.Send(1, Key(1), Msg(2), kFar);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 1"));
  ASSERT_TRUE(ft.Send(1, Key(2), Msg(3), kFar).ok());  // fires once only
  EXPECT_EQ(ft.hits(0), 1);
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 0), Msg(1));
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 2), Msg(3));
}

TEST(FaultTransportTest, DropLosesTheMessageSilently) {
  InProcessHub hub(2);
  FaultTransport ft(hub.endpoint(0),
                    {FaultRule::Nth(FaultDirection::kSend, 0,
                                    FaultAction::kDrop)});
  ASSERT_TRUE(ft.Send(1, Key(0), Msg(1), kFar).ok());
  ASSERT_TRUE(ft.Send(1, Key(1), Msg(2), kFar).ok());
  // The receiver expecting chunk 0 sees chunk 1: a detected mismatch.
  std::vector<uint8_t> got(4);
  absl::Status s = hub.endpoint(1)->Recv(0, Key(0), absl::MakeSpan(got), kFar);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 1), Msg(2));
}

TEST(FaultTransportTest, CorruptFlipsOneByteOfACopy) {
  InProcessHub hub(2);
  FaultRule rule =
      FaultRule::Nth(FaultDirection::kSend, 0, FaultAction::kCorrupt);
  rule.corrupt_offset = 6;  // 6 % 4 = byte 2
  FaultTransport ft(hub.endpoint(0), {rule});
  const std::vector<uint8_t> msg = {1, 2, 3, 4};
  ASSERT_TRUE(ft.Send(1, Key(0), msg, kFar).ok());
  EXPECT_EQ(msg, (std::vector<uint8_t>{1, 2, 3, 4}));  // caller's bytes intact
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 0),
            (std::vector<uint8_t>{1, 2, 3 ^ 0xFF, 4}));
}

TEST(FaultTransportTest, DelayUsesTheInjectedSleeper) {
  InProcessHub hub(2);
  std::vector<absl::Duration> slept;
  FaultRule rule = FaultRule::Matching(
      FaultDirection::kSend,
      [](const MessageInfo& m) { return m.key.chunk == 7; },
      FaultAction::kDelay);
  rule.delay = absl::Seconds(3);
  FaultTransport ft(hub.endpoint(0), {rule},
                    [&](absl::Duration d) { slept.push_back(d); });
  ASSERT_TRUE(ft.Send(1, Key(6), Msg(1), kFar).ok());
  ASSERT_TRUE(ft.Send(1, Key(7), Msg(2), kFar).ok());
  ASSERT_TRUE(ft.Send(1, Key(7), Msg(3), kFar).ok());
  EXPECT_EQ(slept, (std::vector<absl::Duration>{absl::Seconds(3),
                                                absl::Seconds(3)}));
  EXPECT_EQ(ft.hits(0), 2);
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 6), Msg(1));
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 7), Msg(2));
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 7), Msg(3));
}

TEST(FaultTransportTest, RealDelayStillDelivers) {
  InProcessHub hub(2);
  FaultRule rule = FaultRule::Nth(FaultDirection::kSend, 0,
                                  FaultAction::kDelay);
  rule.delay = absl::Milliseconds(20);
  FaultTransport ft(hub.endpoint(0), {rule});
  const absl::Time start = absl::Now();
  ASSERT_TRUE(ft.Send(1, Key(0), Msg(1), kFar).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  EXPECT_EQ(RecvOrDie(*hub.endpoint(1), 0, 0), Msg(1));
}

TEST(FaultTransportTest, ReceiveSideFaults) {
  InProcessHub hub(2);
  FaultRule corrupt =
      FaultRule::Nth(FaultDirection::kRecv, 1, FaultAction::kCorrupt);
  FaultTransport ft(
      hub.endpoint(1),
      {FaultRule::Nth(FaultDirection::kRecv, 0, FaultAction::kFail), corrupt,
       FaultRule::Nth(FaultDirection::kRecv, 2, FaultAction::kDrop)});
  for (int j = 0; j < 3; ++j) {
    ASSERT_TRUE(hub.endpoint(0)->Send(1, Key(j), Msg(10 + j), kFar).ok());
  }
  std::vector<uint8_t> got(4);
  // Call 0 fails without consuming.
  absl::Status s = ft.Recv(0, Key(0), absl::MakeSpan(got), kFar);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
  // Call 1 receives message 0 corrupted at byte 0.
  ASSERT_TRUE(ft.Recv(0, Key(0), absl::MakeSpan(got), kFar).ok());
  EXPECT_EQ(got, (std::vector<uint8_t>{10 ^ 0xFF, 10, 10, 10}));
  // Call 2 drops message 1 and then sees message 2 (key mismatch).
  s = ft.Recv(0, Key(1), absl::MakeSpan(got), kFar);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(RecvOrDie(ft, 0, 2), Msg(12));
}

TEST(FaultTransportTest, PredicateSeesPeerKeySizeAndIndex) {
  InProcessHub hub(3);
  std::vector<MessageInfo> seen;
  FaultTransport ft(hub.endpoint(0),
                    {FaultRule::Matching(
                        FaultDirection::kSend,
                        [&](const MessageInfo& m) {
                          seen.push_back(m);
                          return false;
                        },
                        FaultAction::kFail)});
  ASSERT_TRUE(ft.Send(2, Key(5), std::vector<uint8_t>(9), kFar).ok());
  ASSERT_TRUE(ft.Send(1, Key(6), std::vector<uint8_t>(3), kFar).ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].peer, 2);
  EXPECT_EQ(seen[0].key, Key(5));
  EXPECT_EQ(seen[0].bytes, 9u);
  EXPECT_EQ(seen[0].index, 0);
  EXPECT_EQ(seen[1].peer, 1);
  EXPECT_EQ(seen[1].index, 1);
  EXPECT_EQ(ft.hits(0), 0);
}

// A corrupted all-reduce message changes the result: the wrapper really
// reaches the algorithm's data path.
TEST(FaultTransportTest, CorruptionInsideARingIsVisible) {
  InProcessHub hub(2);
  FaultTransport ft(hub.endpoint(0),
                    {FaultRule::Nth(FaultDirection::kSend, 0,
                                    FaultAction::kCorrupt)});
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  int64_t ca = 1, cb = 1;
  absl::Status sa, sb;
  AllReduceOptions o;
  o.timeout = absl::Seconds(120);
  o.algorithm = AllReduceAlgorithm::kRing;
  std::thread t([&] { sb = RingAllReduce(*hub.endpoint(1), absl::MakeSpan(b),
                                         &cb, o); });
  sa = RingAllReduce(ft, absl::MakeSpan(a), &ca, o);
  t.join();
  ASSERT_TRUE(sa.ok()) << sa;
  ASSERT_TRUE(sb.ok()) << sb;
  EXPECT_NE(a, std::vector<float>(8, 3.0f));
  EXPECT_EQ(a, b);  // corrupted during reduce-scatter: spread identically
}

}  // namespace
}  // namespace lockstep
