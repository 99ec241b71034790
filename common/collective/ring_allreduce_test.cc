#include "common/collective/ring_allreduce.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/collective/chunking.h"
#include "common/collective/fault_transport.h"
#include "common/collective/inproc_transport.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

void RunRanks(int k, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

AllReduceOptions Opts(int64_t step = 0) {
  AllReduceOptions o;
  o.job = 3;
  o.step = step;
  o.timeout = absl::Seconds(120);
  o.algorithm = AllReduceAlgorithm::kRing;  // this file tests the ring
  return o;
}

TEST(RingAllReduceTest, InvalidArgumentsAreRejectedBeforeAnyMessage) {
  InProcessHub hub(2);
  // Counts every send; nothing may be sent for invalid calls.
  int64_t sends = 0;
  FaultTransport counting(
      hub.endpoint(0),
      {FaultRule::Matching(FaultDirection::kSend,
                           [&](const MessageInfo&) {
                             ++sends;
                             return false;
                           },
                           FaultAction::kFail)});
  std::vector<float> v(10);
  int64_t count = 1;
  AllReduceOptions o = Opts();
  EXPECT_EQ(RingAllReduce(counting, absl::MakeSpan(v), nullptr, o).code(),
            absl::StatusCode::kInvalidArgument);
  count = -1;
  absl::Status s = RingAllReduce(counting, absl::MakeSpan(v), &count, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("count is -1"));
  count = 1;
  o.timeout = absl::ZeroDuration();
  EXPECT_EQ(RingAllReduce(counting, absl::MakeSpan(v), &count, o).code(),
            absl::StatusCode::kInvalidArgument);
  o = Opts();
  o.segment_bytes = 3;
  EXPECT_EQ(RingAllReduce(counting, absl::MakeSpan(v), &count, o).code(),
            absl::StatusCode::kInvalidArgument);
  o.segment_bytes = kMaxSegmentBytes + 1;
  s = RingAllReduce(counting, absl::MakeSpan(v), &count, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("segment_bytes"));
  EXPECT_EQ(sends, 0);
  EXPECT_EQ(count, 1);
}

TEST(RingAllReduceTest, ParseAllReduceAlgorithmNamesTheJobSpecValues) {
  EXPECT_EQ(*ParseAllReduceAlgorithm(""), AllReduceAlgorithm::kAuto);
  EXPECT_EQ(*ParseAllReduceAlgorithm("auto"), AllReduceAlgorithm::kAuto);
  EXPECT_EQ(*ParseAllReduceAlgorithm("ring"), AllReduceAlgorithm::kRing);
  EXPECT_EQ(*ParseAllReduceAlgorithm("direct"), AllReduceAlgorithm::kDirect);
  EXPECT_EQ(ParseAllReduceAlgorithm("Ring").status().message(),
            "expected auto, ring or direct, got \"Ring\"");
}

TEST(RingAllReduceTest, SingleRankIsANoOp) {
  InProcessHub hub(1);
  std::vector<float> v = {1.5f, -2.0f};
  int64_t count = 7;
  ASSERT_TRUE(RingAllReduce(*hub.endpoint(0), absl::MakeSpan(v), &count,
                            Opts())
                  .ok());
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(count, 7);
}

// Each rank sends exactly 2(K-1) chunks (all but chunks r+1 and r+2) plus at
// most two 8-byte count messages, in segments no larger than segment_bytes.
TEST(RingAllReduceTest, SendsTwoKMinusOneOverKOfTheBufferInBoundedSegments) {
  constexpr int k = 4;
  constexpr int64_t n = 100003;
  constexpr int64_t seg_bytes = 16 << 10;
  InProcessHub hub(k);
  std::vector<int64_t> bytes(k), messages(k), largest(k);
  std::vector<std::unique_ptr<FaultTransport>> wrapped;
  for (int r = 0; r < k; ++r) {
    wrapped.push_back(std::make_unique<FaultTransport>(
        hub.endpoint(r),
        std::vector<FaultRule>{FaultRule::Matching(
            FaultDirection::kSend,
            [&, r](const MessageInfo& m) {
              bytes[r] += m.bytes;
              ++messages[r];
              largest[r] = std::max<int64_t>(largest[r], m.bytes);
              return false;
            },
            FaultAction::kFail)}));
  }
  std::vector<std::vector<float>> bufs(k, std::vector<float>(n, 1.0f));
  std::vector<absl::Status> st(k);
  std::vector<int64_t> counts(k, 2);
  RunRanks(k, [&](int r) {
    AllReduceOptions o = Opts();
    o.segment_bytes = seg_bytes;
    st[r] = RingAllReduce(*wrapped[r], absl::MakeSpan(bufs[r]), &counts[r], o);
  });
  for (int r = 0; r < k; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(counts[r], 2 * k);
    EXPECT_EQ(bufs[r], std::vector<float>(n, static_cast<float>(k)));
    const int64_t floats = 2 * n - ChunkBounds(n, k, (r + 1) % k).size() -
                           ChunkBounds(n, k, (r + 2) % k).size();
    const int64_t count_msgs = (r != k - 1) + (r != k - 2);
    EXPECT_EQ(bytes[r], floats * 4 + count_msgs * 8) << "rank " << r;
    EXPECT_LE(largest[r], seg_bytes);
    // Every chunk of ~25001 floats is 7 segments of <= 4096 floats.
    EXPECT_EQ(messages[r], 2 * (k - 1) * 7 + count_msgs) << "rank " << r;
  }
  // Bandwidth: about 2(K-1)/K of the buffer per rank.
  EXPECT_NEAR(static_cast<double>(bytes[0]) / (n * 4), 2.0 * (k - 1) / k,
              1e-3);
}

TEST(RingAllReduceTest, CountsAreExactBeyondFloatPrecision) {
  constexpr int k = 3;
  InProcessHub hub(k);
  const int64_t base = (int64_t{1} << 40) + 1;  // not representable as float
  std::vector<std::vector<float>> bufs(k, std::vector<float>(5, 1.0f));
  std::vector<int64_t> counts = {base, base + 1, base + 2};
  std::vector<absl::Status> st(k);
  RunRanks(k, [&](int r) {
    st[r] = RingAllReduce(*hub.endpoint(r), absl::MakeSpan(bufs[r]),
                          &counts[r], Opts());
  });
  for (int r = 0; r < k; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(counts[r], 3 * base + 3);
  }
}

TEST(RingAllReduceTest, CountOverflowIsOutOfRange) {
  InProcessHub hub(2);
  std::vector<float> a(4), b(4);
  int64_t ca = std::numeric_limits<int64_t>::max(), cb = 1;
  absl::Status sa, sb;
  AllReduceOptions o = Opts();
  o.timeout = absl::Milliseconds(300);
  std::thread t([&] {
    sb = RingAllReduce(*hub.endpoint(1), absl::MakeSpan(b), &cb, o);
  });
  sa = RingAllReduce(*hub.endpoint(0), absl::MakeSpan(a), &ca, o);
  t.join();
  // Rank 1 adds rank 0's count to its own and overflows; rank 0 then times
  // out waiting for the result.
  EXPECT_EQ(sb.code(), absl::StatusCode::kOutOfRange) << sb;
  EXPECT_EQ(sa.code(), absl::StatusCode::kDeadlineExceeded) << sa;
  EXPECT_EQ(cb, 1);  // unchanged on error
}

TEST(RingAllReduceTest, DirectCountOverflowIsOutOfRangeOnEveryRank) {
  InProcessHub hub(2);
  std::vector<float> a(4), b(4);
  int64_t ca = std::numeric_limits<int64_t>::max(), cb = 1;
  absl::Status sa, sb;
  AllReduceOptions o = Opts();
  o.algorithm = AllReduceAlgorithm::kDirect;
  std::thread t([&] {
    sb = RingAllReduce(*hub.endpoint(1), absl::MakeSpan(b), &cb, o);
  });
  sa = RingAllReduce(*hub.endpoint(0), absl::MakeSpan(a), &ca, o);
  t.join();
  // Both ranks add the same counts in the same order and both overflow.
  EXPECT_EQ(sa.code(), absl::StatusCode::kOutOfRange) << sa;
  EXPECT_EQ(sb.code(), absl::StatusCode::kOutOfRange) << sb;
  EXPECT_EQ(cb, 1);  // unchanged on error
}

TEST(RingAllReduceTest, NegativeDirectMaxBytesIsRejected) {
  InProcessHub hub(1);
  std::vector<float> a(4);
  int64_t c = 1;
  AllReduceOptions o = Opts();
  o.direct_max_bytes = -1;
  absl::Status s = RingAllReduce(*hub.endpoint(0), absl::MakeSpan(a), &c, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("direct_max_bytes"), absl::string_view::npos) << s;
}

TEST(RingAllReduceTest, ReusedReducerOverManySteps) {
  constexpr int k = 3;
  constexpr int64_t n = 1000;
  InProcessHub hub(k);
  std::vector<RingAllReducer> reducers;
  for (int r = 0; r < k; ++r) reducers.emplace_back(hub.endpoint(r));
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<std::vector<float>> bufs(k, std::vector<float>(n));
    std::vector<int64_t> counts(k);
    std::vector<absl::Status> st(k);
    RunRanks(k, [&](int r) {
      for (int64_t i = 0; i < n; ++i) bufs[r][i] = step * (r + 1) + i % 3;
      counts[r] = step + r;
      AllReduceOptions o = Opts(step);
      o.segment_bytes = 512;
      st[r] = reducers[r].AllReduce(absl::MakeSpan(bufs[r]), &counts[r], o);
    });
    for (int r = 0; r < k; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(counts[r], 3 * step + 3);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bufs[r][i], step * 6 + 3 * (i % 3)) << "i=" << i;
      }
    }
  }
}

TEST(RingAllReduceTest, ErrorsNameRankJobAndStep) {
  InProcessHub hub(2);
  std::vector<float> v(4);
  int64_t count = 1;
  AllReduceOptions o = Opts(42);
  o.timeout = absl::Milliseconds(30);
  absl::Status s = RingAllReduce(*hub.endpoint(1), absl::MakeSpan(v), &count,
                                 o);  // rank 0 never shows up
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("step 42"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1 of 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
}

}  // namespace
}  // namespace lockstep
