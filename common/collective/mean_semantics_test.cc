// The seed document's worked facts: workers all-reduce gradient SUMS and
// example COUNTS and divide once, which gives the exact full-batch mean (even
// with unequal slices) and identical updates on every replica. Checked for
// both the ring and the parameter-server path.
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "common/collective/inproc_transport.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep {
namespace {

struct Reduced {
  std::vector<std::vector<float>> sums;  // per rank
  std::vector<int64_t> counts;           // per rank
};

// All-reduces per-rank gradient sums and counts over K = sums.size() ranks
// (threads) by the ring (shards == 0) or through `shards` PS shards.
Reduced AllReduce(std::vector<std::vector<float>> sums,
                  std::vector<int64_t> counts, int shards) {
  const int k = static_cast<int>(sums.size());
  const int64_t n = static_cast<int64_t>(sums[0].size());
  std::vector<absl::Status> st(k);
  InProcessHub hub(k);
  std::vector<std::unique_ptr<PsClient>> owned;
  std::vector<PsClient*> clients;
  if (shards > 0) {
    owned = MakeInProcessPsClients(k, shards, n);
    for (auto& c : owned) clients.push_back(c.get());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      if (shards == 0) {
        AllReduceOptions o;
        o.job = 1;
        o.timeout = absl::Seconds(120);
        st[r] = RingAllReduce(*hub.endpoint(r), absl::MakeSpan(sums[r]),
                              &counts[r], o);
      } else {
        PsAllReduceOptions o;
        o.job = 1;
        o.worker = r;
        o.timeout = absl::Seconds(120);
        st[r] = PsAllReduce(clients, absl::MakeSpan(sums[r]), &counts[r], o);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < k; ++r) EXPECT_TRUE(st[r].ok()) << st[r];
  return Reduced{std::move(sums), std::move(counts)};
}

class MeanSemanticsTest : public ::testing::TestWithParam<int> {};

// Four workers with local MEAN gradients 0.42, 0.38, 0.55, 0.29 over 8
// examples each: the all-reduced sums divided once give 0.41, and with
// learning rate 0.1 every replica's weight moves by -0.041, identically.
TEST_P(MeanSemanticsTest, FourEqualSlicesGiveMeanPointFortyOne) {
  const std::vector<float> local_mean = {0.42f, 0.38f, 0.55f, 0.29f};
  std::vector<std::vector<float>> sums;
  for (float m : local_mean) sums.push_back({m * 8, -m * 8, 2 * m * 8});
  EXPECT_NEAR(sums[0][0], 3.36, 1e-6);
  EXPECT_NEAR(sums[1][0], 3.04, 1e-6);
  EXPECT_NEAR(sums[2][0], 4.40, 1e-6);
  EXPECT_NEAR(sums[3][0], 2.32, 1e-6);
  Reduced red = AllReduce(sums, {8, 8, 8, 8}, GetParam());

  const float lr = 0.1f;
  const std::vector<float> w0 = {1.0f, -0.25f, 0.5f};
  std::vector<std::vector<float>> w(4, w0);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(red.counts[r], 32);
    const float mean = red.sums[r][0] / red.counts[r];
    EXPECT_NEAR(mean, 0.41, 1e-6) << "rank " << r;
    EXPECT_NEAR(red.sums[r][1] / red.counts[r], -0.41, 1e-6);
    EXPECT_NEAR(red.sums[r][2] / red.counts[r], 0.82, 1e-6);
    for (size_t i = 0; i < w0.size(); ++i) {
      w[r][i] -= lr * (red.sums[r][i] / red.counts[r]);
    }
    EXPECT_NEAR(w[r][0] - w0[0], -0.041, 1e-6) << "rank " << r;
    EXPECT_NEAR(w[r][1] - w0[1], 0.041, 1e-6);
    EXPECT_NEAR(w[r][2] - w0[2], -0.082, 1e-6);
    // Every replica holds exactly the same bits.
    EXPECT_EQ(std::memcmp(w[r].data(), w[0].data(), w0.size() * sizeof(float)),
              0)
        << "rank " << r;
  }
}

// Unequal slices: the result is the single-machine mean over all examples,
// not the mean of the per-worker means. Includes a worker with 0 examples.
TEST_P(MeanSemanticsTest, UnequalSlicesGiveTheFullBatchMean) {
  const std::vector<std::vector<std::vector<double>>> cases = {
      // per worker: per-example gradient values (counts 1, 3, 4, 8)
      {{0.9},
       {0.1, 0.2, 0.3},
       {0.5, 0.5, 0.6, 0.6},
       {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4}},
      // counts 0, 5, 3, 8
      {{},
       {0.7, 0.1, 0.3, 0.9, 0.2},
       {0.9, 0.95, 1.0},
       {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4}},
  };
  for (const auto& examples : cases) {
    std::vector<std::vector<float>> sums;
    std::vector<int64_t> counts;
    double all = 0, mean_of_means = 0;
    int64_t total = 0;
    int nonempty = 0;
    for (const auto& worker : examples) {
      float s = 0;
      for (double g : worker) s += static_cast<float>(g);
      sums.push_back({s});
      counts.push_back(static_cast<int64_t>(worker.size()));
      all += std::accumulate(worker.begin(), worker.end(), 0.0);
      total += worker.size();
      if (!worker.empty()) {
        mean_of_means += s / worker.size();
        ++nonempty;
      }
    }
    mean_of_means /= nonempty;
    const double full_batch = all / total;
    ASSERT_EQ(total, 16);
    Reduced red = AllReduce(sums, counts, GetParam());
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(red.counts[r], 16);
      const double mean = red.sums[r][0] / red.counts[r];
      EXPECT_NEAR(mean, full_batch, 1e-6) << "rank " << r;
      EXPECT_GT(std::fabs(mean - mean_of_means), 0.05) << "rank " << r;
      EXPECT_EQ(red.sums[r][0], red.sums[0][0]);
    }
  }
}

// 0 = ring all-reduce; 1..3 = parameter server with that many shards.
INSTANTIATE_TEST_SUITE_P(RingAndPs, MeanSemanticsTest,
                         ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0
                                      ? std::string("Ring")
                                      : "Ps" + std::to_string(info.param) +
                                            "Shards";
                         });

}  // namespace
}  // namespace lockstep
