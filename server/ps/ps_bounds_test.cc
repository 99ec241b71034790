// Every ps input bounded (issue 11): sizes come from the job's held shape,
// never from a request; a running job is never evicted; shards over gRPC's
// default 4 MiB work with the deliberate limits; a message over the limit
// is refused naming both sizes, and the service keeps serving.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/collective/ps_aggregator.h"
#include "common/grpcutil/grpc_ps_client.h"
#include "common/grpcutil/message_limits.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps/ps_service.h"

namespace lockstep {
namespace {

// Resident memory of this process (VmRSS), bytes.
int64_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

struct Ps {
  explicit Ps(PsShardRegistry* registry, bool limits = true) : service(registry) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    if (limits) SetServerMessageLimits(&b, PsMaxMessageBytes(registry->max_shard_floats()));
    server = b.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
    stub = v1::ParameterServer::NewStub(
        CreateLimitedChannel(address, PsMaxMessageBytes(registry->max_shard_floats())));
  }
  ~Ps() { server->Shutdown(); }
  grpc::Status Pull(uint64_t job, int k, int64_t len, int64_t wait_us, v1::PullReply* reply) {
    v1::PullRequest req;
    req.set_job(job);
    req.set_step(0);
    req.set_worker_rank(0);
    req.set_shard(0);
    req.set_num_workers(k);
    req.set_shard_len(len);
    req.set_wait_micros(wait_us);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return stub->Pull(&ctx, req, reply);
  }
  grpc::Status Push(uint64_t job, int k, int worker, const std::vector<float>& g) {
    v1::PushRequest req;
    req.set_job(job);
    req.set_step(0);
    req.set_worker_rank(worker);
    req.set_shard(0);
    req.set_num_workers(k);
    req.set_shard_len(static_cast<int64_t>(g.size()));
    req.set_count(1);
    req.set_grad_sum(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::PushReply reply;
    return stub->Push(&ctx, req, &reply);
  }
  PsService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
};

// Issue 11: "one Pull naming 2^29 floats made the coordinator touch 2 GiB
// before it timed out". A waiting pull costs no memory now: its reply is
// allocated once the step is complete, at the shard's length.
TEST(PsBoundsTest, AWaitingPullOfAHugeShardTouchesNoMemory) {
  PsShardRegistry registry;
  Ps ps(&registry);
  const int64_t before = RssBytes();
  v1::PullReply reply;
  const int64_t len = int64_t{1} << 26;  // 256 MiB, within the shard limit
  grpc::Status s = ps.Pull(1, 2, len, 300000, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  const int64_t grown = RssBytes() - before;
  EXPECT_LT(grown, int64_t{32} << 20) << "a waiting pull made the server touch " << grown
                                      << " bytes";
}

TEST(PsBoundsTest, AbsurdSizesAreInvalidArgumentNamingTheField) {
  PsShardRegistry registry;
  Ps ps(&registry);
  v1::PullReply reply;
  grpc::Status s = ps.Pull(1, 2, int64_t{1} << 40, 1000, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("shard_len is 1099511627776, expected 0.."),
            std::string::npos)
      << s.error_message();
  s = ps.Pull(1, 1 << 30, 4, 1000, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("num_workers is 1073741824"), std::string::npos)
      << s.error_message();
  // A K x shard_len whose worst case exceeds the server's memory limit.
  PsRegistryLimits small;
  small.max_bytes = 1 << 20;
  PsShardRegistry limited(small);
  Ps ps2(&limited);
  s = ps2.Pull(2, 4, 1 << 20, 1000, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("needs up to 33554432 bytes"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("limit 1048576"), std::string::npos) << s.error_message();
  // The servers keep serving.
  EXPECT_TRUE(ps.Push(3, 1, 0, std::vector<float>(4, 1.0f)).ok());
  EXPECT_TRUE(ps.Pull(3, 1, 4, 1000000, &reply).ok());
  EXPECT_EQ(reply.grad_sum().size(), 16u);
}

// The job's shape is held: a request naming another length or K is
// INVALID_ARGUMENT naming the field, the value and the expected value.
TEST(PsBoundsTest, RequestsMustMatchTheHeldShape) {
  PsShardRegistry registry;
  Ps ps(&registry);
  ASSERT_TRUE(ps.Push(7, 2, 0, std::vector<float>(10, 1.0f)).ok());
  v1::PullReply reply;
  grpc::Status s = ps.Pull(7, 2, 11, 1000, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("shard_len is 11, expected 10"), std::string::npos)
      << s.error_message();
  s = ps.Pull(7, 3, 10, 1000, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("num_workers is 3, expected 2"), std::string::npos)
      << s.error_message();
  // The job itself goes on.
  ASSERT_TRUE(ps.Push(7, 2, 1, std::vector<float>(10, 2.0f)).ok());
  s = ps.Pull(7, 2, 10, 1000000, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  float first;
  std::memcpy(&first, reply.grad_sum().data(), 4);
  EXPECT_EQ(first, 3.0f);
}

// Issue 11: "after several ps jobs a running job's shards can be evicted
// mid-job". Job 1 is half-way through a step while four other jobs arrive
// at a server that holds 4 job keys: job 1 keeps its shard (new keys beyond
// the limit are refused while every held job is active), and its step
// completes with both pushes.
TEST(PsBoundsTest, ARunningJobIsNeverEvicted) {
  PsShardRegistry registry(/*max_jobs=*/4);
  auto s1 = registry.GetShard(1, 0, 2, 3);
  ASSERT_TRUE(s1.ok()) << s1.status();
  ASSERT_TRUE((*s1)->Push(1, 0, 0, std::vector<float>{1, 2, 3}, 1).ok());
  int refused = 0;
  for (uint64_t job = 2; job <= 6; ++job) {
    auto s = registry.GetShard(job, 0, 1, 3);
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
      EXPECT_NE(s.status().message().find("holds 4 job keys (its limit, --max_jobs)"),
                std::string::npos)
          << s.status();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 2);
  auto again = registry.GetShard(1, 0, 2, 3);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Push(1, 0, 1, std::vector<float>{10, 20, 30}, 1).ok());
  std::vector<float> out(3);
  int64_t count = 0;
  absl::Status pulled = (*again)->Pull(1, 0, 0, absl::MakeSpan(out), &count,
                                       absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(count, 2);
}

// Idle keys (a finished job, a job's shape round after step 0) are evicted,
// idlest first; a job with recent traffic stays, even if created first.
TEST(PsBoundsTest, IdleKeysAreEvictedIdlestFirst) {
  absl::Time now = absl::Now();
  PsRegistryLimits limits;
  limits.max_jobs = 3;
  limits.active_window = absl::Minutes(10);
  limits.clock = [&now] { return now; };
  PsShardRegistry registry(limits);
  const uint64_t kShape = uint64_t{1} << 63;
  ASSERT_TRUE(registry.GetShard(1, 0, 2, 8).ok());          // running job
  ASSERT_TRUE(registry.GetShard(kShape | 1, 0, 2, 3).ok());  // its shape round
  ASSERT_TRUE(registry.GetShard(2, 0, 2, 8).ok());          // a job that ends
  now += absl::Minutes(5);
  ASSERT_TRUE(registry.GetShard(2, 0, 2, 8).ok());
  now += absl::Minutes(6);
  ASSERT_TRUE(registry.GetShard(1, 0, 2, 8).ok());  // job 1 keeps training
  now += absl::Minutes(5);
  ASSERT_TRUE(registry.GetShard(1, 0, 2, 8).ok());
  // Job 3 arrives: the shape key rides on job 1 (held), so there is room.
  // Job 4: the shape key (idle 16 min) goes first, which frees no slot,
  // then job 2 (idle 11 min); job 1 (active) stays.
  ASSERT_TRUE(registry.GetShard(3, 0, 2, 8).ok());
  ASSERT_TRUE(registry.GetShard(4, 0, 2, 8).ok());
  EXPECT_EQ(registry.num_jobs(), 3);
  auto five = registry.GetShard(5, 0, 2, 8);
  EXPECT_EQ(five.status().code(), absl::StatusCode::kResourceExhausted) << five.status();
  EXPECT_EQ(registry.held_bytes(), 3 * PsShardWorstCaseBytes(2, 8));
}

// Issue 10: a long ps job's shape-agreement key is evicted idle after step 0
// and asked for again by the final state check after its last step. With
// every slot held by active jobs that request must not be refused (the job
// would fail after its last step): a held group's shape key rides on its
// group. A shape key whose group is not held counts as a key of its own;
// the memory budget still applies to riders.
TEST(PsBoundsTest, AHeldGroupsShapeKeyIsNeverRefusedForTheCount) {
  absl::Time now = absl::Now();
  PsRegistryLimits limits;
  limits.max_jobs = 2;
  limits.max_bytes = 2 * PsShardWorstCaseBytes(2, 100) + 2 * PsShardWorstCaseBytes(2, 3);
  limits.active_window = absl::Minutes(10);
  limits.clock = [&now] { return now; };
  PsShardRegistry registry(limits);
  ASSERT_TRUE(registry.GetShard(1, 0, 2, 100).ok());
  ASSERT_TRUE(registry.GetShard(2, 0, 2, 100).ok());
  // Both groups active: the shape round of group 1 is served all the same.
  now += absl::Minutes(1);
  auto shape1 = registry.GetShard(PsShapeAgreementKey(1), 0, 2, 3);
  ASSERT_TRUE(shape1.ok()) << shape1.status();
  EXPECT_EQ(registry.num_jobs(), 3);
  // A third group, and the shape round of a group not held, are refused
  // (both groups are active); nothing is evicted.
  auto three = registry.GetShard(3, 0, 2, 3);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kResourceExhausted) << three.status();
  EXPECT_NE(three.status().message().find("holds 2 job keys (its limit, --max_jobs)"),
            std::string::npos)
      << three.status();
  auto shape3 = registry.GetShard(PsShapeAgreementKey(3), 0, 2, 3);
  EXPECT_EQ(shape3.status().code(), absl::StatusCode::kResourceExhausted) << shape3.status();
  EXPECT_EQ(registry.num_jobs(), 3);
  // A rider still needs bytes: group 2's shape round of 100 floats does
  // not fit what is left of the budget.
  auto big = registry.GetShard(PsShapeAgreementKey(2), 0, 2, 100);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_NE(big.status().message().find("needs up to"), std::string::npos) << big.status();
  // Group 1's steps still complete beside its shape round.
  auto again = registry.GetShard(1, 0, 2, 100);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), registry.GetShard(1, 0, 2, 100)->get());
}

// A job's shape round comes first (the dataset agreement before step 0),
// its group key after: the group's own shape key does not count against it,
// so a server of max_jobs = 2 takes two jobs, not one and a half.
TEST(PsBoundsTest, AJobsShapeRoundBeforeItsGroupCountsOnce) {
  PsShardRegistry registry(/*max_jobs=*/2);
  for (uint64_t group : {1, 2}) {
    auto shape = registry.GetShard(PsShapeAgreementKey(group), 0, 2, 3);
    ASSERT_TRUE(shape.ok()) << "job " << group << ": " << shape.status();
    auto g = registry.GetShard(group, 0, 2, 8);
    ASSERT_TRUE(g.ok()) << "job " << group << ": " << g.status();
  }
  EXPECT_EQ(registry.num_jobs(), 4);
  auto third = registry.GetShard(PsShapeAgreementKey(3), 0, 2, 3);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_NE(third.status().message().find("holds 2 job keys (its limit, --max_jobs)"),
            std::string::npos)
      << third.status();
}

// The memory budget is given back by idle keys: finished jobs never say
// they are done, so a server whose bytes are all held by idle jobs must
// evict them (idlest first) rather than refuse every new job until a
// restart; while the holders are active a new job is refused naming the
// budget and nothing is evicted.
TEST(PsBoundsTest, IdleKeysGiveBackTheirBytes) {
  absl::Time now = absl::Now();
  PsRegistryLimits limits;
  limits.max_jobs = 64;
  limits.max_bytes = 2 * PsShardWorstCaseBytes(2, 1000);  // room for two jobs
  limits.active_window = absl::Minutes(10);
  limits.clock = [&now] { return now; };
  PsShardRegistry registry(limits);
  ASSERT_TRUE(registry.GetShard(1, 0, 2, 1000).ok());
  now += absl::Minutes(1);
  ASSERT_TRUE(registry.GetShard(2, 0, 2, 1000).ok());
  // Both active: job 3 is refused, nothing changes.
  auto three = registry.GetShard(3, 0, 2, 1000);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kResourceExhausted) << three.status();
  EXPECT_NE(three.status().message().find("all of it for jobs with a request in the last 10m"),
            std::string::npos)
      << three.status();
  EXPECT_EQ(registry.num_jobs(), 2);
  // 11 minutes later both are idle: job 3 takes job 1's bytes (the idlest),
  // job 2 stays.
  now += absl::Minutes(10);
  ASSERT_TRUE(registry.GetShard(3, 0, 2, 1000).ok());
  EXPECT_EQ(registry.num_jobs(), 2);
  EXPECT_EQ(registry.held_bytes(), 2 * PsShardWorstCaseBytes(2, 1000));
  // A job larger than the whole budget is refused without evicting anyone.
  auto huge = registry.GetShard(4, 0, 2, 3000);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_EQ(registry.num_jobs(), 2);
}

// Issue 10: a key nobody uses any more (an older generation's group after a
// regroup, an ended job) is forgotten at once, not left to idle eviction:
// its bytes and its slot are free for the next job even while every other
// held key is active, and the next request of that key starts afresh.
TEST(PsBoundsTest, AForgottenKeyGivesBackItsSlotAndBytesAtOnce) {
  PsRegistryLimits limits;
  limits.max_jobs = 2;
  limits.max_bytes = 2 * PsShardWorstCaseBytes(2, 1000);
  PsShardRegistry registry(limits);
  auto old_generation = registry.GetShard(1, 0, 2, 1000);
  ASSERT_TRUE(old_generation.ok()) << old_generation.status();
  ASSERT_TRUE((*old_generation)->Push(1, 7, 0, std::vector<float>(1000, 1.0f), 1).ok());
  ASSERT_TRUE(registry.GetShard(2, 0, 2, 1000).ok());
  // Both active: a third key is refused.
  EXPECT_EQ(registry.GetShard(3, 0, 2, 1000).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(registry.Forget(1));
  EXPECT_FALSE(registry.Forget(1));  // not held any more
  EXPECT_EQ(registry.num_jobs(), 1);
  EXPECT_EQ(registry.held_bytes(), PsShardWorstCaseBytes(2, 1000));
  EXPECT_TRUE((*old_generation)->RetainedSteps(1).empty());  // its sums are gone
  ASSERT_TRUE(registry.GetShard(3, 0, 2, 1000).ok());
  EXPECT_EQ(registry.num_jobs(), 2);
}

// Pushes count as traffic on the registry's clock, not wall time (review
// finding: a shard stamped its last push with absl::Now, so under a test
// clock set in the past a pushed job never looked idle, and one set in the
// future always did). The fake clock starts in 2001.
TEST(PsBoundsTest, PushesAreStampedWithTheRegistrysClock) {
  absl::Time now = absl::FromUnixSeconds(1000000000);
  PsRegistryLimits limits;
  limits.max_jobs = 1;
  limits.active_window = absl::Minutes(10);
  limits.clock = [&now] { return now; };
  PsShardRegistry registry(limits);
  auto push = [&](uint64_t job) {
    auto shard = registry.GetShard(job, 0, 1, 2);
    ASSERT_TRUE(shard.ok()) << shard.status();
    const std::vector<float> g = {1, 2};
    ASSERT_TRUE((*shard)->Push(job, 0, 0, g, 1).ok());
  };
  push(1);
  // 11 fake minutes without a request: job 1 is idle and gives way.
  now += absl::Minutes(11);
  push(2);
  EXPECT_EQ(registry.num_jobs(), 1);
  // Job 2 pushes again 9 minutes later (through its shard, without a new
  // GetShard, as the TCP data plane does): one minute after that it is
  // still active, so job 3 is refused naming the idlest's age.
  auto two = registry.GetShard(2, 0, 1, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  now += absl::Minutes(9);
  const std::vector<float> g = {3, 4};
  ASSERT_TRUE((*two)->Push(2, 1, 0, g, 1).ok());
  EXPECT_EQ((*two)->last_push(), now);
  now += absl::Minutes(1);
  auto three = registry.GetShard(3, 0, 1, 2);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kResourceExhausted) << three.status();
  EXPECT_NE(three.status().message().find("was last used 1m ago"), std::string::npos)
      << three.status();
  // 10 minutes after its last push it goes.
  now += absl::Minutes(9);
  EXPECT_TRUE(registry.GetShard(3, 0, 1, 2).ok());
}

TEST(PsBoundsTest, WorstCaseBytesDoesNotOverflow) {
  EXPECT_EQ(PsShardWorstCaseBytes(2, 10), 2 * 2 * 10 * 4);
  EXPECT_EQ(PsShardWorstCaseBytes(1 << 16, int64_t{1} << 62), -1);
  EXPECT_EQ(PsShardWorstCaseBytes(-1, 1), -1);
}

// Issue 11: "ps shards over 4 MiB fail today". An 8 MiB shard goes through
// a PsService whose server and client channels carry the deliberate
// limits, and the GrpcPsClient a worker uses.
TEST(PsBoundsTest, ShardsOverFourMiBWork) {
  PsShardRegistry registry;
  Ps ps(&registry);
  const int64_t len = 2 << 20;  // 8 MiB of floats
  std::vector<std::vector<float>> g(2, std::vector<float>(len));
  for (int64_t i = 0; i < len; ++i) {
    g[0][i] = static_cast<float>(i % 1000);
    g[1][i] = 1.0f;
  }
  std::vector<absl::Status> st(2);
  std::vector<std::vector<float>> out(2, std::vector<float>(len));
  std::vector<std::thread> t;
  for (int w = 0; w < 2; ++w) {
    t.emplace_back([&, w] {
      GrpcPsClient c(CreateLimitedChannel(ps.address, PsMaxMessageBytes(len)), ps.address, 0,
                     2, len);
      const absl::Time d = absl::Now() + absl::Seconds(60);
      st[w] = c.Push(9, 0, w, g[w], 1, d);
      int64_t count = 0;
      if (st[w].ok()) st[w] = c.Pull(9, 0, w, absl::MakeSpan(out[w]), &count, d);
    });
  }
  for (auto& th : t) th.join();
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(st[w].ok()) << st[w];
    EXPECT_EQ(out[w][999], 1000.0f);
    EXPECT_EQ(out[w][len - 1], static_cast<float>((len - 1) % 1000) + 1.0f);
  }
}

// A message over the server's limit fails that RPC with RESOURCE_EXHAUSTED
// naming both sizes; the service keeps serving.
TEST(PsBoundsTest, AMessageOverTheLimitIsRefusedNamingTheSizes) {
  PsShardRegistry registry(8, /*max_shard_floats=*/1 << 20);  // limit 4 MiB + 64 KiB
  Ps ps(&registry);
  ASSERT_EQ(PsMaxMessageBytes(1 << 20), kControlMaxMessageBytes);  // clamped up to 16 MiB
  grpc::Status s = ps.Push(1, 1, 0, std::vector<float>(5 << 20));  // 20 MiB
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("larger than max"), std::string::npos) << s.error_message();
  // Within the message limit but over the shard limit: refused naming it.
  s = ps.Push(1, 1, 0, std::vector<float>(2 << 20));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("shard_len is 2097152, expected 0..1048576"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(ps.Push(2, 1, 0, std::vector<float>(4, 1.0f)).ok());
}

}  // namespace
}  // namespace lockstep
