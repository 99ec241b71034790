#include "worker/net/tcp_transport.h"
#include "worker/net/tcp_wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
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

// The job secret every transport in these tests uses (the coordinator hands
// real ones out; common/net/data_auth.h).
const std::string kSecret(dataauth::kSecretBytes, 's');
TcpTransportOptions WithSecret(TcpTransportOptions o) {
  if (o.secret.empty()) o.secret = kSecret;
  return o;
}

// One hub per rank, as if each rank were its own process, on OS-chosen
// loopback ports.
struct Hubs {
  explicit Hubs(int k, TcpHubOptions options = {}) {
    for (int r = 0; r < k; ++r) {
      auto h = TcpPeerHub::Start("127.0.0.1", 0, options);
      ABSL_RAW_CHECK(h.ok(), "TcpPeerHub::Start failed");
      hubs.push_back(*std::move(h));
    }
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> a;
    for (const auto& h : hubs) a.push_back(absl::StrCat("127.0.0.1:", h->port()));
    return a;
  }
  std::unique_ptr<TcpTransport> Make(uint64_t group, int r,
                                     TcpTransportOptions o = {}) {
    auto t = TcpTransport::Create(hubs[r].get(), group, r, Addresses(), WithSecret(o));
    ABSL_RAW_CHECK(t.ok(), "TcpTransport::Create failed");
    return *std::move(t);
  }
  std::vector<std::unique_ptr<TcpPeerHub>> hubs;
};

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

const absl::Duration kLong = absl::Seconds(30);

std::vector<uint8_t> Bytes(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

TEST(TcpTransportTest, RanksMayAttachAfterTheirPeersSent) {
  Hubs h(2);
  auto t0 = h.Make(5, 0);
  const std::vector<uint8_t> msg = Bytes(1000, 3);
  // Rank 1 does not exist yet: the hub parks the connection.
  ASSERT_TRUE(t0->Send(1, MakeKey(5, 0, 0, 0), msg, absl::Now() + kLong).ok());
  auto t1 = h.Make(5, 1);
  std::vector<uint8_t> got(msg.size());
  absl::Status s = t1->Recv(0, MakeKey(5, 0, 0, 0), absl::MakeSpan(got),
                            absl::Now() + kLong);
  ASSERT_TRUE(s.ok()) << s;
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

// A hello (tcp_wire's encoder): rank `from` of `world` in `group` calling
// rank `to`, answering `nonce` under `secret`.
std::vector<uint8_t> HelloBytes(uint64_t group, uint32_t from, uint32_t to, uint32_t world,
                                const dataauth::Nonce& nonce,
                                const std::string& secret = kSecret) {
  std::vector<uint8_t> hello(tcpwire::kHelloBytes);
  tcpwire::Hello h;
  h.group = group;
  h.from = from;
  h.to = to;
  h.world = world;
  tcpwire::EncodeHello(h, secret, nonce, hello.data());
  return hello;
}

void SendAll(int fd, const std::vector<uint8_t>& bytes) {
  EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Connects a raw socket to `port`; returns the fd. With `nonce`, first reads
// the hub's challenge (10 s at most) into it.
int RawConnect(int port, dataauth::Nonce* nonce = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (nonce != nullptr) {
    timeval tv{};
    tv.tv_sec = 10;
    EXPECT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    uint8_t c[tcpwire::kChallengeBytes];
    EXPECT_EQ(recv(fd, c, sizeof(c), MSG_WAITALL), static_cast<ssize_t>(sizeof(c)));
    EXPECT_TRUE(tcpwire::DecodeChallenge(c, nonce).ok());
  }
  return fd;
}

// Connects, reads the challenge and answers it with a hello under `secret`.
int RawHello(int port, uint64_t group, uint32_t from, uint32_t to, uint32_t world,
             const std::string& secret = kSecret) {
  dataauth::Nonce nonce{};
  const int fd = RawConnect(port, &nonce);
  SendAll(fd, HelloBytes(group, from, to, world, nonce, secret));
  return fd;
}

// Waits (10 s at most, never forever) until the hub closes fd: recv sees
// end of stream or a reset; a timeout fails the test.
void ExpectClosedByHub(int fd) {
  timeval tv{};
  tv.tv_sec = 10;
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  // The hub's challenge may still be unread: skip it (and only it).
  char c[tcpwire::kChallengeBytes + 1];
  size_t skipped = 0;
  ssize_t n = 0;
  int err = 0;
  for (;;) {
    n = recv(fd, c, sizeof(c), 0);
    err = errno;
    if (n <= 0) break;
    skipped += static_cast<size_t>(n);
    if (skipped > tcpwire::kChallengeBytes) break;  // more than a challenge: fail below
  }
  EXPECT_TRUE(n == 0 || (n < 0 && err != EAGAIN && err != EWOULDBLOCK))
      << "recv returned " << n << ", errno " << err
      << " (EAGAIN: the hub did not close the connection within 10 s)";
}

TEST(TcpTransportTest, ForeignConnectionIsRejectedAndTheHubKeepsServing) {
  Hubs h(2);
  std::vector<uint8_t> junk(tcpwire::kHelloBytes, 'x');
  const int fd = RawConnect(h.hubs[1]->port());
  SendAll(fd, junk);
  // The hub closes it: our read sees end of stream (no sleeping).
  ExpectClosedByHub(fd);
  close(fd);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("bad hello"));
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("not a lockstep peer"));
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("connection from 127.0.0.1:"));

  auto t0 = h.Make(1, 0);
  auto t1 = h.Make(1, 1);
  std::vector<float> v0(1000, 1.0f), v1(1000, 2.0f);
  int64_t c0 = 1, c1 = 2;
  AllReduceOptions o;
  o.job = 1;
  absl::Status s1;
  std::thread other([&] { s1 = RingAllReduce(*t1, absl::MakeSpan(v1), &c1, o); });
  absl::Status s0 = RingAllReduce(*t0, absl::MakeSpan(v0), &c0, o);
  other.join();
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(v0, v1);
  EXPECT_EQ(v0[0], 3.0f);
  EXPECT_EQ(c0, 3);
  EXPECT_EQ(c1, 3);
}

