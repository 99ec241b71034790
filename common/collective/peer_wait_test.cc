#include "common/collective/peer_wait.h"

#include <thread>
#include <vector>

#include "common/collective/inproc_transport.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(PeerWaitTest, ARecvPublishesItsPeerUntilItReturns) {
  InProcessHub hub(3);
  PeerWait wait;
  PeerWaitTransport t(hub.endpoint(2), &wait);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.world_size(), 3);
  EXPECT_EQ(wait.Current().first, -1);
  std::vector<uint8_t> out(4);
  absl::Status s;
  std::thread r([&] {
    s = t.Recv(1, MakeKey(1, 1, 0, 0), absl::MakeSpan(out), absl::Now() + absl::Seconds(30));
  });
  // While it waits: peer 1, for a growing time.
  while (wait.Current().first != 1) std::this_thread::yield();
  const absl::Duration first = wait.Current().second;
  while (wait.Current().second <= first) std::this_thread::yield();
  const uint8_t data[4] = {1, 2, 3, 4};
  ASSERT_TRUE(hub.endpoint(1)->Send(2, MakeKey(1, 1, 0, 0), data, absl::Now() + absl::Seconds(5)).ok());
  r.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, std::vector<uint8_t>({1, 2, 3, 4}));
  EXPECT_EQ(wait.Current().first, -1);
  EXPECT_EQ(wait.Current().second, absl::ZeroDuration());
  // A failed Recv clears it too.
  EXPECT_FALSE(t.Recv(0, MakeKey(1, 2, 0, 0), absl::MakeSpan(out), absl::Now()).ok());
  EXPECT_EQ(wait.Current().first, -1);
  // Sends go through unchanged and publish nothing.
  ASSERT_TRUE(t.Send(0, MakeKey(1, 3, 0, 0), data, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(wait.Current().first, -1);
  ASSERT_TRUE(hub.endpoint(0)->Recv(2, MakeKey(1, 3, 0, 0), absl::MakeSpan(out), absl::Now() + absl::Seconds(5)).ok());
}

}  // namespace
}  // namespace lockstep
