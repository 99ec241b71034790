#include "common/collective/inproc_transport.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep {

INSTANTIATE_TEST_SUITE_P(
    InProcess, TransportConformanceTest,
    ::testing::Values(TransportFactoryParam{"InProcess",
                                            MakeInProcessTransports}),
    TransportParamName);

// The hub's own (non-owning) endpoints must behave the same.
INSTANTIATE_TEST_SUITE_P(
    InProcessHubEndpoints, TransportConformanceTest,
    ::testing::Values(TransportFactoryParam{
        "InProcessHubEndpoints",
        [](int k) {
          // Each wrapper shares ownership of the hub.
          auto hub = std::make_shared<InProcessHub>(k);
          struct Borrowed : Transport {
            Borrowed(std::shared_ptr<InProcessHub> h, int r)
                : hub(std::move(h)), t(hub->endpoint(r)) {}
            int rank() const override { return t->rank(); }
            int world_size() const override { return t->world_size(); }
            absl::Status Send(int to, const MessageKey& key,
                              absl::Span<const uint8_t> data,
                              absl::Time deadline) override {
              return t->Send(to, key, data, deadline);
            }
            absl::Status Recv(int from, const MessageKey& key,
                              absl::Span<uint8_t> out,
                              absl::Time deadline) override {
              return t->Recv(from, key, out, deadline);
            }
            std::shared_ptr<InProcessHub> hub;
            Transport* t;
          };
          std::vector<std::unique_ptr<Transport>> out;
          for (int r = 0; r < k; ++r) {
            out.push_back(std::make_unique<Borrowed>(hub, r));
          }
          return out;
        }}),
    TransportParamName);

INSTANTIATE_TEST_SUITE_P(
    InProcess, PsConformanceTest,
    ::testing::Values(PsClientFactoryParam{"InProcess",
                                           MakeInProcessPsClients}),
    PsParamName);

namespace {

using ::testing::HasSubstr;

TEST(InProcessHubTest, EndpointsHaveTheirRanks) {
  InProcessHub hub(3);
  EXPECT_EQ(hub.world_size(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(hub.endpoint(r)->rank(), r);
    EXPECT_EQ(hub.endpoint(r)->world_size(), 3);
  }
}

TEST(InProcessHubTest, BrokenLinkFailsFastNamingThePeer) {
  InProcessHub hub(2);
  const absl::Time far = absl::Now() + absl::Seconds(120);
  MessageKey key;
  key.job = 1;
  const std::vector<uint8_t> msg = {1, 2, 3};
  ASSERT_TRUE(hub.endpoint(0)->Send(1, key, msg, far).ok());
  hub.BreakLink(0, 1);
  // Already-delivered messages are still received...
  std::vector<uint8_t> got(3);
  ASSERT_TRUE(hub.endpoint(1)->Recv(0, key, absl::MakeSpan(got), far).ok());
  EXPECT_EQ(got, msg);
  // ...then receiving fails at once instead of waiting for the deadline.
  const absl::Time start = absl::Now();
  absl::Status s = hub.endpoint(1)->Recv(0, key, absl::MakeSpan(got), far);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 0"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  s = hub.endpoint(0)->Send(1, key, msg, far);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer 1"));
  // The other direction is unaffected.
  ASSERT_TRUE(hub.endpoint(1)->Send(0, key, msg, far).ok());
  ASSERT_TRUE(hub.endpoint(0)->Recv(1, key, absl::MakeSpan(got), far).ok());
}

TEST(InProcessHubTest, RingWithABrokenLinkFailsWithoutWaitingForItsDeadline) {
  InProcessHub hub(2);
  hub.BreakLink(1, 0);
  std::vector<float> a(100, 1.0f), b(100, 2.0f);
  int64_t ca = 1, cb = 1;
  AllReduceOptions o;
  o.timeout = absl::Seconds(120);
  // Rank 0 cannot receive from rank 1; its call fails immediately. Rank 1
  // then waits for rank 0's forwarded chunk, so give it a short deadline.
  absl::Status s0 = RingAllReduce(*hub.endpoint(0), absl::MakeSpan(a), &ca, o);
  EXPECT_EQ(s0.code(), absl::StatusCode::kUnavailable) << s0;
  o.timeout = absl::Milliseconds(100);
  absl::Status s1 = RingAllReduce(*hub.endpoint(1), absl::MakeSpan(b), &cb, o);
  EXPECT_FALSE(s1.ok());
  EXPECT_THAT(std::string(s1.message()), HasSubstr("peer"));
}

}  // namespace
}  // namespace lockstep