TEST(TcpTransportTest, HelloNamingAnotherWorldSizeIsRejected) {
  Hubs h(2);
  auto t1 = h.Make(7, 1);
  const int fd = RawHello(h.hubs[1]->port(), 7, 0, 1, 3);
  ExpectClosedByHub(fd);
  close(fd);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("world size 3"));
}

// Issue 11: "the tcp hub reads each hello on its accept thread (one silent
// connection stalls all accepts for 5 s)". A connection that sends nothing
// must not delay a job's connections: they are read off the accept thread,
// each with its own hello deadline.
TEST(TcpTransportTest, ASilentConnectionDoesNotStallAJobsConnections) {
  TcpHubOptions o;
  o.hello_timeout = absl::Seconds(20);
  Hubs h(2, o);
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(RawConnect(h.hubs[1]->port()));
  auto t0 = h.Make(5, 0);
  auto t1 = h.Make(5, 1);
  const absl::Time start = absl::Now();
  const uint8_t msg[4] = {1, 2, 3, 4};
  MessageKey key{5, 0, 0, 0};
  ASSERT_TRUE(t0->Send(1, key, msg, absl::Now() + absl::Seconds(5)).ok());
  uint8_t got[4] = {};
  absl::Status s = t1->Recv(0, key, absl::MakeSpan(got), absl::Now() + absl::Seconds(3));
  ASSERT_TRUE(s.ok()) << s << " (the hub stalled behind the silent connections)";
  EXPECT_EQ(std::memcmp(got, msg, 4), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 0);  // still waiting for their hellos
  for (int fd : silent) close(fd);
}

