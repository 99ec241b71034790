// The conformance suite, part 1: the parameter names and the Transport
// contract (transport.h). Part 2, the ring all-reduce and the direct
// exchange, is collective_conformance_ring.cc; part 3, the
// parameter-server round, collective_conformance_ps.cc; their shared
// helpers collective_conformance_util.h.
#include "common/collective/collective_conformance.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/collective/chunking.h"
#include "common/collective/collective_conformance_util.h"
#include "common/collective/fault_transport.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep {

void PrintTo(const TransportFactoryParam& p, std::ostream* os) {
  *os << p.name;
}

void PrintTo(const PsClientFactoryParam& p, std::ostream* os) {
  *os << p.name;
}

std::string TransportParamName(
    const ::testing::TestParamInfo<TransportFactoryParam>& info) {
  return info.param.name;
}

std::string PsParamName(
    const ::testing::TestParamInfo<PsClientFactoryParam>& info) {
  return info.param.name;
}

// A test binary may instantiate only one of the two suites.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsConformanceTest);

namespace conformance {
namespace {

using ::testing::HasSubstr;

// ---- Transport contract ----

TEST_P(TransportConformanceTest, RanksAndWorldSize) {
  for (int k = 1; k <= 4; ++k) {
    auto ts = GetParam().make(k);
    ASSERT_EQ(ts.size(), static_cast<size_t>(k));
    for (int r = 0; r < k; ++r) {
      EXPECT_EQ(ts[r]->rank(), r);
      EXPECT_EQ(ts[r]->world_size(), k);
    }
  }
}

TEST_P(TransportConformanceTest, InOrderPerPeerAndIndependentAcrossPeers) {
  auto ts = GetParam().make(3);
  const absl::Time deadline = absl::Now() + kLong;
  for (int from = 1; from <= 2; ++from) {
    for (int j = 0; j < 5; ++j) {
      const std::vector<uint8_t> p = Payload(from * 10 + j, 16 + j);
      ASSERT_TRUE(ts[from]->Send(0, MakeKey(1, 0, 0, j), p, deadline).ok());
    }
  }
  // Drain peer 2 before peer 1: streams of different peers are independent.
  for (int from = 2; from >= 1; --from) {
    for (int j = 0; j < 5; ++j) {
      std::vector<uint8_t> got(16 + j);
      absl::Status s = ts[0]->Recv(from, MakeKey(1, 0, 0, j), absl::MakeSpan(got),
                                   deadline);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(got, Payload(from * 10 + j, 16 + j));
    }
  }
}

TEST_P(TransportConformanceTest, SendCopiesTheBuffer) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  std::vector<uint8_t> p = Payload(3, 100);
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(1, 0, 0, 0), p, deadline).ok());
  std::fill(p.begin(), p.end(), 0);
  std::vector<uint8_t> got(100);
  ASSERT_TRUE(
      ts[1]->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got), deadline).ok());
  EXPECT_EQ(got, Payload(3, 100));
}

TEST_P(TransportConformanceTest, ZeroLengthMessages) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  ASSERT_TRUE(ts[1]->Send(0, MakeKey(1, 0, 0, 0), {}, deadline).ok());
  ASSERT_TRUE(ts[0]->Recv(1, MakeKey(1, 0, 0, 0), {}, deadline).ok());
}

TEST_P(TransportConformanceTest, RecvTimesOutNamingThePeer) {
  auto ts = GetParam().make(3);
  std::vector<uint8_t> got(4);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(50);
  absl::Status s =
      ts[0]->Recv(2, MakeKey(1, 0, 0, 0), absl::MakeSpan(got), deadline);
  EXPECT_GE(absl::Now(), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 2"));
}

TEST_P(TransportConformanceTest, KeyMismatchIsReportedAndNotConsumed) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  const MessageKey sent = MakeKey(4, 9, 2, 5);
  const MessageKey want = MakeKey(4, 9, 2, 6);
  ASSERT_TRUE(ts[0]->Send(1, sent, Payload(1, 8), deadline).ok());
  std::vector<uint8_t> got(8);
  absl::Status s = ts[1]->Recv(0, want, absl::MakeSpan(got), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(KeyToString(sent)));
  EXPECT_THAT(std::string(s.message()), HasSubstr(KeyToString(want)));
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
  // The message is still there for the right key.
  s = ts[1]->Recv(0, sent, absl::MakeSpan(got), deadline);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, Payload(1, 8));
}

