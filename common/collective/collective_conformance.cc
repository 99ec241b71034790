#include "common/collective/collective_conformance.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/collective/chunking.h"
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

namespace {

using ::testing::HasSubstr;

// Healthy calls get a deadline no test run should ever hit (asan, 2 cores);
// calls that are expected to fail wait kShort; every call must return within
// its timeout plus kSlack.
constexpr absl::Duration kLong = absl::Seconds(120);
constexpr absl::Duration kShort = absl::Milliseconds(400);
constexpr absl::Duration kSlack = absl::Seconds(10);
constexpr int kMaxWorld = 8;
constexpr int64_t kBig = 1000003;

void RunRanks(int k, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(k);
  for (int r = 0; r < k; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

std::vector<uint8_t> Payload(int seed, size_t size) {
  std::vector<uint8_t> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i);
  return v;
}

// ---- Closed-form contributions ----
// Rank r contributes element i = r + (i % 7) with count r + 1, except that
// for K >= 2 the last rank has 0 examples (all-zero sum, count 0). All values
// are small integers, so every float sum is exact in any order.
int Contributors(int k) { return k == 1 ? 1 : k - 1; }

void FillRank(int k, int r, absl::Span<float> v, int64_t* count) {
  if (k > 1 && r == k - 1) {
    std::fill(v.begin(), v.end(), 0.0f);
    *count = 0;
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + i % 7);
  *count = r + 1;
}

float ExpectedSum(int k, int64_t i) {
  const int64_t m = Contributors(k);
  return static_cast<float>(m * (m - 1) / 2 + m * (i % 7));
}

int64_t ExpectedCount(int k) {
  const int64_t m = Contributors(k);
  return m * (m + 1) / 2;
}

// "" if v is the closed-form sum, else the first mismatch.
std::string CheckClosedForm(int k, absl::Span<const float> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = ExpectedSum(k, static_cast<int64_t>(i));
    if (v[i] != want) {
      return absl::StrFormat("element %d is %g, expected %g", i, v[i], want);
    }
  }
  return "";
}

// The largest buffer the direct algorithm takes in one message (2 MiB).
constexpr int64_t kDirectBig = kMaxSegmentBytes / 4 - 2;

std::vector<int64_t> Lengths(int k, int64_t big = kBig) {
  std::vector<int64_t> v = {0, 1, k - 1, k, k + 1, big};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

bool IsTransportFailure(absl::StatusCode c) {
  return c == absl::StatusCode::kDeadlineExceeded ||
         c == absl::StatusCode::kUnavailable ||
         c == absl::StatusCode::kInternal || c == absl::StatusCode::kDataLoss;
}

// k non-integer inputs of n floats (rank r scaled by r+1), so that sums
// depend on their order.
std::vector<std::vector<float>> RandomInputs(int k, int64_t n, int seed) {
  std::vector<std::vector<float>> in(k, std::vector<float>(n));
  for (int r = 0; r < k; ++r) {
    std::mt19937 gen(seed + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : in[r]) x = dist(gen) * (r + 1) * 1e3f;
  }
  return in;
}

// The ring's documented order: chunk c summed from rank c around the ring.
std::vector<float> RingOrderSum(const std::vector<std::vector<float>>& in) {
  const int k = static_cast<int>(in.size());
  const int64_t n = static_cast<int64_t>(in[0].size());
  std::vector<float> out(n);
  for (int c = 0; c < k; ++c) {
    const Range cb = ChunkBounds(n, k, c);
    for (int64_t i = cb.begin; i < cb.end; ++i) {
      float acc = in[c][i];
      for (int j = 1; j < k; ++j) acc = acc + in[(c + j) % k][i];
      out[i] = acc;
    }
  }
  return out;
}

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

// ---- Ring all-reduce over the transport ----

// Every K in 1..kMaxWorld and every length in Lengths(k, big) with `alg`:
// closed-form sums and counts, identical bits on every rank.
void ClosedFormForAllWorldSizesAndLengths(const TransportFactory& make,
                                          AllReduceAlgorithm alg,
                                          int64_t big) {
  // Buffers allocated (and first touched) once, reused for every case.
  std::vector<std::vector<float>> bufs(kMaxWorld, std::vector<float>(big));
  for (int k = 1; k <= kMaxWorld; ++k) {
    auto ts = make(k);
    ASSERT_EQ(ts.size(), static_cast<size_t>(k));
    std::vector<std::unique_ptr<RingAllReducer>> reducers;
    for (int r = 0; r < k; ++r) {
      reducers.push_back(std::make_unique<RingAllReducer>(ts[r].get()));
    }
    int64_t step = 0;
    for (int64_t n : Lengths(k, big)) {
      SCOPED_TRACE(absl::StrFormat("K=%d n=%d", k, n));
      std::vector<absl::Status> st(k);
      std::vector<int64_t> counts(k);
      RunRanks(k, [&](int r) {
        absl::Span<float> v(bufs[r].data(), n);
        FillRank(k, r, v, &counts[r]);
        AllReduceOptions o;
        o.job = 11;
        o.step = step;
        o.timeout = kLong;
        o.algorithm = alg;
        st[r] = reducers[r]->AllReduce(v, &counts[r], o);
      });
      ++step;
      for (int r = 0; r < k; ++r) {
        ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
        EXPECT_EQ(counts[r], ExpectedCount(k)) << "rank " << r;
        ASSERT_EQ(CheckClosedForm(k, absl::Span<const float>(bufs[r].data(), n)),
                  "")
            << "rank " << r;
        ASSERT_EQ(std::memcmp(bufs[0].data(), bufs[r].data(), n * sizeof(float)),
                  0)
            << "rank " << r << " differs from rank 0";
      }
    }
  }
}

TEST_P(TransportConformanceTest, RingClosedFormForAllWorldSizesAndLengths) {
  ClosedFormForAllWorldSizesAndLengths(GetParam().make,
                                       AllReduceAlgorithm::kRing, kBig);
}

TEST_P(TransportConformanceTest, DirectClosedFormForAllWorldSizesAndLengths) {
  ClosedFormForAllWorldSizesAndLengths(GetParam().make,
                                       AllReduceAlgorithm::kDirect, kDirectBig);
}

// The direct algorithm sums in rank order 0..K-1 on every rank; kAuto takes
// it while (K-1) x buffer bytes <= direct_max_bytes and the ring above
// (distinguishable by the bits of a non-integer sum).
TEST_P(TransportConformanceTest, DirectBitsAreRankOrderAndAutoSwitchesToRing) {
  constexpr int k = 5;
  constexpr int64_t n = 3001;
  const std::vector<std::vector<float>> in = RandomInputs(k, n, 4321);
  std::vector<float> rank_order(n);
  for (int64_t i = 0; i < n; ++i) {
    float acc = in[0][i];
    for (int j = 1; j < k; ++j) acc = acc + in[j][i];
    rank_order[i] = acc;
  }
  const std::vector<float> ring_order = RingOrderSum(in);
  ASSERT_NE(std::memcmp(rank_order.data(), ring_order.data(), n * 4), 0)
      << "test data does not distinguish the two orders";
  auto ts = GetParam().make(k);
  struct Case {
    AllReduceAlgorithm alg;
    int64_t direct_max_bytes;
    const std::vector<float>* want;
  };
  const Case cases[] = {
      {AllReduceAlgorithm::kDirect, 0, &rank_order},
      {AllReduceAlgorithm::kAuto, (k - 1) * n * 4, &rank_order},
      {AllReduceAlgorithm::kAuto, (k - 1) * n * 4 - 1, &ring_order},
  };
  int64_t step = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrFormat("direct_max_bytes=%d", c.direct_max_bytes));
    std::vector<std::vector<float>> bufs = in;
    std::vector<absl::Status> st(k);
    std::vector<int64_t> counts(k);
    RunRanks(k, [&](int r) {
      counts[r] = r;  // includes a rank with zero examples
      AllReduceOptions o;
      o.job = 14;
      o.step = step;
      o.timeout = kLong;
      o.algorithm = c.alg;
      o.direct_max_bytes = c.direct_max_bytes;
      st[r] = RingAllReduce(*ts[r], absl::MakeSpan(bufs[r]), &counts[r], o);
    });
    ++step;
    for (int r = 0; r < k; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(counts[r], k * (k - 1) / 2);
      EXPECT_EQ(std::memcmp(bufs[r].data(), c.want->data(), n * 4), 0)
          << "rank " << r;
    }
  }
}

