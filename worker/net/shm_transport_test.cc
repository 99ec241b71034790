// The shared-memory peer transport: the collective conformance suite (K =
// 1..8 in one process, with a 4 KiB ring that forces wrap-around and the
// writer thread's backlog on nearly every message, and with the default
// ring), and the cases the suite does not reach: a peer that never
// attaches, closes, aborted partial receives, foreign or corrupt segments,
// and that no segment name outlives its link.
#include "worker/net/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/ring_allreduce.h"
#include "common/net/data_auth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/net/shm_link.h"
#include "worker/net/tcp_wire.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

std::atomic<uint64_t> next_group{static_cast<uint64_t>(getpid()) << 20};

std::vector<std::string> Names(int k) {
  std::vector<std::string> names;
  for (int r = 0; r < k; ++r) names.push_back("w" + std::to_string(r));
  return names;
}

std::vector<std::unique_ptr<ShmTransport>> MakeGroup(int k, ShmTransportOptions o,
                                                     uint64_t* group_out = nullptr) {
  const uint64_t group = next_group.fetch_add(1);
  if (group_out != nullptr) *group_out = group;
  if (o.secret.empty()) o.secret = dataauth::RandomSecret();
  std::vector<std::unique_ptr<ShmTransport>> out;
  for (int r = 0; r < k; ++r) {
    auto t = ShmTransport::Create(group, r, Names(k), o);
    EXPECT_TRUE(t.ok()) << t.status();
    out.push_back(*std::move(t));
  }
  return out;
}

// A group whose secret and group key the test knows (to reach its segments).
struct Keyed {
  uint64_t group = 0;
  std::string secret = dataauth::RandomSecret();
  std::vector<std::unique_ptr<ShmTransport>> t;
  std::string Name(uint32_t from, uint32_t to) const {
    return ShmLink::SegmentName(secret, {group, from, to, static_cast<uint32_t>(t.size())});
  }
};

Keyed MakeKeyed(int k, int64_t ring_bytes = ShmTransportOptions{}.ring_bytes) {
  Keyed out;
  ShmTransportOptions o;
  o.secret = out.secret;
  o.ring_bytes = ring_bytes;
  out.t = MakeGroup(k, o, &out.group);
  return out;
}

