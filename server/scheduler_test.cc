#include "server/scheduler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

struct Fixture {
  std::vector<WorkerRecord> workers;
  std::vector<WorkerRecord*> idle;
  explicit Fixture(int n, bool data = true) {
    workers.resize(n);
    for (int i = 0; i < n; ++i) {
      workers[i].seq = i + 1;
      workers[i].id = "w-" + std::to_string(i + 1);
      workers[i].address = "10.0.0." + std::to_string(i + 1) + ":7071";
      workers[i].data_address = data ? "10.0.0." + std::to_string(i + 1) + ":7072" : "";
      workers[i].hostname = "h" + std::to_string(i + 1);
    }
    for (WorkerRecord& w : workers) idle.push_back(&w);
  }
};

JobRecord Job(int k, v1::SyncMode mode = v1::RING, v1::PeerTransport t = v1::GRPC) {
  JobRecord job;
  job.id = 3;
  job.k = k;
  job.spec.set_num_workers(k);
  job.spec.set_sync_mode(mode);
  job.spec.set_peer_transport(t);
  return job;
}

TEST(SchedulerTest, PsAddressesPreferTheConfiguredOnes) {
  EXPECT_EQ(PsAddresses({"p:1", "p:2"}, "c:9"), std::vector<std::string>({"p:1", "p:2"}));
  EXPECT_EQ(PsAddresses({}, "c:9"), std::vector<std::string>({"c:9"}));
  EXPECT_TRUE(PsAddresses({}, "").empty());
}

TEST(SchedulerTest, WaitsUntilKWorkersAreIdle) {
  Fixture f(2);
  EXPECT_EQ(PlanStart(Job(3), f.idle, {}).kind, StartPlan::kWait);
  EXPECT_EQ(PlanStart(Job(2), f.idle, {}).kind, StartPlan::kStart);
}

TEST(SchedulerTest, TcpRingNeedsEveryChosenWorkersDataAddress) {
  Fixture f(3);
  f.workers[1].data_address = "";
  f.workers[2].data_address = "";
  StartPlan p = PlanStart(Job(2, v1::RING, v1::TCP), f.idle, {});
  EXPECT_EQ(p.kind, StartPlan::kFail);
  EXPECT_NE(p.fail_reason.find("worker w-2 (10.0.0.2:7071) has none"), std::string::npos)
      << p.fail_reason;
  p = PlanStart(Job(3, v1::RING, v1::TCP), f.idle, {});
  EXPECT_NE(p.fail_reason.find("workers w-2 (10.0.0.2:7071), w-3 (10.0.0.3:7071) have none"),
            std::string::npos)
      << p.fail_reason;
  EXPECT_EQ(PlanStart(Job(1, v1::RING, v1::TCP), f.idle, {}).kind, StartPlan::kStart);
}

TEST(SchedulerTest, ShmRingTakesKWorkersOfOneHostOrFailsNamingTheHosts) {
  Fixture f(5);
  // h1: w-1 ; h2: w-2, w-4 ; h3: w-3, w-5.
  f.workers[0].hostname = "h1";
  f.workers[1].hostname = f.workers[3].hostname = "h2";
  f.workers[2].hostname = f.workers[4].hostname = "h3";
  std::vector<WorkerRecord*> idle = f.idle;
  StartPlan p = PlanStart(Job(2, v1::RING, v1::SHM), idle, {});
  EXPECT_EQ(p.kind, StartPlan::kFail);  // w-1 and w-2 are on two hosts
  EXPECT_EQ(p.fail_reason,
            "spec.peer_transport: SHM needs all 2 ranks on one host; idle workers per host: "
            "h1 1, h2 2, h3 2 (submit with --peer_transport=tcp across hosts)");
  PreferOneHost(2, &idle);  // the first host with 2 idle workers, in id order
  ASSERT_EQ(idle.size(), 5u);
  EXPECT_EQ(idle[0]->id, "w-2");
  EXPECT_EQ(idle[1]->id, "w-4");
  EXPECT_EQ(idle[2]->id, "w-1");  // the others keep their order
  EXPECT_EQ(PlanStart(Job(2, v1::RING, v1::SHM), idle, {}).kind, StartPlan::kStart);
  idle = f.idle;
  PreferOneHost(3, &idle);  // no host has 3: unchanged, and the job fails
  EXPECT_EQ(idle, f.idle);
  EXPECT_EQ(PlanStart(Job(3, v1::RING, v1::SHM), idle, {}).kind, StartPlan::kFail);
  EXPECT_EQ(PlanStart(Job(1, v1::RING, v1::SHM), idle, {}).kind, StartPlan::kStart);
  // ps jobs ignore peer_transport.
  EXPECT_EQ(PlanStart(Job(2, v1::PS, v1::SHM), idle, {"p:1"}).kind, StartPlan::kStart);
}