TEST_P(TransportConformanceTest, DirectRejectsABufferOverOneMessage) {
  auto ts = GetParam().make(2);
  std::vector<float> v(kDirectBig + 1);
  int64_t count = 1;
  AllReduceOptions o;
  o.algorithm = AllReduceAlgorithm::kDirect;
  o.timeout = kShort;
  absl::Status s = RingAllReduce(*ts[0], absl::MakeSpan(v), &count, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("use the ring"));
}

TEST_P(TransportConformanceTest, RingClosedFormWithSmallSegments) {
  for (int k = 2; k <= 5; ++k) {
    auto ts = GetParam().make(k);
    int64_t step = 0;
    for (int64_t seg_bytes : {4, 12, 40}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{k - 1}, int64_t{k + 1},
                        int64_t{3 * k + 2}, int64_t{101}}) {
        SCOPED_TRACE(absl::StrFormat("K=%d n=%d segment_bytes=%d", k, n,
                                     seg_bytes));
        std::vector<std::vector<float>> bufs(k, std::vector<float>(n));
        std::vector<absl::Status> st(k);
        std::vector<int64_t> counts(k);
        RunRanks(k, [&](int r) {
          FillRank(k, r, absl::MakeSpan(bufs[r]), &counts[r]);
          AllReduceOptions o;
          o.job = 12;
          o.step = step;
          o.timeout = kLong;
          o.segment_bytes = seg_bytes;
          o.algorithm = AllReduceAlgorithm::kRing;
          st[r] = RingAllReduce(*ts[r], absl::MakeSpan(bufs[r]), &counts[r], o);
        });
        ++step;
        for (int r = 0; r < k; ++r) {
          ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
          EXPECT_EQ(counts[r], ExpectedCount(k));
          ASSERT_EQ(CheckClosedForm(k, bufs[r]), "") << "rank " << r;
          ASSERT_EQ(bufs[r], bufs[0]);
        }
      }
    }
  }
}