// Opens link from -> to of `kg` as its writer, as a peer process would
// (null on failure).
std::unique_ptr<ShmLink> FakeWriter(const Keyed& kg, uint32_t from, uint32_t to) {
  const ShmLinkId id{kg.group, from, to, static_cast<uint32_t>(kg.t.size())};
  auto w = ShmLink::Open(kg.Name(from, to), ShmLink::Side::kWriter, id, 4096,
                         absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

std::vector<std::unique_ptr<Transport>> AsTransports(std::vector<std::unique_ptr<ShmTransport>> g) {
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& t : g) out.push_back(std::move(t));
  return out;
}

std::vector<std::unique_ptr<Transport>> MakeSmallRing(int k) {
  ShmTransportOptions o;
  o.ring_bytes = 4096;
  return AsTransports(MakeGroup(k, o));
}

std::vector<std::unique_ptr<Transport>> MakeDefault(int k) {
  return AsTransports(MakeGroup(k, ShmTransportOptions{}));
}

INSTANTIATE_TEST_SUITE_P(
    Shm, TransportConformanceTest,
    ::testing::Values(TransportFactoryParam{"Shm4KiB", MakeSmallRing},
                      TransportFactoryParam{"ShmDefault", MakeDefault}),
    TransportParamName);

bool Exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

TEST(ShmTransportTest, BacklogKeepsOrderAndBytesAndFlowControlHasADeadline) {
  ShmTransportOptions o;
  o.ring_bytes = 4096;
  o.max_queued_bytes = 64 << 10;
  auto g = MakeGroup(2, o);
  // Nobody reads yet: the first message fills the ring, the rest queue.
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 6; ++i) {
    sent.push_back(Pattern(10000 + i, static_cast<uint8_t>(i)));
    ASSERT_TRUE(g[0]->Send(1, MakeKey(1, 1, 0, i), sent.back(), Soon()).ok());
  }
  EXPECT_GE(g[0]->messages_backlogged(), 5);
  // Over the limit: the next Send waits, then fails at its deadline.
  std::vector<uint8_t> big(80 << 10, 1);
  ASSERT_TRUE(g[0]->Send(1, MakeKey(1, 1, 0, 6), big, Soon()).ok());  // one always fits
  absl::Status s = g[0]->Send(1, MakeKey(1, 1, 0, 7), big, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1 (w1)"));
  for (int i = 0; i < 6; ++i) {
    std::vector<uint8_t> got(sent[i].size());
    ASSERT_TRUE(g[1]->Recv(0, MakeKey(1, 1, 0, i), absl::MakeSpan(got), Soon()).ok());
    EXPECT_EQ(got, sent[i]) << i;
  }
  std::vector<uint8_t> got(big.size());
  ASSERT_TRUE(g[1]->Recv(0, MakeKey(1, 1, 0, 6), absl::MakeSpan(got), Soon()).ok());
  EXPECT_EQ(got, big);
}

TEST(ShmTransportTest, APeerThatNeverAttachesIsNamedAtTheDeadline) {
  auto g = MakeGroup(2, ShmTransportOptions{});
  std::vector<uint8_t> out(16);
  const absl::Time start = absl::Now();
  absl::Status s = g[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(out),
                              absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 0 (w0)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("never attached to /dev/shm/lockstep-"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("same /dev/shm"));
}

TEST(ShmTransportTest, SegmentNamesAreGoneOnceBothSidesAttachedOrClosed) {
  Keyed kg = MakeKeyed(3);
  auto& g = kg.t;
  const uint64_t group = kg.group;
  const std::string& secret = kg.secret;
  const std::string n01 = ShmLink::SegmentName(secret, {group, 0, 1, 3});
  const std::string n12 = ShmLink::SegmentName(secret, {group, 1, 2, 3});
  std::vector<uint8_t> one(8, 3);
  ASSERT_TRUE(g[0]->Send(1, MakeKey(1, 1, 0, 0), one, Soon()).ok());
  EXPECT_TRUE(Exists(n01));  // the reader has not come yet
  std::vector<uint8_t> got(8);
  ASSERT_TRUE(g[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(got), Soon()).ok());
  EXPECT_FALSE(Exists(n01));  // both attached: unlinked, still mapped
  ASSERT_TRUE(g[1]->Send(2, MakeKey(1, 1, 0, 0), one, Soon()).ok());
  EXPECT_TRUE(Exists(n12));
  g[1]->Shutdown();  // rank 2 has not come: its bytes wait under the name
  EXPECT_TRUE(Exists(n12));
  ASSERT_TRUE(g[2]->Recv(1, MakeKey(1, 1, 0, 0), absl::MakeSpan(got), Soon()).ok());
  EXPECT_EQ(got, one);
  EXPECT_FALSE(Exists(n12));  // the late reader removed it
  // A reader that closes before its writer came removes the name.
  const std::string n20 = ShmLink::SegmentName(secret, {group, 2, 0, 3});
  EXPECT_EQ(g[0]->Recv(2, MakeKey(1, 1, 0, 0), absl::MakeSpan(got),
                       absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Exists(n20));
  g[0]->Shutdown();
  EXPECT_FALSE(Exists(n20));
  // The names depend on the secret and the link.
  EXPECT_NE(ShmLink::SegmentName(dataauth::RandomSecret(), {group, 0, 1, 3}), n01);
  EXPECT_NE(ShmLink::SegmentName(secret, {group, 1, 0, 3}), n01);
  EXPECT_NE(ShmLink::SegmentName(secret, {group + 1, 0, 1, 3}), n01);
}

TEST(ShmTransportTest, PeerShutdownFailsRecvAtOnceAfterItsMessages) {
  auto g = MakeGroup(2, ShmTransportOptions{});
  std::vector<uint8_t> msg = Pattern(1000, 9);
  ASSERT_TRUE(g[0]->Send(1, MakeKey(1, 1, 0, 0), msg, Soon()).ok());
  g[0]->Shutdown();
  std::vector<uint8_t> got(msg.size());
  ASSERT_TRUE(g[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(got), Soon()).ok());
  EXPECT_EQ(got, msg);
  const absl::Time start = absl::Now();
  absl::Status s = g[1]->Recv(0, MakeKey(1, 1, 0, 1), absl::MakeSpan(got), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_THAT(std::string(s.message()), HasSubstr("writer closed"));
}

TEST(ShmTransportTest, ShutdownWakesABlockedRecv) {
  Keyed kg = MakeKeyed(2);
  auto& g = kg.t;
  absl::Status s;
  std::thread t([&] {
    std::vector<uint8_t> out(4);
    s = g[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(out), absl::Now() + absl::Seconds(60));
  });
  // The Recv made its link (it waits on it from then on).
  while (!Exists(kg.Name(0, 1))) std::this_thread::yield();
  const absl::Time start = absl::Now();
  g[1]->Shutdown();
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// A fake peer: writes bytes into rank 1's inbound link from rank 0 directly.
TEST(ShmTransportTest, AbortedPartialReceiveIsSkippedByTheNextStep) {
  Keyed kg = MakeKeyed(2, 4096);
  auto& g = kg.t;
  std::unique_ptr<ShmLink> w = FakeWriter(kg, 0, 1);
  ASSERT_NE(w, nullptr);
  uint8_t hdr[tcpwire::kHeaderBytes];
  tcpwire::EncodeFrame(MakeKey(1, 3, 0, 0), 3000, hdr);
  std::vector<uint8_t> half(1500, 5);
  ASSERT_EQ(*w->Write(absl::MakeConstSpan(hdr, sizeof(hdr)), half), sizeof(hdr) + 1500);
  std::vector<uint8_t> out(3000);
  absl::Status s = g[1]->Recv(0, MakeKey(1, 3, 0, 0), absl::MakeSpan(out),
                              absl::Now() + absl::Milliseconds(150));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("after 1500 of its 3000 bytes"));
  // The rest of step 3's message, then step 4's.
  ASSERT_EQ(*w->Write(half), 1500u);
  tcpwire::EncodeFrame(MakeKey(1, 4, 0, 0), 4, hdr);
  const uint8_t four[4] = {1, 2, 3, 4};
  ASSERT_EQ(*w->Write(absl::MakeConstSpan(hdr, sizeof(hdr)), four), sizeof(hdr) + 4);
  std::vector<uint8_t> next(4);
  ASSERT_TRUE(g[1]->Recv(0, MakeKey(1, 4, 0, 0), absl::MakeSpan(next), Soon()).ok());
  EXPECT_EQ(next, std::vector<uint8_t>({1, 2, 3, 4}));
}

TEST(ShmTransportTest, CorruptIndicesAndHeadersAreDataLossNamingThePeer) {
  {
    Keyed kg = MakeKeyed(2, 4096);
    std::unique_ptr<ShmLink> w = FakeWriter(kg, 0, 1);
    ASSERT_NE(w, nullptr);
    // A head far past the tail, written straight into the segment.
    const int fd = shm_open(kg.Name(0, 1).c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    void* p = mmap(nullptr, ShmLink::kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    const uint64_t bad_head = 1 << 20;
    std::memcpy(static_cast<uint8_t*>(p) + 64, &bad_head, 8);
    std::vector<uint8_t> out(8);
    absl::Status s = kg.t[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(out), Soon());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 0 (w0)"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("corrupt shared-memory link"));
    munmap(p, ShmLink::kHeaderBytes);
  }
  {
    Keyed kg = MakeKeyed(2, 4096);
    std::unique_ptr<ShmLink> w = FakeWriter(kg, 0, 1);
    ASSERT_NE(w, nullptr);
    std::vector<uint8_t> junk(tcpwire::kHeaderBytes, 0xab);
    ASSERT_TRUE(w->Write(junk).ok());
    std::vector<uint8_t> out(8);
    absl::Status s = kg.t[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(out), Soon());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("corrupt frame header from peer 0"));
  }
}

TEST(ShmTransportTest, ASegmentThatIsNotOursIsRefused) {
  Keyed kg = MakeKeyed(2, 4096);
  auto& g = kg.t;
  const uint64_t group = kg.group;
  const std::string& secret = kg.secret;
  // Readable by others: refused before it is mapped.
  const std::string name = ShmLink::SegmentName(secret, {group, 0, 1, 2});
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0644), 0);
  close(fd);
  std::vector<uint8_t> one(1, 1);
  absl::Status s = g[0]->Send(1, MakeKey(1, 1, 0, 0), one, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no access for others"));
  shm_unlink(name.c_str());
  // Made for another world size: FailedPrecondition naming both.
  const ShmLinkId other{group, 1, 0, 3};
  auto w = ShmLink::Open(ShmLink::SegmentName(secret, {group, 1, 0, 2}), ShmLink::Side::kWriter,
                         other, 4096, Soon());
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> out(1);
  s = g[0]->Recv(1, MakeKey(1, 1, 0, 0), absl::MakeSpan(out), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1->0 of 3"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected group"));
  // The refusal wrote nothing into that segment: its writer's view is intact.
  EXPECT_FALSE((*w)->peer_attached());
  EXPECT_FALSE((*w)->peer_closed());
}

TEST(ShmTransportTest, ShutdownWakesASendWaitingInFlowControl) {
  ShmTransportOptions o;
  o.ring_bytes = 4096;
  o.max_queued_bytes = 1;
  o.close_timeout = absl::Milliseconds(200);  // nobody reads the backlog
  auto g = MakeGroup(2, o);
  std::vector<uint8_t> big(64 << 10, 7);
  ASSERT_TRUE(g[0]->Send(1, MakeKey(1, 1, 0, 0), big, Soon()).ok());  // backlogged
  absl::Status s;
  std::thread t([&] {
    s = g[0]->Send(1, MakeKey(1, 1, 0, 1), big, absl::Now() + absl::Seconds(60));
  });
  // Any order is right: a Send after Shutdown is CancelledError at once.
  const absl::Time start = absl::Now();
  g[0]->Shutdown();
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(ShmTransportTest, SendToAClosedReaderIsUnavailable) {
  auto g = MakeGroup(2, ShmTransportOptions{});
  std::vector<uint8_t> one(8, 1), got(8);
  ASSERT_TRUE(g[0]->Send(1, MakeKey(1, 1, 0, 0), one, Soon()).ok());
  ASSERT_TRUE(g[1]->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(got), Soon()).ok());
  g[1]->Shutdown();
  absl::Status s = g[0]->Send(1, MakeKey(1, 2, 0, 0), one, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1 (w1): the reader closed"));
}

TEST(ShmTransportTest, StaleSegmentNamesAreRemoved) {
  // A writer whose reader never came left its name: ten minutes later the
  // next transport created on this host removes it.
  const std::string secret = dataauth::RandomSecret();
  const ShmLinkId id{next_group.fetch_add(1), 0, 1, 2};
  const std::string name = ShmLink::SegmentName(secret, id);
  {
    auto w = ShmLink::Open(name, ShmLink::Side::kWriter, id, 4096, Soon());
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> one(1, 1);
    ASSERT_EQ(*(*w)->Write(one), 1u);
  }
  ASSERT_TRUE(Exists(name));
  const std::string fresh_name = ShmLink::SegmentName(secret, {id.group, 1, 0, 2});
  auto fresh = ShmLink::Open(fresh_name, ShmLink::Side::kReader, {id.group, 1, 0, 2}, 4096,
                             Soon());
  ASSERT_TRUE(fresh.ok());
  const struct timespec old_times[2] = {{0, UTIME_OMIT}, {time(nullptr) - 11 * 60, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, ("/dev/shm" + name).c_str(), old_times, 0), 0);
  ShmTransportOptions o;
  o.secret = secret;
  ASSERT_TRUE(ShmTransport::Create(id.group, 0, Names(2), o).ok());
  EXPECT_FALSE(Exists(name));
  EXPECT_TRUE(Exists(fresh_name));  // a young name stays
}

TEST(ShmTransportTest, BadArgumentsAreRejected) {
  ShmTransportOptions o;
  EXPECT_EQ(ShmTransport::Create(1, 0, Names(2), o).status().code(),
            absl::StatusCode::kInvalidArgument);  // no secret
  o.secret = dataauth::RandomSecret();
  EXPECT_EQ(ShmTransport::Create(1, 2, Names(2), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.ring_bytes = 5000;
  absl::Status s = ShmTransport::Create(1, 0, Names(2), o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ring_bytes 5000"));
}

TEST(ShmTransportTest, AGroupLeavesNoSegmentName) {
  Keyed kg = MakeKeyed(4);
  std::vector<std::thread> ts;
  std::vector<std::vector<float>> data(4, std::vector<float>(1000));
  for (int r = 0; r < 4; ++r) {
    std::iota(data[r].begin(), data[r].end(), static_cast<float>(r));
    ts.emplace_back([&, r] {
      RingAllReducer ar(kg.t[r].get());
      int64_t count = 1;
      AllReduceOptions ao;
      ao.job = 1;
      ao.step = 1;
      ao.algorithm = AllReduceAlgorithm::kRing;
      EXPECT_TRUE(ar.AllReduce(absl::MakeSpan(data[r]), &count, ao).ok());
      EXPECT_EQ(count, 4);
    });
  }
  for (auto& t : ts) t.join();
  for (uint32_t from = 0; from < 4; ++from) {
    for (uint32_t to = 0; to < 4; ++to) {
      if (from != to) {
        EXPECT_FALSE(Exists(kg.Name(from, to))) << from << "->" << to;
      }
    }
  }
  kg.t.clear();
  for (uint32_t from = 0; from < 4; ++from) {
    for (uint32_t to = 0; to < 4; ++to) {
      if (from != to) {
        EXPECT_FALSE(Exists(kg.Name(from, to))) << from << "->" << to;
      }
    }
  }
}


// A wait counts from the last byte moved (common/collective/peer_wait.h):
// the sender's mark moves when its writer thread copies backlog into the
// ring as the reader frees space, the receiver's as it copies bytes out.
// With a 4 KiB ring, a 1 MiB message is mostly written after the receiver
// began reading, so both marks must be at or after that time.
TEST(ShmTransportTest, BytesMovedTouchBothSidesProgressMarks) {
  ProgressMark mark0, mark1;
  const uint64_t group = next_group.fetch_add(1);
  ShmTransportOptions o;
  o.secret = dataauth::RandomSecret();
  o.ring_bytes = 4096;
  o.progress = &mark0;
  auto t0 = ShmTransport::Create(group, 0, Names(2), o);
  o.progress = &mark1;
  auto t1 = ShmTransport::Create(group, 1, Names(2), o);
  ASSERT_TRUE(t0.ok() && t1.ok());
  const int64_t before = ProgressMark::SteadyNanos();
  const std::vector<uint8_t> sent = Pattern(1 << 20, 3);
  ASSERT_TRUE((*t0)->Send(1, MakeKey(1, 1, 0, 0), sent, Soon()).ok());
  EXPECT_GE(mark0.last_ns(), before);  // the first 4 KiB went in directly
  EXPECT_EQ(mark1.last_ns(), 0);
  const int64_t reading = ProgressMark::SteadyNanos();
  std::vector<uint8_t> got(sent.size());
  ASSERT_TRUE((*t1)->Recv(0, MakeKey(1, 1, 0, 0), absl::MakeSpan(got), Soon()).ok());
  EXPECT_EQ(got, sent);
  EXPECT_GE(mark1.last_ns(), reading);
  (*t0)->Shutdown();  // joins the writer thread: its touches are visible
  EXPECT_GE(mark0.last_ns(), reading);
  EXPECT_LE(mark0.last_ns(), ProgressMark::SteadyNanos());
}

}  // namespace
}  // namespace lockstep
