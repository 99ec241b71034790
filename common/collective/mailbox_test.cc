#include "common/collective/mailbox.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

const absl::Time kFar = absl::InfiniteFuture();

TEST(MailboxTest, DeliverThenReceive) {
  Mailbox mb(0, 2);
  const std::vector<uint8_t> msg = {9, 8, 7};
  ASSERT_TRUE(mb.Deliver(1, MakeKey(1, 2, 3, 4), msg).ok());
  std::vector<uint8_t> got(3);
  ASSERT_TRUE(mb.Receive(1, MakeKey(1, 2, 3, 4), absl::MakeSpan(got), kFar).ok());
  EXPECT_EQ(got, msg);
}

// Fragments: the message is their concatenation; the mailbox holds `keep`
// until the message is received, and keeps per-peer order with copied
// messages.
TEST(MailboxTest, FragmentsAreConcatenatedAndReleasedOnReceive) {
  Mailbox mb(0, 2);
  auto store = std::make_shared<std::vector<uint8_t>>(
      std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<uint8_t>> watch = store;
  const uint8_t* p = store->data();
  std::vector<absl::Span<const uint8_t>> frags = {
      {p + 4, 2}, {p, 0}, {p, 3}};  // 5 6 | (empty) | 1 2 3
  ASSERT_TRUE(mb.Deliver(1, MakeKey(1, 0, 0, 0), std::vector<uint8_t>{7}).ok());
  ASSERT_TRUE(
      mb.DeliverFragments(1, MakeKey(1, 0, 0, 1), std::move(frags), std::move(store)).ok());
  EXPECT_FALSE(watch.expired());
  std::vector<uint8_t> first(1), got(5);
  ASSERT_TRUE(mb.Receive(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(first), kFar).ok());
  EXPECT_EQ(first, std::vector<uint8_t>{7});
  // A wrong size is reported and does not consume (or release) the message.
  std::vector<uint8_t> wrong(4);
  absl::Status s = mb.Receive(1, MakeKey(1, 0, 0, 1), absl::MakeSpan(wrong), kFar);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("has 5 bytes but 4"));
  EXPECT_FALSE(watch.expired());
  ASSERT_TRUE(mb.Receive(1, MakeKey(1, 0, 0, 1), absl::MakeSpan(got), kFar).ok());
  EXPECT_EQ(got, (std::vector<uint8_t>{5, 6, 1, 2, 3}));
  EXPECT_TRUE(watch.expired());
}

TEST(MailboxTest, FragmentsAreReleasedWhenStaleOrRejected) {
  Mailbox mb(0, 2);
  auto stale = std::make_shared<int>(1);
  std::weak_ptr<int> watch_stale = stale;
  uint8_t byte = 3;
  ASSERT_TRUE(mb.DeliverFragments(1, MakeKey(1, 0, 0, 0), {{&byte, 1}}, std::move(stale)).ok());
  ASSERT_TRUE(mb.Deliver(1, MakeKey(1, 1, 0, 0), std::vector<uint8_t>{4}).ok());
  std::vector<uint8_t> got(1);
  ASSERT_TRUE(mb.Receive(1, MakeKey(1, 1, 0, 0), absl::MakeSpan(got), kFar).ok());
  EXPECT_TRUE(watch_stale.expired());  // step 0 discarded as stale
  EXPECT_EQ(mb.stale_discarded(), 1);

  mb.ClosePeer(1, absl::UnavailableError("gone"));
  auto rejected = std::make_shared<int>(2);
  std::weak_ptr<int> watch_rejected = rejected;
  absl::Status s =
      mb.DeliverFragments(1, MakeKey(1, 2, 0, 0), {{&byte, 1}}, std::move(rejected));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(watch_rejected.expired());
}

TEST(MailboxTest, ReceiveWaitsForALaterDelivery) {
  Mailbox mb(0, 2);
  absl::Notification receiving;
  absl::Status s;
  std::vector<uint8_t> got(2);
  std::thread t([&] {
    receiving.Notify();
    s = mb.Receive(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(got), kFar);
  });
  receiving.WaitForNotification();
  ASSERT_TRUE(mb.Deliver(1, MakeKey(1, 0, 0, 0), std::vector<uint8_t>{5, 6}).ok());
  t.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, (std::vector<uint8_t>{5, 6}));
}

TEST(MailboxTest, StaleMessagesAreCountedAndNamedOnTimeout) {
  Mailbox mb(0, 3);
  ASSERT_TRUE(mb.Deliver(2, MakeKey(1, 4, 0, 0), {}).ok());
  ASSERT_TRUE(mb.Deliver(2, MakeKey(1, 5, 1, 2), {}).ok());
  absl::Status s = mb.Receive(2, MakeKey(1, 6, 0, 0), {},
                              absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("2 stale"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(KeyToString(MakeKey(1, 5, 1, 2))));
  EXPECT_EQ(mb.stale_discarded(), 2);
}

TEST(MailboxTest, ClosedPeerDrainsThenFails) {
  Mailbox mb(1, 3);
  ASSERT_TRUE(mb.Deliver(0, MakeKey(1, 0, 0, 0), std::vector<uint8_t>{1}).ok());
  mb.ClosePeer(0, absl::UnavailableError("connection reset"));
  std::vector<uint8_t> got(1);
  ASSERT_TRUE(mb.Receive(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got), kFar).ok());
  absl::Status s = mb.Receive(0, MakeKey(1, 0, 0, 1), absl::MakeSpan(got), kFar);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("connection reset"));
  s = mb.Deliver(0, MakeKey(1, 0, 0, 2), std::vector<uint8_t>{1});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  // Other peers are unaffected.
  ASSERT_TRUE(mb.Deliver(2, MakeKey(1, 0, 0, 0), std::vector<uint8_t>{3}).ok());
  ASSERT_TRUE(mb.Receive(2, MakeKey(1, 0, 0, 0), absl::MakeSpan(got), kFar).ok());
}

TEST(MailboxTest, ClosingWakesAWaitingReceiver) {
  Mailbox mb(0, 2);
  absl::Notification receiving;
  absl::Status s;
  std::thread t([&] {
    receiving.Notify();
    s = mb.Receive(1, MakeKey(1, 0, 0, 0), {}, kFar);
  });
  receiving.WaitForNotification();
  mb.ClosePeer(1, absl::UnavailableError("gone"));
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

TEST(MailboxTest, BadPeers) {
  Mailbox mb(0, 2);
  EXPECT_EQ(mb.Deliver(2, MakeKey(1, 0, 0, 0), {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mb.Receive(-1, MakeKey(1, 0, 0, 0), {}, kFar).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MailboxTest, ManyMessagesOfVaryingSizesRoundTrip) {
  // Exercises buffer recycling: buffers of one size are reused for others.
  Mailbox mb(0, 2);
  for (int round = 0; round < 3; ++round) {
    for (int j = 0; j < 100; ++j) {
      std::vector<uint8_t> msg((j * 37) % 300, static_cast<uint8_t>(j));
      ASSERT_TRUE(mb.Deliver(1, MakeKey(1, round, 0, j), msg).ok());
    }
    for (int j = 0; j < 100; ++j) {
      std::vector<uint8_t> got((j * 37) % 300);
      ASSERT_TRUE(
          mb.Receive(1, MakeKey(1, round, 0, j), absl::MakeSpan(got), kFar).ok());
      EXPECT_EQ(got, std::vector<uint8_t>(got.size(), static_cast<uint8_t>(j)));
    }
  }
  EXPECT_EQ(mb.stale_discarded(), 0);
}

}  // namespace
}  // namespace lockstep
