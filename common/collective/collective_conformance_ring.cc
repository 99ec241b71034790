// The conformance suite, part 2: ring all-reduce and direct exchange over a
// Transport (closed forms for K = 1..8, bit orders, faults that never hang)
// (the suite: collective_conformance.h).
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/collective/chunking.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/collective_conformance_util.h"
#include "common/collective/fault_transport.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep::conformance {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace lockstep::conformance
