// ProbeRunner (probe_runner.h): runs a probe once per id off the caller's
// thread, answers only for its job and generation, and ignores a probe
// that asks more than its bounds.
#include "worker/probe_runner.h"

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;

v1::PeerProbe Probe(uint64_t id, std::vector<std::string> addresses, uint64_t job = 7,
                    int64_t generation = 2) {
  v1::PeerProbe p;
  p.set_id(id);
  p.set_job_id(job);
  p.set_generation(generation);
  p.set_timeout_ms(1000);
  for (std::string& a : addresses) p.add_addresses(std::move(a));
  return p;
}

// A fake probe: every address that starts with "up" answers; counts its
// calls and remembers the deadline's distance.
struct FakeProbe {
  int calls = 0;
  absl::Duration timeout;
  absl::Notification* gate = nullptr;  // waited for before answering
  ProbeRunner::ProbeFn Fn() {
    return [this](const std::vector<std::string>& a, absl::Time deadline) {
      ++calls;
      timeout = deadline - absl::Now();
      if (gate != nullptr) gate->WaitForNotification();
      std::vector<bool> ok;
      for (const std::string& s : a) ok.push_back(s.empty() || s.rfind("up", 0) == 0);
      return ok;
    };
  }
};

// The heartbeat a runner fills once `probes` were started and answered.
v1::HeartbeatRequest Answer(FakeProbe& fake, const std::vector<v1::PeerProbe>& probes,
                            uint64_t job = 7, int64_t generation = 2) {
  ProbeRunner runner(fake.Fn());
  for (const v1::PeerProbe& p : probes) runner.Start(p);
  EXPECT_TRUE(runner.AwaitAnswer(absl::Seconds(30)));
  v1::HeartbeatRequest req;
  runner.Fill(job, generation, &req);
  return req;
}

TEST(ProbeRunnerTest, AnswersWithTheRanksThatConnected) {
  FakeProbe fake;
  v1::HeartbeatRequest req = Answer(fake, {Probe(3, {"up:1", "", "down:3", "up:4"})});
  EXPECT_EQ(req.probe_id(), 3u);
  EXPECT_THAT(req.reachable_ranks(), ElementsAre(0, 1, 3));
  EXPECT_EQ(fake.calls, 1);
  EXPECT_GT(fake.timeout, absl::Milliseconds(900));
  EXPECT_LE(fake.timeout, absl::Seconds(1));
}

TEST(ProbeRunnerTest, TheSameProbeRunsOnceAndAnotherJobOrGenerationGetsNoAnswer) {
  FakeProbe fake;
  absl::Notification gate;
  fake.gate = &gate;
  ProbeRunner runner(fake.Fn());
  const v1::PeerProbe p = Probe(1, {"", "up:2"});
  runner.Start(p);
  v1::HeartbeatRequest before;
  runner.Fill(7, 2, &before);
  EXPECT_EQ(before.probe_id(), 0u);  // still probing
  gate.Notify();
  runner.Start(p);  // the same probe again (every heartbeat reply repeats it)
  runner.Start(p);
  ASSERT_TRUE(runner.AwaitAnswer(absl::Seconds(30)));
  v1::HeartbeatRequest req;
  runner.Fill(7, 2, &req);
  EXPECT_EQ(req.probe_id(), 1u);
  EXPECT_EQ(fake.calls, 1);
  v1::HeartbeatRequest other_job, other_generation;
  runner.Fill(8, 2, &other_job);
  runner.Fill(7, 3, &other_generation);
  EXPECT_EQ(other_job.probe_id(), 0u);
  EXPECT_EQ(other_generation.probe_id(), 0u);
  // A new probe of the job replaces the answer.
  runner.Start(Probe(2, {"down:1", ""}));
  ASSERT_TRUE(runner.AwaitAnswer(absl::Seconds(30)));
  v1::HeartbeatRequest next;
  runner.Fill(7, 2, &next);
  EXPECT_EQ(next.probe_id(), 2u);
  EXPECT_THAT(next.reachable_ranks(), ElementsAre(1));
  EXPECT_EQ(fake.calls, 2);
}

TEST(ProbeRunnerTest, AProbeOverItsBoundsIsIgnoredAndTheTimeoutIsClamped) {
  FakeProbe fake;
  {
    ProbeRunner runner(fake.Fn());
    runner.Start(Probe(1, {"", std::string(ProbeRunner::kMaxAddressBytes + 1, 'u')}));
    runner.Start(Probe(2, std::vector<std::string>(ProbeRunner::kMaxAddresses + 1, "up:1")));
    v1::PeerProbe zero = Probe(0, {"", "up:1"});
    runner.Start(zero);  // id 0: no probe
  }
  EXPECT_EQ(fake.calls, 0);
  v1::PeerProbe slow = Probe(4, {"", "up:1"});
  slow.set_timeout_ms(3600 * 1000);
  v1::HeartbeatRequest req = Answer(fake, {slow});
  EXPECT_EQ(req.probe_id(), 4u);
  EXPECT_LE(fake.timeout, ProbeRunner::kMaxTimeout);
  EXPECT_GT(fake.timeout, ProbeRunner::kMaxTimeout - absl::Seconds(1));
}

}  // namespace
}  // namespace lockstep