// Non-integer data: the sum depends on the order, so this pins down the
// documented order (chunk c summed from rank c around the ring) and checks
// every rank holds exactly those bits.
TEST_P(TransportConformanceTest, RingBitsAreIdenticalAndInRingOrder) {
  constexpr int k = 5;
  constexpr int64_t n = 10007;
  const std::vector<std::vector<float>> in = RandomInputs(k, n, 1234);
  const std::vector<float> want = RingOrderSum(in);
  auto ts = GetParam().make(k);
  std::vector<std::vector<float>> bufs = in;
  std::vector<absl::Status> st(k);
  std::vector<int64_t> counts(k, 3);
  RunRanks(k, [&](int r) {
    AllReduceOptions o;
    o.job = 13;
    o.timeout = kLong;
    o.segment_bytes = 1024;
    o.algorithm = AllReduceAlgorithm::kRing;
    st[r] = RingAllReduce(*ts[r], absl::MakeSpan(bufs[r]), &counts[r], o);
  });
  for (int r = 0; r < k; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(counts[r], 3 * k);
    EXPECT_EQ(std::memcmp(bufs[r].data(), want.data(), n * sizeof(float)), 0)
        << "rank " << r;
  }
}

struct RingRun {
  std::vector<absl::Status> status;
  std::vector<absl::Duration> elapsed;
  std::vector<std::vector<float>> bufs;
  std::vector<int64_t> counts;
};