// A silent connection is closed once its hello deadline passes, counted and
// named.
TEST(TcpTransportTest, AHelloDeadlineClosesASilentConnection) {
  TcpHubOptions o;
  o.hello_timeout = absl::Milliseconds(200);
  Hubs h(1, o);
  const int fd = RawConnect(h.hubs[0]->port());
  ExpectClosedByHub(fd);
  close(fd);
  EXPECT_EQ(h.hubs[0]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[0]->last_rejection(), HasSubstr("no complete hello within 200ms"));
}

// Valid hellos for a group nobody attaches: parked up to max_parked, the
// rest closed naming the cap; the hub keeps serving.
TEST(TcpTransportTest, AFloodOfParkedConnectionsIsCapped) {
  TcpHubOptions o;
  o.max_parked = 8;
  Hubs h(2, o);
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    fds.push_back(RawHello(h.hubs[1]->port(), 1000 + i, 0, 1, 2));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (h.hubs[1]->rejected_connections() + h.hubs[1]->parked_connections() < 20 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  EXPECT_EQ(h.hubs[1]->parked_connections(), 8);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 12);
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("8 connections are parked (max_parked)"));
  for (int fd : fds) close(fd);
  // A job still connects.
  auto t0 = h.Make(5, 0);
  auto t1 = h.Make(5, 1);
  const uint8_t msg[1] = {9};
  MessageKey key{5, 0, 0, 0};
  ASSERT_TRUE(t0->Send(1, key, msg, absl::Now() + absl::Seconds(5)).ok());
  uint8_t got[1] = {};
  absl::Status s = t1->Recv(0, key, absl::MakeSpan(got), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got[0], 9);
}

// Valid hellos for an attached rank queue per peer (the one being read and
// reconnects) up to TcpInbox::kMaxQueuedPerPeer; a peer that keeps
// connecting gets the rest closed, naming the cap, instead of exhausting
// the worker's descriptors.
TEST(TcpTransportTest, ConnectionsQueuedFromOnePeerAreCapped) {
  Hubs h(2);
  auto t1 = h.Make(7, 1);  // rank 1 of group 7 attached: its inbox takes hellos
  const int n = static_cast<int>(TcpInbox::kMaxQueuedPerPeer) + 4;
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    fds.push_back(RawHello(h.hubs[1]->port(), 7, 0, 1, 2));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (h.hubs[1]->rejected_connections() < 4 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 4);
  EXPECT_THAT(h.hubs[1]->last_rejection(),
              HasSubstr("connection from rank 0 for group 7 rank 1: 8 connections from it are "
                        "already queued"));
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("connection from 127.0.0.1:"));
  for (int fd : fds) close(fd);
}

TEST(TcpTransportTest, UnreachablePeerIsUnavailableNamingIt) {
  Hubs h(1);
  // A port nobody listens on: bind one and close it.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len);
  const int dead_port = ntohs(a.sin_port);
  close(probe);
  auto t = TcpTransport::Create(
      h.hubs[0].get(), 1, 0,
      {h.Addresses()[0], absl::StrCat("127.0.0.1:", dead_port)}, WithSecret({}));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status s = (*t)->Send(1, MakeKey(1, 0, 0, 0), Bytes(4, 0),
                              absl::Now() + absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("peer rank 1 (127.0.0.1:", dead_port)));
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