TEST(SchedulerTest, AnOpenRankGoesToAWorkerTheRingCanReach) {
  Fixture f(4);
  f.workers[0].hostname = f.workers[1].hostname = f.workers[2].hostname = "h";
  f.workers[3].hostname = "other";
  f.workers[2].data_address.clear();
  JobRecord shm = Job(2, v1::RING, v1::SHM);
  BindRanks(&shm, {f.idle[0], f.idle[1]}, {}, absl::UnixEpoch());
  EXPECT_TRUE(CanTakeRank(shm, f.workers[2]));
  EXPECT_FALSE(CanTakeRank(shm, f.workers[3]));  // another host
  shm.ranks[0].worker_id.clear();  // a vacant rank names no host
  shm.ranks[0].hostname.clear();
  EXPECT_TRUE(CanTakeRank(shm, f.workers[2]));
  EXPECT_FALSE(CanTakeRank(shm, f.workers[3]));  // rank 1 is still on "h"
  JobRecord tcp = Job(2, v1::RING, v1::TCP);
  EXPECT_FALSE(CanTakeRank(tcp, f.workers[2]));  // no data address
  EXPECT_TRUE(CanTakeRank(tcp, f.workers[3]));
  EXPECT_TRUE(CanTakeRank(Job(2, v1::RING, v1::GRPC), f.workers[2]));
  EXPECT_TRUE(CanTakeRank(Job(2, v1::PS, v1::SHM), f.workers[3]));
}

TEST(SchedulerTest, PsJobUsesTheFirstSShards) {
  Fixture f(2);
  JobRecord job = Job(2, v1::PS);
  job.spec.set_ps_shards(2);
  StartPlan p = PlanStart(job, f.idle, {"p:1", "p:2", "p:3"});
  ASSERT_EQ(p.kind, StartPlan::kStart);
  EXPECT_EQ(p.ps_addresses, std::vector<std::string>({"p:1", "p:2"}));
  p = PlanStart(job, f.idle, {"p:1"});
  EXPECT_EQ(p.kind, StartPlan::kFail);
  EXPECT_EQ(p.fail_reason,
            "spec.ps_shards: job needs 2 parameter-server shards, 1 addresses are configured");
  EXPECT_EQ(CheckPsShardsAtSubmit(job.spec, {"p:1"}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckPsShardsAtSubmit(job.spec, {"p:1", "p:2"}).ok());
  EXPECT_TRUE(CheckPsShardsAtSubmit(Job(2).spec, {}).ok());
}

TEST(SchedulerTest, BindRanksTakesIdleWorkersInOrder) {
  Fixture f(3);
  f.workers[0].last_seen = absl::FromUnixSeconds(5);
  JobRecord job = Job(2);
  const absl::Time now = absl::FromUnixSeconds(9);
  BindRanks(&job, f.idle, {}, now);
  EXPECT_EQ(job.state, v1::RUNNING);
  EXPECT_EQ(job.started, now);
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.ranks[0].worker_id, "w-1");
  EXPECT_EQ(job.ranks[1].worker_id, "w-2");
  EXPECT_EQ(job.ranks[1].data_address, "10.0.0.2:7072");
  EXPECT_EQ(job.ranks[0].last_heartbeat, absl::FromUnixSeconds(5));
  EXPECT_EQ(f.workers[1].state, v1::BUSY);
  EXPECT_EQ(f.workers[1].job_id, 3u);
  EXPECT_EQ(f.workers[1].rank, 1);
  EXPECT_EQ(f.workers[2].state, v1::IDLE);
}

TEST(SchedulerTest, AResumedJobsCheckpointWriterBecomesRankZero) {
  Fixture f(4);
  PreferAsRankZero("w-3", &f.idle);
  JobRecord job = Job(2);
  BindRanks(&job, f.idle, {}, absl::FromUnixSeconds(1));
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.ranks[0].worker_id, "w-3");
  EXPECT_EQ(job.ranks[1].worker_id, "w-1");
  ASSERT_EQ(f.idle.size(), 4u);
  EXPECT_EQ(f.idle[2]->id, "w-2");
  EXPECT_EQ(f.idle[3]->id, "w-4");
  // Not idle (or unknown): the order stays.
  Fixture g(3);
  PreferAsRankZero("w-9", &g.idle);
  PreferAsRankZero("", &g.idle);
  EXPECT_EQ(g.idle[0]->id, "w-1");
  EXPECT_EQ(g.idle[1]->id, "w-2");
  EXPECT_EQ(g.idle[2]->id, "w-3");
}

TEST(SchedulerTest, NoWaitNamesTheIdleWorkersAndPendingJobs) {
  Fixture f(2);
  EXPECT_TRUE(CheckCanStartNow(2, f.idle, 0).ok());
  absl::Status s = CheckCanStartNow(4, f.idle, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "job needs 4 idle workers, 2 are idle (w-1, w-2)");
  EXPECT_EQ(CheckCanStartNow(1, f.idle, 1).message(),
            "job needs 1 idle worker, 2 are idle (w-1, w-2); 1 earlier job(s) are pending");
  EXPECT_EQ(CheckCanStartNow(1, {}, 0).message(), "job needs 1 idle worker, 0 are idle");
}

}  // namespace
}  // namespace lockstep
