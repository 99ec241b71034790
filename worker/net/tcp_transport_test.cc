#include "worker/net/tcp_transport.h"
#include "worker/net/tcp_test_util.h"
#include "worker/net/tcp_wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/net/data_auth.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using namespace ::lockstep::tcptest;  // NOLINT: the shared test helpers

std::vector<std::unique_ptr<Transport>> MakeTcpTransports(int k) {
  auto hubs = std::make_shared<Hubs>(k);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < k; ++r) {
    out.push_back(std::make_unique<OwningTransport>(hubs, hubs->Make(1, r)));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, TransportConformanceTest,
    ::testing::Values(TransportFactoryParam{"Tcp", MakeTcpTransports}),
    TransportParamName);


// Rank 1 does not exist yet when rank 0 sends: its hub parks rank 0's
// connection, and rank 0's Send waits (within its deadline) for the accept
// that rank 1's secret makes, which comes when rank 1 attaches.
TEST(TcpTransportTest, RanksMayAttachAfterTheirPeersSent) {
  Hubs h(2);
  auto t0 = h.Make(5, 0);
  const std::vector<uint8_t> msg = Bytes(1000, 3);
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    EXPECT_TRUE(t0->Send(1, MakeKey(5, 0, 0, 0), msg, absl::Now() + kLong).ok());
    sent.store(true);
  });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (h.hubs[1]->parked_connections() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  ASSERT_EQ(h.hubs[1]->parked_connections(), 1);
  EXPECT_FALSE(sent.load());  // no accept yet: no frame went out
  auto t1 = h.Make(5, 1);
  std::vector<uint8_t> got(msg.size());
  absl::Status s = t1->Recv(0, MakeKey(5, 0, 0, 0), absl::MakeSpan(got),
                            absl::Now() + kLong);
  sender.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(got, msg);
  EXPECT_EQ(h.hubs[1]->parked_connections(), 0);
}

TEST(TcpTransportTest, PeerShutdownFailsRecvAtOnceAfterItsMessages) {
  Hubs h(2);
  auto t0 = h.Make(1, 0);
  auto t1 = h.Make(1, 1);
  const std::vector<uint8_t> msg = Bytes(64, 1);
  ASSERT_TRUE(t1->Send(0, MakeKey(1, 0, 0, 0), msg, absl::Now() + kLong).ok());
  t1->Shutdown();
  std::vector<uint8_t> got(msg.size());
  // What was sent before the shutdown still arrives...
  ASSERT_TRUE(t0->Recv(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(got),
                       absl::Now() + kLong)
                  .ok());
  EXPECT_EQ(got, msg);
  // ...and then the closed link is reported at once, not at the deadline.
  const absl::Time start = absl::Now();
  absl::Status s = t0->Recv(1, MakeKey(1, 0, 0, 1), absl::MakeSpan(got),
                            start + kLong);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1 (127.0.0.1:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("closed"));
  EXPECT_LT(absl::Now() - start, kLong / 2);
}

TEST(TcpTransportTest, ShutdownWakesABlockedRecv) {
  Hubs h(2);
  auto t0 = h.Make(1, 0);
  auto t1 = h.Make(1, 1);
  absl::Status s;
  std::vector<uint8_t> got(8);
  std::thread waiter([&] {
    s = t0->Recv(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(got),
                 absl::Now() + kLong);
  });
  const absl::Time start = absl::Now();
  t0->Shutdown();
  waiter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, kLong / 2);
  EXPECT_EQ(t0->Send(1, MakeKey(1, 0, 0, 0), got, absl::Now() + kLong).code(),
            absl::StatusCode::kCancelled);
}

// A Send waiting for a late peer's accept (its hello parked at the peer's
// hub) holds its link; Shutdown must wake it at once, not wait for the
// Send's deadline.
TEST(TcpTransportTest, ShutdownWakesASendWaitingForItsAccept) {
  Hubs h(2);
  auto t0 = h.Make(1, 0);
  absl::Status s;
  const std::vector<uint8_t> msg = Bytes(8, 1);
  std::thread sender([&] { s = t0->Send(1, MakeKey(1, 0, 0, 0), msg, absl::Now() + kLong); });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (h.hubs[1]->parked_connections() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  ASSERT_EQ(h.hubs[1]->parked_connections(), 1);
  const absl::Time start = absl::Now();
  t0->Shutdown();
  sender.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, kLong / 2);
}