TEST(TcpHelloAuthTest, WireHelloVerifiesOnlyUnderItsSecretAndNonce) {
  const dataauth::Nonce nonce = dataauth::RandomNonce();
  const std::vector<uint8_t> hello = HelloBytes(7, 0, 1, 2, nonce);
  ASSERT_EQ(hello.size(), 72u);
  tcpwire::Hello h;
  ASSERT_TRUE(tcpwire::DecodeHello(hello.data(), &h).ok());
  EXPECT_EQ(h.group, 7u);
  EXPECT_TRUE(tcpwire::VerifyHello(hello.data(), kSecret, nonce).ok());
  // Another secret, another nonce, or any changed byte: refused.
  const absl::Status other_secret =
      tcpwire::VerifyHello(hello.data(), std::string(dataauth::kSecretBytes, 't'), nonce);
  EXPECT_EQ(other_secret.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(other_secret.message()),
              HasSubstr("hello from rank 0 for group 7 rank 1 has a wrong mac"));
  EXPECT_FALSE(tcpwire::VerifyHello(hello.data(), kSecret, dataauth::RandomNonce()).ok());
  for (size_t i = 0; i < hello.size(); ++i) {
    std::vector<uint8_t> changed = hello;
    changed[i] ^= 0x01;
    EXPECT_FALSE(tcpwire::VerifyHello(changed.data(), kSecret, nonce).ok()) << "byte " << i;
  }
  // A challenge of another version is refused naming it.
  uint8_t c[tcpwire::kChallengeBytes];
  tcpwire::EncodeChallenge(nonce, c);
  dataauth::Nonce got{};
  ASSERT_TRUE(tcpwire::DecodeChallenge(c, &got).ok());
  EXPECT_EQ(got, nonce);
  c[4] = 1;  // version 1
  EXPECT_THAT(std::string(tcpwire::DecodeChallenge(c, &got).message()),
              HasSubstr("bad challenge"));
}

// Sends one 4-byte message from t0 to t1 under `key` and checks it arrives.
void ExpectDelivered(TcpTransport& t0, TcpTransport& t1, const MessageKey& key) {
  const uint8_t msg[4] = {1, 2, 3, 4};
  ASSERT_TRUE(t0.Send(1, key, msg, absl::Now() + absl::Seconds(5)).ok());
  uint8_t got[4] = {};
  absl::Status s = t1.Recv(0, key, absl::MakeSpan(got), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::memcmp(got, msg, 4), 0);
}

// A frame header carrying `n` payload bytes for `key`, and the payload.
std::vector<uint8_t> ForgedFrame(const MessageKey& key, size_t n) {
  std::vector<uint8_t> f(tcpwire::kHeaderBytes + n, 0xEE);
  tcpwire::EncodeFrame(key, static_cast<int64_t>(n), f.data());
  return f;
}

// A stranger that does not know the job's secret (or knows another job's)
// and sends a hello naming rank 0 of the job, then frames: refused before
// any frame is read, named with its address; rank 1 receives only rank 0's
// real message.
TEST(TcpHelloAuthTest, WrongSecretOrAnotherJobsSecretIsRefusedBeforeAnyFrame) {
  std::vector<std::string> logged;
  absl::Mutex log_mu;
  TcpHubOptions ho;
  ho.on_reject = [&](const std::string& why) {
    absl::MutexLock l(&log_mu);
    logged.push_back(why);
  };
  Hubs h(2, ho);
  auto t1 = h.Make(7, 1);
  const MessageKey key{7, 0, 0, 0};
  // The other job (group 8) has its own secret; its hello for group 7 is no good either.
  const std::string other_job_secret(dataauth::kSecretBytes, '8');
  for (const std::string& secret : {std::string(dataauth::kSecretBytes, 'x'), other_job_secret}) {
    const int fd = RawHello(h.hubs[1]->port(), 7, 0, 1, 2, secret);
    SendAll(fd, ForgedFrame(key, 4));
    ExpectClosedByHub(fd);
    close(fd);
  }
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 2);
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("connection from 127.0.0.1:"));
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("wrong mac"));
  {
    absl::MutexLock l(&log_mu);
    ASSERT_EQ(logged.size(), 2u);
    EXPECT_THAT(logged[0], HasSubstr("connection from 127.0.0.1:"));
    EXPECT_THAT(logged[0], HasSubstr("hello from rank 0 for group 7 rank 1 has a wrong mac"));
  }
  // Nothing of the strangers' reached rank 1: the first message it reads
  // from rank 0 is the real one.
  uint8_t got[4];
  EXPECT_EQ(t1->Recv(0, key, absl::MakeSpan(got), absl::Now() + absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  auto t0 = h.Make(7, 0);
  ExpectDelivered(*t0, *t1, key);
}

// The same for a hello that arrives before its rank attached: it is parked
// and its mac checked when the rank's secret is known.
TEST(TcpHelloAuthTest, AParkedForgedHelloIsRefusedWhenItsRankAttaches) {
  Hubs h(2);
  const int fd = RawHello(h.hubs[1]->port(), 7, 0, 1, 2, std::string(dataauth::kSecretBytes, 'x'));
  SendAll(fd, ForgedFrame(MessageKey{7, 0, 0, 0}, 4));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (h.hubs[1]->parked_connections() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  ASSERT_EQ(h.hubs[1]->parked_connections(), 1);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 0);
  auto t1 = h.Make(7, 1);  // attaches: the parked hello is checked now
  ExpectClosedByHub(fd);
  close(fd);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("wrong mac"));
  auto t0 = h.Make(7, 0);
  ExpectDelivered(*t0, *t1, MessageKey{7, 0, 0, 0});
}