// Runs one ring all-reduce step on `group` (one Transport* per rank) with the
// closed-form data; `len_of(r)` gives each rank's n and `job_of(r)` its job.
RingRun RunRing(const std::vector<Transport*>& group, int64_t step,
                absl::Duration timeout, int64_t segment_bytes,
                const std::function<int64_t(int)>& len_of,
                const std::function<uint64_t(int)>& job_of,
                AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing) {
  const int k = static_cast<int>(group.size());
  RingRun run;
  run.status.resize(k);
  run.elapsed.resize(k);
  run.bufs.resize(k);
  run.counts.resize(k);
  RunRanks(k, [&](int r) {
    run.bufs[r].resize(len_of(r));
    FillRank(k, r, absl::MakeSpan(run.bufs[r]), &run.counts[r]);
    AllReduceOptions o;
    o.job = job_of(r);
    o.step = step;
    o.timeout = timeout;
    o.segment_bytes = segment_bytes;
    o.algorithm = algorithm;
    const absl::Time start = absl::Now();
    run.status[r] = RingAllReduce(*group[r], absl::MakeSpan(run.bufs[r]),
                                  &run.counts[r], o);
    run.elapsed[r] = absl::Now() - start;
  });
  return run;
}

// Wraps rank `faulty`'s endpoint of a fresh group with `rules`.
struct FaultyGroup {
  std::vector<std::unique_ptr<Transport>> base;
  std::unique_ptr<FaultTransport> wrapper;
  std::vector<Transport*> group;
};

FaultyGroup MakeFaultyGroup(const TransportFactory& make, int k, int faulty,
                            std::vector<FaultRule> rules) {
  FaultyGroup g;
  g.base = make(k);
  g.wrapper =
      std::make_unique<FaultTransport>(g.base[faulty].get(), std::move(rules));
  for (int r = 0; r < k; ++r) {
    g.group.push_back(r == faulty ? g.wrapper.get() : g.base[r].get());
  }
  return g;
}

void ExpectAllFailedInTime(const RingRun& run, absl::Duration timeout) {
  for (size_t r = 0; r < run.status.size(); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r, ": ", run.status[r].ToString()));
    EXPECT_FALSE(run.status[r].ok());
    EXPECT_TRUE(IsTransportFailure(run.status[r].code()));
    EXPECT_THAT(std::string(run.status[r].message()), HasSubstr("peer"));
    EXPECT_LE(run.elapsed[r], timeout + kSlack);
  }
}