TEST(TcpTransportTest, BacklogKeepsOrderAndBytesAndFlowControlHasADeadline) {
  Hubs h(2);
  TcpTransportOptions o;
  o.max_queued_bytes = 4 << 20;
  auto t0 = h.Make(1, 0, o);
  auto t1 = h.Make(1, 1);
  // Rank 1 does not read: the socket buffers fill, the rest is backlogged,
  // and once over max_queued_bytes a Send waits and then times out.
  const size_t size = 1 << 20;
  int accepted = 0;
  absl::Status s;
  for (int i = 0; i < 64; ++i) {
    s = t0->Send(1, MakeKey(1, 0, 0, i), Bytes(size, i),
                 absl::Now() + absl::Milliseconds(300));
    if (!s.ok()) break;
    ++accepted;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not reading"));
  EXPECT_GT(t0->messages_backlogged(), 0);
  ASSERT_GT(accepted, 4);
  // Everything accepted arrives intact and in order.
  std::vector<uint8_t> got(size);
  for (int i = 0; i < accepted; ++i) {
    absl::Status r = t1->Recv(0, MakeKey(1, 0, 0, i), absl::MakeSpan(got),
                              absl::Now() + kLong);
    ASSERT_TRUE(r.ok()) << r;
    ASSERT_EQ(got, Bytes(size, i)) << "message " << i;
  }
}

// Bytes that move touch each side's progress mark (PeerWait counts a wait
// from the last byte): the receiver's reads, and the sender's backlog
// written after the receiver began to drain it (the writer thread).
// The largest buffer loopback TCP may grow to, from
// /proc/sys/net/ipv4/tcp_{r,w}mem's third field (0 when unreadable).
int64_t MaxTcpBuffer(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  long long lo = 0, mid = 0, hi = 0;
  const int n = std::fscanf(f, "%lld %lld %lld", &lo, &mid, &hi);
  std::fclose(f);
  return n == 3 ? hi : 0;
}

TEST(TcpTransportTest, MovingBytesTouchBothSidesProgressMarks) {
  const int64_t buffered = MaxTcpBuffer("/proc/sys/net/ipv4/tcp_rmem") +
                           MaxTcpBuffer("/proc/sys/net/ipv4/tcp_wmem");
  if (buffered >= (int64_t{80} << 20)) {
    GTEST_SKIP() << "loopback may buffer " << buffered
                 << " bytes: the 96 MiB sent here could leave before the receiver reads";
  }
  Hubs h(2);
  ProgressMark sent, received;
  TcpTransportOptions o0, o1;
  o0.progress = &sent;
  o0.max_queued_bytes = int64_t{128} << 20;
  o1.progress = &received;
  auto t0 = h.Make(1, 0, o0);
  auto t1 = h.Make(1, 1, o1);
  const size_t size = 1 << 20;
  // Far more than loopback sockets buffer (tcp_rmem's maximum was 32 MiB
  // on the 2026-12-04 host; 6 MiB is the kernel's default; checked above).
  constexpr int kMessages = 96;
  const int64_t before = ProgressMark::SteadyNanos();
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(t0->Send(1, MakeKey(1, 0, 0, i), Bytes(size, i), absl::Now() + kLong).ok());
  }
  EXPECT_GE(sent.last_ns(), before);  // the first bytes went straight out
  EXPECT_EQ(received.last_ns(), 0);   // nothing read yet
  const int64_t reading = ProgressMark::SteadyNanos();
  std::vector<uint8_t> got(size);
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(t1->Recv(0, MakeKey(1, 0, 0, i), absl::MakeSpan(got), absl::Now() + kLong).ok());
  }
  EXPECT_GT(received.last_ns(), reading);
  // The last message's bytes could only leave once rank 1 read: the sender
  // touched its mark after `reading`.
  EXPECT_GT(sent.last_ns(), reading);
  EXPECT_EQ(got, Bytes(size, kMessages - 1));
}