TEST_P(TransportConformanceTest, SizeMismatchIsReported) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(1, 0, 0, 0), Payload(1, 8), deadline).ok());
  std::vector<uint8_t> got(4);
  absl::Status s =
      ts[1]->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(got), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("8 bytes"));
}

TEST_P(TransportConformanceTest, OlderStepsOfTheSameJobAreDiscarded) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(1, 1, 0, 0), Payload(1, 8), deadline).ok());
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(1, 1, 1, 3), Payload(2, 3), deadline).ok());
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(1, 2, 0, 0), Payload(3, 8), deadline).ok());
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(1, 3, 0, 0), Payload(4, 8), deadline).ok());
  std::vector<uint8_t> got(8);
  absl::Status s =
      ts[1]->Recv(0, MakeKey(1, 2, 0, 0), absl::MakeSpan(got), deadline);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, Payload(3, 8));
  // A NEWER step is a mismatch, not stale, and stays queued.
  s = ts[1]->Recv(0, MakeKey(1, 2, 1, 0), absl::MakeSpan(got), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  s = ts[1]->Recv(0, MakeKey(1, 3, 0, 0), absl::MakeSpan(got), deadline);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, Payload(4, 8));
}

TEST_P(TransportConformanceTest, OtherJobsAreNotStale) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  ASSERT_TRUE(ts[0]->Send(1, MakeKey(2, 0, 0, 0), Payload(1, 8), deadline).ok());
  std::vector<uint8_t> got(8);
  absl::Status s =
      ts[1]->Recv(0, MakeKey(1, 5, 0, 0), absl::MakeSpan(got), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("job=2"));
}

TEST_P(TransportConformanceTest, InvalidPeersAreRejected) {
  auto ts = GetParam().make(3);
  const absl::Time deadline = absl::Now() + kLong;
  std::vector<uint8_t> buf(4);
  for (int peer : {-1, 1, 3}) {
    SCOPED_TRACE(peer);
    EXPECT_EQ(ts[1]->Send(peer, MakeKey(1, 0, 0, 0), buf, deadline).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        ts[1]->Recv(peer, MakeKey(1, 0, 0, 0), absl::MakeSpan(buf), deadline)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
}

// One sender thread and one receiver thread per endpoint, both directions.
TEST_P(TransportConformanceTest, ConcurrentSendAndRecv) {
  auto ts = GetParam().make(2);
  const absl::Time deadline = absl::Now() + kLong;
  constexpr int kMessages = 300;
  std::vector<absl::Status> status(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      for (int j = 0; j < kMessages && status[2 * r].ok(); ++j) {
        status[2 * r] = ts[r]->Send(1 - r, MakeKey(1, 0, r, j),
                                    Payload(r * 1000 + j, 1 + j % 97), deadline);
      }
    });
    threads.emplace_back([&, r] {
      for (int j = 0; j < kMessages && status[2 * r + 1].ok(); ++j) {
        std::vector<uint8_t> got(1 + j % 97);
        status[2 * r + 1] = ts[r]->Recv(1 - r, MakeKey(1, 0, 1 - r, j),
                                        absl::MakeSpan(got), deadline);
        if (status[2 * r + 1].ok() &&
            got != Payload((1 - r) * 1000 + j, 1 + j % 97)) {
          status[2 * r + 1] = absl::DataLossError(
              absl::StrCat("payload mismatch at message ", j));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace conformance
}  // namespace lockstep