// A hello for a rank this hub does not hold, of a group attached here (the
// worker holding rank 0 gets a hello naming rank 1): its mac is checked at
// once with the group's secret and it is refused either way (a forged one
// as a wrong mac, a good one as naming a rank held elsewhere), never parked
// unread; a hello for a group not attached here is still parked.
TEST(TcpHelloAuthTest, AForgedHelloForARankNotAttachedYetIsRefusedAtOnce) {
  std::vector<std::string> logged;
  absl::Mutex log_mu;
  TcpHubOptions ho;
  ho.on_reject = [&](const std::string& why) {
    absl::MutexLock l(&log_mu);
    logged.push_back(why);
  };
  Hubs h(2, ho);
  auto t0 = h.Make(7, 0);  // hub 0 holds rank 0 of group 7 only
  const int forged =
      RawHello(h.hubs[0]->port(), 7, 0, 1, 2, std::string(dataauth::kSecretBytes, 'x'));
  SendAll(forged, ForgedFrame(MessageKey{7, 0, 0, 0}, 4));
  ExpectClosedByHub(forged);
  close(forged);
  EXPECT_EQ(h.hubs[0]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[0]->last_rejection(), HasSubstr("connection from 127.0.0.1:"));
  EXPECT_THAT(h.hubs[0]->last_rejection(),
              HasSubstr("hello from rank 0 for group 7 rank 1 has a wrong mac"));
  EXPECT_EQ(h.hubs[0]->parked_connections(), 0);
  {
    absl::MutexLock l(&log_mu);
    ASSERT_EQ(logged.size(), 1u);
    EXPECT_THAT(logged[0], HasSubstr("connection from 127.0.0.1:"));
    EXPECT_THAT(logged[0], HasSubstr("wrong mac"));
  }
  // The right secret for a rank of the group not attached here yet: parked
  // (ranks sharing one hub attach in any order), not refused.
  const int valid = RawHello(h.hubs[0]->port(), 7, 0, 1, 2);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (h.hubs[0]->parked_connections() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  EXPECT_EQ(h.hubs[0]->parked_connections(), 1);
  EXPECT_EQ(h.hubs[0]->rejected_connections(), 1);
  // A group nobody attached here yet keeps waiting for its rank.
  const int early = RawHello(h.hubs[0]->port(), 9, 1, 0, 2);
  deadline = absl::Now() + absl::Seconds(10);
  while (h.hubs[0]->parked_connections() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  EXPECT_EQ(h.hubs[0]->parked_connections(), 2);
  EXPECT_EQ(h.hubs[0]->rejected_connections(), 1);
  close(early);
  close(valid);
  // The job itself is unaffected.
  auto t1 = h.Make(7, 1);
  ExpectDelivered(*t0, *t1, MessageKey{7, 0, 0, 0});
}

// Ranks of one group sharing one hub attach in any order: a valid hello for
// a rank that attaches after its sibling is parked and delivered.
TEST(TcpHelloAuthTest, RanksSharingAHubAttachInAnyOrder) {
  Hubs h(1);
  const std::vector<std::string> both = {h.Addresses()[0], h.Addresses()[0]};
  auto t0 = TcpTransport::Create(h.hubs[0].get(), 7, 0, both, WithSecret({}));
  ASSERT_TRUE(t0.ok()) << t0.status();
  const uint8_t msg[4] = {1, 2, 3, 4};
  std::thread sender([&] {
    EXPECT_TRUE((*t0)->Send(1, MessageKey{7, 0, 0, 0}, msg, absl::Now() + absl::Seconds(20)).ok());
  });
  // Rank 1 attaches only once rank 0's connection is parked on the hub.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (h.hubs[0]->parked_connections() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  EXPECT_EQ(h.hubs[0]->parked_connections(), 1);
  auto t1 = TcpTransport::Create(h.hubs[0].get(), 7, 1, both, WithSecret({}));
  ASSERT_TRUE(t1.ok()) << t1.status();
  uint8_t got[4] = {};
  EXPECT_TRUE((*t1)->Recv(0, MessageKey{7, 0, 0, 0}, got, absl::Now() + absl::Seconds(20)).ok());
  sender.join();
  EXPECT_EQ(std::vector<uint8_t>(got, got + 4), std::vector<uint8_t>(msg, msg + 4));
  EXPECT_EQ(h.hubs[0]->rejected_connections(), 0);
}

// A hello recorded from a real rank's connection (here: to a listener that
// plays the hub) and replayed on a new connection does not fit that
// connection's challenge.
TEST(TcpHelloAuthTest, AReplayedHelloIsRefused) {
  Hubs h(2);
  // A fake rank 1: a plain listening socket that challenges and records.
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  auto t0 = TcpTransport::Create(h.hubs[0].get(), 7, 0,
                                 {h.Addresses()[0], absl::StrCat("127.0.0.1:", ntohs(a.sin_port))},
                                 WithSecret({}));
  ASSERT_TRUE(t0.ok()) << t0.status();
  std::vector<uint8_t> recorded(tcpwire::kHelloBytes);
  std::thread fake([&] {
    const int c = accept(lfd, nullptr, nullptr);
    uint8_t ch[tcpwire::kChallengeBytes];
    tcpwire::EncodeChallenge(dataauth::RandomNonce(), ch);
    EXPECT_EQ(send(c, ch, sizeof(ch), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(ch)));
    timeval tv{};
    tv.tv_sec = 10;
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(recv(c, recorded.data(), recorded.size(), MSG_WAITALL),
              static_cast<ssize_t>(recorded.size()));
    close(c);
  });
  const uint8_t msg[4] = {1, 2, 3, 4};
  (void)(*t0)->Send(1, MessageKey{7, 0, 0, 0}, msg, absl::Now() + absl::Seconds(5));
  fake.join();
  close(lfd);
  tcpwire::Hello got;
  ASSERT_TRUE(tcpwire::DecodeHello(recorded.data(), &got).ok());
  EXPECT_EQ(got.group, 7u);
  // Replayed at the real rank 1.
  auto t1 = h.Make(7, 1);
  const int fd = RawConnect(h.hubs[1]->port());
  SendAll(fd, recorded);
  SendAll(fd, ForgedFrame(MessageKey{7, 0, 0, 0}, 4));
  ExpectClosedByHub(fd);
  close(fd);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[1]->last_rejection(), HasSubstr("wrong mac"));
}

// A hello cut short (the mac missing) is refused naming how much came.
TEST(TcpHelloAuthTest, ATruncatedHelloIsRefused) {
  Hubs h(2);
  auto t1 = h.Make(7, 1);
  dataauth::Nonce nonce{};
  const int fd = RawConnect(h.hubs[1]->port(), &nonce);
  std::vector<uint8_t> hello = HelloBytes(7, 0, 1, 2, nonce);
  hello.resize(tcpwire::kHeaderBytes);  // v1-sized: no mac
  SendAll(fd, hello);
  shutdown(fd, SHUT_WR);
  ExpectClosedByHub(fd);
  close(fd);
  EXPECT_EQ(h.hubs[1]->rejected_connections(), 1);
  EXPECT_THAT(h.hubs[1]->last_rejection(),
              HasSubstr("no complete hello (40 of 72 bytes): end of stream"));
}

}  // namespace
}  // namespace lockstep