TEST(TcpTransportTest, AbortedPartialReceiveIsSkippedByTheNextStep) {
  // A Recv that gives up half-way through a payload leaves the rest to be
  // discarded; the next step's message is still received intact.
  Hubs h(2);
  auto t0 = h.Make(1, 0);
  auto t1 = h.Make(1, 1);
  const std::vector<uint8_t> big = Bytes(32 << 20, 1);
  std::vector<uint8_t> got(big.size());
  std::thread sender([&] {
    ASSERT_TRUE(t0->Send(1, MakeKey(1, 0, 0, 0), big, absl::Now() + kLong).ok());
  });
  // A deadline in the past: the Recv reads what is there and gives up.
  absl::Status s = t1->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got),
                            absl::Now());
  sender.join();
  if (s.ok()) GTEST_SKIP() << "the whole 32 MiB arrived at once";
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  const std::vector<uint8_t> next = Bytes(100, 9);
  ASSERT_TRUE(t0->Send(1, MakeKey(1, 1, 0, 0), next, absl::Now() + kLong).ok());
  std::vector<uint8_t> got2(next.size());
  s = t1->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(got2),
               absl::Now() + kLong);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got2, next);
}

TEST(TcpTransportTest, ARestartedPeerIsReadOnItsNewConnection) {
  // Rank 0 sends, goes away (end of stream) and comes back as a new
  // transport: rank 1 reads the old connection to its end and carries on
  // with the new one, in order.
  Hubs h(2);
  auto t1 = h.Make(1, 1);
  const std::vector<uint8_t> a = Bytes(5000, 1), b = Bytes(7000, 2);
  {
    auto t0 = h.Make(1, 0);
    ASSERT_TRUE(t0->Send(1, MakeKey(1, 0, 0, 0), a, absl::Now() + kLong).ok());
  }
  auto t0 = h.Make(1, 0);
  ASSERT_TRUE(t0->Send(1, MakeKey(1, 1, 0, 0), b, absl::Now() + kLong).ok());
  // Without this the reader could reach the old connection's end before
  // the hub hands over the new one, and rightly report the link closed.
  ASSERT_TRUE(t1->AwaitInbound(0, 2, absl::Now() + kLong));
  std::vector<uint8_t> got(a.size());
  absl::Status s = t1->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got),
                            absl::Now() + kLong);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, a);
  got.resize(b.size());
  s = t1->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(got),
               absl::Now() + kLong);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, b);
}

TEST(TcpTransportTest, FlushSendsEndsEveryBorrow) {
  Hubs h(2);
  auto t0 = h.Make(1, 0);
  auto t1 = h.Make(1, 1);
  // 32 MiB cannot all fit the socket buffers: most of it stays borrowed.
  std::vector<uint8_t> buf = Bytes(32 << 20, 5);
  const std::vector<uint8_t> want = buf;
  ASSERT_TRUE(
      t0->SendBorrowed(1, MakeKey(1, 0, 0, 0), buf, absl::Now() + kLong).ok());
  EXPECT_EQ(t0->messages_backlogged(), 1);
  // Rank 1 is not reading: the flush gives up at its deadline, copying what
  // is still borrowed (part of it may already be written).
  absl::Status s = t0->FlushSends(absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not reading"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1"));
  EXPECT_EQ(t0->borrows_copied(), 1);
  // The caller's buffer is its own again: scribbling on it changes nothing.
  std::fill(buf.begin(), buf.end(), 0xEE);
  // A second borrowed message, flushed while rank 1 reads.
  std::vector<uint8_t> buf2 = Bytes(16 << 20, 6);
  const std::vector<uint8_t> want2 = buf2;
  ASSERT_TRUE(
      t0->SendBorrowed(1, MakeKey(1, 0, 0, 1), buf2, absl::Now() + kLong).ok());
  std::vector<uint8_t> got(want.size()), got2(want2.size());
  absl::Status r1, r2;
  std::thread reader([&] {
    r1 = t1->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got),
                  absl::Now() + kLong);
    r2 = t1->Recv(0, MakeKey(1, 0, 0, 1), absl::MakeSpan(got2),
                  absl::Now() + kLong);
  });
  s = t0->FlushSends(absl::Now() + kLong);
  EXPECT_TRUE(s.ok()) << s;
  std::fill(buf2.begin(), buf2.end(), 0xDD);
  reader.join();
  ASSERT_TRUE(r1.ok()) << r1;
  ASSERT_TRUE(r2.ok()) << r2;
  EXPECT_TRUE(got == want);
  EXPECT_TRUE(got2 == want2);
  EXPECT_EQ(t0->borrows_copied(), 1);
}