TEST_P(TransportConformanceTest, RingPeerFailingMidCallNeverHangs) {
  // K=4, n=4000: 1000-float chunks in 4 segments of 1 KiB. Rank 1 fails from
  // its 4th send on (in the middle of its first chunk).
  FaultyGroup g = MakeFaultyGroup(
      GetParam().make, 4, 1,
      {FaultRule::FromNth(FaultDirection::kSend, 3, FaultAction::kFail)});
  RingRun run = RunRing(
      g.group, 0, kShort, 1024, [](int) { return 4000; },
      [](int) { return 1; });
  ExpectAllFailedInTime(run, kShort);
  EXPECT_EQ(run.status[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(run.status[1].message()), HasSubstr("peer 2"));
  EXPECT_EQ(run.status[2].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(run.status[2].message()), HasSubstr("peer 1"));
}

TEST_P(TransportConformanceTest, RingPeerGoingSilentMidCallNeverHangs) {
  FaultyGroup g = MakeFaultyGroup(
      GetParam().make, 4, 2,
      {FaultRule::FromNth(FaultDirection::kSend, 5, FaultAction::kDrop)});
  RingRun run = RunRing(
      g.group, 0, kShort, 1024, [](int) { return 4000; },
      [](int) { return 1; });
  ExpectAllFailedInTime(run, kShort);
  EXPECT_EQ(run.status[3].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(run.status[3].message()), HasSubstr("peer 2"));
}

TEST_P(TransportConformanceTest, RingSingleLostMessageIsDetected) {
  // Rank 0's second send (segment 1 of chunk 0) is lost: rank 1 then sees
  // segment 2 where it expects segment 1.
  FaultyGroup g = MakeFaultyGroup(
      GetParam().make, 4, 0,
      {FaultRule::Nth(FaultDirection::kSend, 1, FaultAction::kDrop)});
  RingRun run = RunRing(
      g.group, 0, kShort, 1024, [](int) { return 4000; },
      [](int) { return 1; });
  ExpectAllFailedInTime(run, kShort);
  EXPECT_EQ(run.status[1].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(run.status[1].message()), HasSubstr("peer 0"));
  EXPECT_THAT(std::string(run.status[1].message()),
              HasSubstr(KeyToString(MakeKey(1, 0, 0, 1))));
  EXPECT_THAT(std::string(run.status[1].message()),
              HasSubstr(KeyToString(MakeKey(1, 0, 0, 2))));
}

TEST_P(TransportConformanceTest, RingMismatchedJobIsReported) {
  auto ts = GetParam().make(3);
  std::vector<Transport*> group = {ts[0].get(), ts[1].get(), ts[2].get()};
  RingRun run = RunRing(
      group, 5, kShort, kDefaultSegmentBytes, [](int) { return 300; },
      [](int r) { return r == 0 ? 2 : 1; });
  ExpectAllFailedInTime(run, kShort);
  // Rank 1 expects job 1 from rank 0 and gets job 2.
  EXPECT_EQ(run.status[1].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(run.status[1].message()), HasSubstr("job=2"));
  EXPECT_THAT(std::string(run.status[1].message()), HasSubstr("job=1"));
}

TEST_P(TransportConformanceTest, RingMismatchedLengthIsReported) {
  auto ts = GetParam().make(3);
  std::vector<Transport*> group = {ts[0].get(), ts[1].get(), ts[2].get()};
  RingRun run = RunRing(
      group, 0, kShort, kDefaultSegmentBytes,
      [](int r) { return r == 0 ? 1001 : 1000; }, [](int) { return 1; });
  ExpectAllFailedInTime(run, kShort);
  bool data_loss = false;
  for (const absl::Status& s : run.status) {
    data_loss |= s.code() == absl::StatusCode::kDataLoss;
  }
  EXPECT_TRUE(data_loss);
}

TEST_P(TransportConformanceTest, RingRecoversOnTheNextStepAfterAnAbort) {
  // Step 1 aborts (rank 1 fails its 3rd send); its leftovers are stale for
  // step 2, which must succeed on the same endpoints.
  FaultyGroup g = MakeFaultyGroup(
      GetParam().make, 3, 1,
      {FaultRule::Nth(FaultDirection::kSend, 2, FaultAction::kFail)});
  RingRun bad = RunRing(
      g.group, 1, kShort, 1024, [](int) { return 3000; },
      [](int) { return 1; });
  ExpectAllFailedInTime(bad, kShort);
  RingRun good = RunRing(
      g.group, 2, kLong, 1024, [](int) { return 3000; },
      [](int) { return 1; });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(good.status[r].ok()) << good.status[r];
    EXPECT_EQ(good.counts[r], ExpectedCount(3));
    EXPECT_EQ(CheckClosedForm(3, good.bufs[r]), "");
  }
}

