#include "common/collective/peer_wait.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/collective/inproc_transport.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// A wait counts from the later of its start and the last progress on the
// data plane: bytes that still move (a slow shard transfer) restart it;
// progress before the wait began does not shorten it.
TEST(PeerWaitTest, AWaitCountsFromTheLastProgress) {
  PeerWait wait;
  const int64_t ms = 1000 * 1000;
  wait.progress()->TouchAt(500 * ms);  // before the wait: no effect
  wait.BeginShardAt(1, 1000 * ms);
  EXPECT_EQ(wait.CurrentAt(4000 * ms).shard, 1);
  EXPECT_EQ(wait.CurrentAt(4000 * ms).peer, -1);
  EXPECT_EQ(wait.CurrentAt(4000 * ms).waited, absl::Milliseconds(3000));
  wait.progress()->TouchAt(3500 * ms);  // bytes moved
  EXPECT_EQ(wait.CurrentAt(4000 * ms).waited, absl::Milliseconds(500));
  EXPECT_EQ(wait.CurrentAt(7500 * ms).waited, absl::Milliseconds(4000));
  wait.End();
  EXPECT_EQ(wait.CurrentAt(7500 * ms).shard, -1);
  EXPECT_EQ(wait.CurrentAt(7500 * ms).waited, absl::ZeroDuration());
  // A new wait starts from its own beginning, after the old progress.
  wait.BeginAt(2, 8000 * ms);
  EXPECT_EQ(wait.CurrentAt(9000 * ms).peer, 2);
  EXPECT_EQ(wait.CurrentAt(9000 * ms).waited, absl::Milliseconds(1000));
  // Never negative (a progress reading newer than `now`).
  wait.progress()->TouchAt(9500 * ms);
  EXPECT_EQ(wait.CurrentAt(9000 * ms).waited, absl::ZeroDuration());
  // An older touch (a thread preempted after reading its clock) never moves
  // the mark back.
  wait.progress()->TouchAt(8500 * ms);
  EXPECT_EQ(wait.progress()->last_ns(), 9500 * ms);
}

TEST(PeerWaitTest, ARecvPublishesItsPeerUntilItReturns) {
  InProcessHub hub(3);
  PeerWait wait;
  PeerWaitTransport t(hub.endpoint(2), &wait);
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.world_size(), 3);
  EXPECT_EQ(wait.Current().peer, -1);
  std::vector<uint8_t> out(4);
  absl::Status s;
  std::thread r([&] {
    s = t.Recv(1, MakeKey(1, 1, 0, 0), absl::MakeSpan(out), absl::Now() + absl::Seconds(30));
  });
  // While it waits: peer 1, for a growing time.
  while (wait.Current().peer != 1) std::this_thread::yield();
  const absl::Duration first = wait.Current().waited;
  while (wait.Current().waited <= first) std::this_thread::yield();
  const uint8_t data[4] = {1, 2, 3, 4};
  ASSERT_TRUE(
      hub.endpoint(1)->Send(2, MakeKey(1, 1, 0, 0), data, absl::Now() + absl::Seconds(5)).ok());
  r.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, std::vector<uint8_t>({1, 2, 3, 4}));
  EXPECT_EQ(wait.Current().peer, -1);
  EXPECT_EQ(wait.Current().waited, absl::ZeroDuration());
  // A failed Recv clears it too.
  EXPECT_FALSE(t.Recv(0, MakeKey(1, 2, 0, 0), absl::MakeSpan(out), absl::Now()).ok());
  EXPECT_EQ(wait.Current().peer, -1);
  // A Send that returns at once leaves nothing published.
  ASSERT_TRUE(t.Send(0, MakeKey(1, 3, 0, 0), data, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(wait.Current().peer, -1);
  ASSERT_TRUE(
      hub.endpoint(0)
          ->Recv(2, MakeKey(1, 3, 0, 0), absl::MakeSpan(out), absl::Now() + absl::Seconds(5))
          .ok());
}

// An inner transport whose Send, SendBorrowed and FlushSends block until
// released (flow control against a peer that reads nothing).
class GatedTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 3; }
  absl::Status Send(int, const MessageKey &, absl::Span<const uint8_t>, absl::Time) override {
    return Block();
  }
  absl::Status SendBorrowed(int, const MessageKey &, absl::Span<const uint8_t>,
                            absl::Time) override {
    return absl::OkStatus();  // queued: FlushSends is where it waits
  }
  absl::Status FlushSends(absl::Time) override { return Block(); }
  absl::Status Recv(int, const MessageKey &, absl::Span<uint8_t>, absl::Time) override {
    return absl::OkStatus();
  }
  void Release() {
    absl::MutexLock l(&mu_);
    ++released_;
    cv_.SignalAll();
  }

 private:
  absl::Status Block() {
    absl::MutexLock l(&mu_);
    const int want = ++blocked_;
    while (released_ < want) cv_.Wait(&mu_);
    return absl::UnavailableError("released");
  }
  absl::Mutex mu_;
  absl::CondVar cv_;
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
};