TEST(TcpTransportTest, ConcurrentBigSendIsWrittenWhileAnotherThreadWaits) {
  // Thread A waits in Recv for a reply that peer 1 sends only after it got
  // all of thread B's big message: the backlog must still be written.
  Hubs h(2);
  auto t0 = h.Make(1, 0);
  auto t1 = h.Make(1, 1);
  const std::vector<uint8_t> big = Bytes(24 << 20, 3);
  std::thread peer([&] {
    std::vector<uint8_t> got(big.size());
    ASSERT_TRUE(t1->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got),
                         absl::Now() + kLong)
                    .ok());
    ASSERT_TRUE(got == big);
    ASSERT_TRUE(
        t1->Send(0, MakeKey(1, 0, 1, 0), Bytes(8, 0), absl::Now() + kLong).ok());
  });
  absl::Status reply;
  std::thread a([&] {
    std::vector<uint8_t> got(8);
    reply = t0->Recv(1, MakeKey(1, 0, 1, 0), absl::MakeSpan(got),
                     absl::Now() + kLong);
  });
  ASSERT_TRUE(t0->Send(1, MakeKey(1, 0, 0, 0), big, absl::Now() + kLong).ok());
  a.join();
  peer.join();
  EXPECT_TRUE(reply.ok()) << reply;
}

TEST(TcpTransportTest, UnreachablePeerIsUnavailableNamingIt) {
  Hubs h(1);
  // A port nobody listens on: bind one and close it.
  std::string dead;
  close(LoopbackSocket(&dead, /*listening=*/false));
  auto t = TcpTransport::Create(
      h.hubs[0].get(), 1, 0,
      {h.Addresses()[0], dead}, WithSecret({}));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status s = (*t)->Send(1, MakeKey(1, 0, 0, 0), Bytes(4, 0),
                              absl::Now() + absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("peer rank 1 (", dead)));
}

TEST(TcpTransportTest, BadArgumentsAreRejected) {
  Hubs h(1);
  auto bad = TcpTransport::Create(h.hubs[0].get(), 1, 0, {"x", "nonsense"}, WithSecret({}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'nonsense'"));
  auto out_of_range = TcpTransport::Create(h.hubs[0].get(), 1, 2, {"a:1"}, WithSecret({}));
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  // No secret, or one of the wrong length: refused.
  auto no_secret = TcpTransport::Create(h.hubs[0].get(), 1, 0, {"a:1"});
  EXPECT_EQ(no_secret.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_secret.status().message()),
              HasSubstr("data-plane secret has 0 bytes, expected 32"));
  TcpTransportOptions short_secret;
  short_secret.secret = "0123456789";
  EXPECT_EQ(TcpTransport::Create(h.hubs[0].get(), 1, 0, {"a:1"}, short_secret).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto first = TcpTransport::Create(h.hubs[0].get(), 1, 0, {"a:1"}, WithSecret({}));
  ASSERT_TRUE(first.ok());
  auto twice = TcpTransport::Create(h.hubs[0].get(), 1, 0, {"a:1"}, WithSecret({}));
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kAlreadyExists);
  auto host = TcpPeerHub::Start("no.such.host.invalid", 0);
  EXPECT_FALSE(host.ok());
}

TEST(TcpTransportTest, BracketedListenHostIsResolved) {
  // "[::1]" is how an IPv6 host appears in --listen; the hub takes it as is.
  // (Binding may still fail where the machine has no IPv6 loopback.)
  auto hub = TcpPeerHub::Start("[::1]", 0);
  if (!hub.ok()) {
    EXPECT_EQ(hub.status().code(), absl::StatusCode::kUnavailable)
        << hub.status();
    EXPECT_THAT(std::string(hub.status().message()), HasSubstr("bind"));
    return;
  }
  EXPECT_GT((*hub)->port(), 0);
}


// ---- data-plane authentication (issue 11): the hello's HMAC under the
// job's secret over the hub's challenge.

}  // namespace
}  // namespace lockstep
