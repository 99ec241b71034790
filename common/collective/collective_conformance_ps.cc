// The conformance suite, part 3: the parameter-server round through PsClient
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
}  // namespace lockstep::conformance