// A rank stuck sending (a peer that stopped reading) publishes that peer,
// so a job whose every rank is stuck is told apart from a slow one.
TEST(PeerWaitTest, ABlockedSendOrFlushPublishesItsPeerUntilItReturns) {
  GatedTransport inner;
  PeerWait wait;
  PeerWaitTransport t(&inner, &wait);
  const uint8_t data[4] = {1, 2, 3, 4};
  absl::Status s;
  std::thread send([&] { s = t.Send(2, MakeKey(1, 1, 0, 0), data, absl::InfiniteFuture()); });
  while (wait.Current().peer != 2) std::this_thread::yield();
  inner.Release();
  send.join();
  EXPECT_EQ(s.code(),
            absl::StatusCode::kUnavailable);  // the inner status, as is
  EXPECT_EQ(wait.Current().peer, -1);
  // Borrowed sends to 1: the flush that waits for them names 1.
  ASSERT_TRUE(t.SendBorrowed(1, MakeKey(1, 2, 0, 0), data, absl::InfiniteFuture()).ok());
  EXPECT_EQ(wait.Current().peer, -1);
  std::thread flush([&] { s = t.FlushSends(absl::InfiniteFuture()); });
  while (wait.Current().peer != 1) std::this_thread::yield();
  inner.Release();
  flush.join();
  EXPECT_EQ(wait.Current().peer, -1);
  // With nothing borrowed since, a flush names no peer (it may still wait
  // on the inner transport, which publishes nothing here).
  std::thread idle_flush([&] { s = t.FlushSends(absl::InfiniteFuture()); });
  inner.Release();
  idle_flush.join();
  EXPECT_EQ(wait.Current().peer, -1);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// A ps round's push and pull name their shard while they wait; a peer's
// wait and a shard's are told apart.
TEST(PeerWaitTest, AShardCallPublishesItsShardUntilItReturns) {
  // K = 1: the pull of a step nobody pushed yet waits for the push.
  InProcessPsClient in_process(std::make_shared<PsShard>(1, 4));
  PeerWait wait;
  ShardWaitPsClient c(&in_process, 3, &wait);
  std::vector<float> out(4);
  int64_t count = 0;
  absl::Status s;
  std::thread pull(
      [&] { s = c.Pull(1, 5, 0, absl::MakeSpan(out), &count, absl::Now() + absl::Seconds(30)); });
  while (wait.Current().shard != 3) std::this_thread::yield();
  EXPECT_EQ(wait.Current().peer, -1);
  const absl::Duration first = wait.Current().waited;
  while (wait.Current().waited <= first) std::this_thread::yield();
  const std::vector<float> grad = {1, 2, 3, 4};
  ASSERT_TRUE(in_process.Push(1, 5, 0, grad, 8, absl::Now() + absl::Seconds(5)).ok());
  pull.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, grad);
  EXPECT_EQ(count, 8);
  EXPECT_EQ(wait.Current().shard, -1);
  EXPECT_EQ(wait.Current().waited, absl::ZeroDuration());
  // Through the wrapper, a whole round: nothing left published.
  ASSERT_TRUE(
      c.StartRound(1, 6, 0, grad, 8, absl::Now() + absl::Seconds(5), WireFormat::kFloat32).ok());
  ASSERT_TRUE(c.FinishRound(1, 6, 0, absl::MakeSpan(out), &count, absl::Now() + absl::Seconds(5),
                            WireFormat::kFloat32)
                  .ok());
  EXPECT_EQ(wait.Current().shard, -1);
  // Shard 0 is not "none".
  wait.BeginShard(0);
  EXPECT_EQ(wait.Current().shard, 0);
  EXPECT_EQ(wait.Current().peer, -1);
  wait.Begin(0);
  EXPECT_EQ(wait.Current().peer, 0);
  EXPECT_EQ(wait.Current().shard, -1);
}

}  // namespace
}  // namespace lockstep