TEST_P(TransportConformanceTest, DirectPeerFailingMidCallNeverHangs) {
  // K=4: rank 1's second send (to rank 3) fails; rank 3 never hears from it.
  FaultyGroup g = MakeFaultyGroup(
      GetParam().make, 4, 1,
      {FaultRule::FromNth(FaultDirection::kSend, 1, FaultAction::kFail)});
  RingRun run = RunRing(
      g.group, 0, kShort, kDefaultSegmentBytes, [](int) { return 1000; },
      [](int) { return 1; }, AllReduceAlgorithm::kDirect);
  EXPECT_EQ(run.status[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(run.status[3].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(run.status[3].message()), HasSubstr("peer 1"));
  for (int r = 0; r < 4; ++r) EXPECT_LE(run.elapsed[r], kShort + kSlack);
}

TEST_P(TransportConformanceTest, DirectMismatchedLengthIsReported) {
  auto ts = GetParam().make(3);
  std::vector<Transport*> group = {ts[0].get(), ts[1].get(), ts[2].get()};
  RingRun run = RunRing(
      group, 0, kShort, kDefaultSegmentBytes,
      [](int r) { return r == 0 ? 1001 : 1000; }, [](int) { return 1; },
      AllReduceAlgorithm::kDirect);
  ExpectAllFailedInTime(run, kShort);
  EXPECT_EQ(run.status[1].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(run.status[1].message()), HasSubstr("peer 0"));
}

// ---- Parameter-server round through PsClient ----

TEST_P(PsConformanceTest, ClosedFormForAllWorldSizesShardsAndLengths) {
  std::vector<std::vector<float>> bufs(kMaxWorld, std::vector<float>(kBig));
  for (int k = 1; k <= kMaxWorld; ++k) {
    for (int shards = 1; shards <= 3; ++shards) {
      for (int64_t n : Lengths(k)) {
        SCOPED_TRACE(absl::StrFormat("K=%d S=%d n=%d", k, shards, n));
        auto owned = GetParam().make(k, shards, n);
        ASSERT_EQ(owned.size(), static_cast<size_t>(shards));
        std::vector<PsClient*> clients;
        for (auto& c : owned) clients.push_back(c.get());
        std::vector<absl::Status> st(k);
        std::vector<int64_t> counts(k);
        RunRanks(k, [&](int r) {
          absl::Span<float> v(bufs[r].data(), n);
          FillRank(k, r, v, &counts[r]);
          PsAllReduceOptions o;
          o.job = 21;
          o.step = 0;
          o.worker = r;
          o.timeout = kLong;
          st[r] = PsAllReduce(clients, v, &counts[r], o);
        });
        for (int r = 0; r < k; ++r) {
          ASSERT_TRUE(st[r].ok()) << "worker " << r << ": " << st[r];
          EXPECT_EQ(counts[r], ExpectedCount(k));
          ASSERT_EQ(
              CheckClosedForm(k, absl::Span<const float>(bufs[r].data(), n)),
              "")
              << "worker " << r;
          ASSERT_EQ(
              std::memcmp(bufs[0].data(), bufs[r].data(), n * sizeof(float)), 0)
              << "worker " << r << " differs from worker 0";
        }
      }
    }
  }
}

// Non-integer data pushed in different arrival orders gives the same bits:
// the rank-order sum.
TEST_P(PsConformanceTest, ArrivalOrderDoesNotChangeTheBits) {
  constexpr int k = 4;
  constexpr int64_t n = 1001;
  std::vector<std::vector<float>> in(k, std::vector<float>(n));
  for (int r = 0; r < k; ++r) {
    std::mt19937 gen(99 + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : in[r]) x = dist(gen) * (r + 1) * 1e3f;
  }
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    float acc = in[0][i];
    for (int r = 1; r < k; ++r) acc = acc + in[r][i];
    want[i] = acc;
  }
  const std::vector<std::vector<int>> orders = {
      {0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
  for (const std::vector<int>& order : orders) {
    SCOPED_TRACE(absl::StrCat("order ", order[0], order[1], order[2],
                              order[3]));
    auto clients = GetParam().make(k, 2, n);
    const absl::Time deadline = absl::Now() + kLong;
    for (int w : order) {
      for (int s = 0; s < 2; ++s) {
        const Range rg = ShardBounds(n, 2, s);
        ASSERT_TRUE(clients[s]
                        ->Push(1, 0, w,
                               absl::Span<const float>(in[w].data() + rg.begin,
                                                       rg.size()),
                               1, deadline)
                        .ok());
      }
    }
    std::vector<float> got(n);
    for (int s = 0; s < 2; ++s) {
      const Range rg = ShardBounds(n, 2, s);
      int64_t count = 0;
      ASSERT_TRUE(clients[s]
                      ->Pull(1, 0, 0,
                             absl::Span<float>(got.data() + rg.begin,
                                               rg.size()),
                             &count, deadline)
                      .ok());
      EXPECT_EQ(count, k);
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
  }
}

TEST_P(PsConformanceTest, DuplicatePushIsIdempotent) {
  auto clients = GetParam().make(2, 1, 3);
  const absl::Time deadline = absl::Now() + kLong;
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, junk = {7, 7, 7};
  ASSERT_TRUE(clients[0]->Push(5, 0, 0, a, 4, deadline).ok());
  // A retried push of the same (job, step, worker) is acknowledged and
  // ignored, even before the step completes...
  ASSERT_TRUE(clients[0]->Push(5, 0, 0, junk, 4, deadline).ok());
  ASSERT_TRUE(clients[0]->Push(5, 0, 1, b, 6, deadline).ok());
  // ...and after.
  ASSERT_TRUE(clients[0]->Push(5, 0, 1, junk, 6, deadline).ok());
  std::vector<float> out(3);
  int64_t count = 0;
  ASSERT_TRUE(clients[0]->Pull(5, 0, 0, absl::MakeSpan(out), &count, deadline)
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(count, 10);
}

TEST_P(PsConformanceTest, PullWaitsForAllPushes) {
  auto clients = GetParam().make(3, 1, 2);
  const std::vector<float> x = {1, 2};
  ASSERT_TRUE(clients[0]->Push(1, 0, 0, x, 1, absl::Now() + kLong).ok());
  ASSERT_TRUE(clients[0]->Push(1, 0, 2, x, 1, absl::Now() + kLong).ok());
  // Not complete: a pull waits for its whole deadline, then names worker 1.
  std::vector<float> out(2);
  int64_t count = 0;
  const absl::Time short_deadline = absl::Now() + absl::Milliseconds(50);
  absl::Status s =
      clients[0]->Pull(1, 0, 0, absl::MakeSpan(out), &count, short_deadline);
  EXPECT_GE(absl::Now(), short_deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("[1]"));
  // A pull started before the last push completes once it arrives.
  absl::Notification started;
  absl::Status pulled;
  std::thread puller([&] {
    started.Notify();
    pulled = clients[0]->Pull(1, 0, 1, absl::MakeSpan(out), &count,
                              absl::Now() + kLong);
  });
  started.WaitForNotification();
  ASSERT_TRUE(clients[0]->Push(1, 0, 1, x, 1, absl::Now() + kLong).ok());
  puller.join();
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, (std::vector<float>{3, 6}));
  EXPECT_EQ(count, 3);
}

TEST_P(PsConformanceTest, PullDeadlineNamesMissingWorkers) {
  auto clients = GetParam().make(4, 1, 1);
  const std::vector<float> x = {1};
  ASSERT_TRUE(clients[0]->Push(3, 7, 0, x, 1, absl::Now() + kLong).ok());
  ASSERT_TRUE(clients[0]->Push(3, 7, 2, x, 1, absl::Now() + kLong).ok());
  std::vector<float> out(1);
  int64_t count = 0;
  absl::Status s = clients[0]->Pull(3, 7, 0, absl::MakeSpan(out), &count,
                                    absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("workers [1, 3]"));
  // Nobody pushed step 8 yet: all workers are missing. A transport may
  // have dropped the connection whose pull timed out, so this pull may
  // first reconnect (a TLS handshake and a hello): its deadline leaves room
  // for that on a loaded machine (20 ms failed in CI under TLS).
  s = clients[0]->Pull(3, 8, 0, absl::MakeSpan(out), &count,
                       absl::Now() + absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("workers [0, 1, 2, 3]"));
}

TEST_P(PsConformanceTest, ConsecutiveStepsAndGarbageCollection) {
  constexpr int k = 3;
  constexpr int64_t n = 10;
  auto owned = GetParam().make(k, 2, n);
  std::vector<PsClient*> clients = {owned[0].get(), owned[1].get()};
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<std::vector<float>> bufs(k, std::vector<float>(n));
    std::vector<absl::Status> st(k);
    std::vector<int64_t> counts(k);
    RunRanks(k, [&](int r) {
      FillRank(k, r, absl::MakeSpan(bufs[r]), &counts[r]);
      PsAllReduceOptions o;
      o.job = 2;
      o.step = step;
      o.worker = r;
      o.timeout = kLong;
      st[r] = PsAllReduce(clients, absl::MakeSpan(bufs[r]), &counts[r], o);
    });
    for (int r = 0; r < k; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(counts[r], ExpectedCount(k));
      EXPECT_EQ(CheckClosedForm(k, bufs[r]), "");
    }
  }
  // Steps 3 and 4 are retained; step 2 and older are gone.
  std::vector<float> out(ShardBounds(n, 2, 0).size());
  int64_t count = 0;
  absl::Status s = clients[0]->Pull(2, 3, 0, absl::MakeSpan(out), &count,
                                    absl::Now() + kLong);
  EXPECT_TRUE(s.ok()) << s;
  s = clients[0]->Pull(2, 2, 0, absl::MakeSpan(out), &count,
                       absl::Now() + kLong);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  s = clients[0]->Push(2, 1, 0, out, 1, absl::Now() + kLong);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace lockstep
