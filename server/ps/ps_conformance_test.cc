// The collective conformance suite's parameter-server part, run over real
// gRPC on loopback: PsService servers on OS-chosen ports, GrpcPsClient
// clients.
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/collective/chunking.h"
#include "common/collective/collective_conformance.h"
#include "gtest/gtest.h"
#include "absl/time/clock.h"
#include "common/grpcutil/grpc_ps_client.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/psnet/ps_tcp_server.h"
#include "server/ps/dual_ps_test_util.h"
#include "server/ps/ps_service.h"

namespace lockstep {
namespace {

// One PsService on 127.0.0.1:0 with its server; shared by the clients.
struct LocalPs {
  explicit LocalPs(int max_jobs = 8) : service(max_jobs) {}
  PsService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::shared_ptr<LocalPs> StartPs(int max_jobs = 8) {
  auto ps = std::make_shared<LocalPs>(max_jobs);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&ps->service);
  ps->server = b.BuildAndStart();
  ps->address = "127.0.0.1:" + std::to_string(port);
  return ps;
}

// A GrpcPsClient that keeps its server alive.
std::unique_ptr<PsClient> OwningClient(std::shared_ptr<LocalPs> ps, int shard, int k,
                                       int64_t len) {
  auto client = std::make_unique<GrpcPsClient>(
      grpc::CreateChannel(ps->address, grpc::InsecureChannelCredentials()), ps->address, shard,
      k, len);
  return std::make_unique<OwningPsClient>(std::move(ps), std::move(client));
}

std::vector<std::unique_ptr<PsClient>> MakeGrpcPsClients(int k, int shards, int64_t n) {
  std::vector<std::unique_ptr<PsClient>> out;
  for (int s = 0; s < shards; ++s) {
    auto [b, e] = ShardBounds(n, shards, s);
    out.push_back(OwningClient(StartPs(), s, k, e - b));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grpc, PsConformanceTest,
                         ::testing::Values(PsClientFactoryParam{"Grpc", MakeGrpcPsClients}),
                         PsParamName);

TEST(PsServiceTest, DimensionMismatchAndBadLengthAreNamedErrors) {
  auto ps = StartPs();
  auto channel = grpc::CreateChannel(ps->address, grpc::InsecureChannelCredentials());
  GrpcPsClient a(channel, ps->address, 0, 2, 3);
  std::vector<float> g = {1, 2, 3};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(a.Push(1, 0, 0, g, 1, deadline).ok());
  GrpcPsClient b(channel, ps->address, 0, 3, 3);  // same job/shard, other K
  absl::Status s = b.Push(1, 0, 1, g, 1, deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("ps shard 0 (" + ps->address + ")"), std::string::npos) << s;
  EXPECT_NE(s.message().find("num_workers is 3, expected 2"), std::string::npos) << s;
  // A pull that can never complete ends at its deadline naming the missing worker.
  std::vector<float> out(3);
  int64_t count = 0;
  s = a.Pull(1, 0, 0, absl::MakeSpan(out), &count, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

// Polls `done` until it holds or `limit` passes (the server-side handler
// gives no other signal); returns whether it held.
bool Eventually(const std::function<bool()>& done, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// A job cancelled while its workers wait in a pull: the client returns at
// once (GrpcPsClient::Cancel) and the server's handler stops waiting within
// PsService::kCancelCheckEvery instead of holding a thread until the pull's
// deadline.
TEST(PsServiceTest, CancelledPullFreesTheServerLongBeforeItsDeadline) {
  auto ps = StartPs();
  GrpcPsClient c(grpc::CreateChannel(ps->address, grpc::InsecureChannelCredentials()),
                 ps->address, 0, 2, 3);
  std::vector<float> out(3);
  int64_t count = 0;
  absl::Status pulled;
  absl::Time returned;
  std::thread t([&] {
    pulled = c.Pull(1, 0, 0, absl::MakeSpan(out), &count, absl::Now() + absl::Seconds(60));
    returned = absl::Now();
  });
  ASSERT_TRUE(Eventually([&] { return ps->service.waiting_pulls() == 1; }, absl::Seconds(10)));
  const absl::Time cancelled = absl::Now();
  c.Cancel();
  t.join();
  EXPECT_EQ(pulled.code(), absl::StatusCode::kCancelled) << pulled;
  EXPECT_LT(returned - cancelled, absl::Seconds(1));
  EXPECT_TRUE(Eventually([&] { return ps->service.waiting_pulls() == 0; }, absl::Seconds(2)))
      << "the server still waits in the cancelled pull";
}

TEST(PsServiceTest, UnreachableServerIsNamed) {
  // A port nobody listens on: bind, note the port, stop.
  auto ps = StartPs();
  std::string address = ps->address;
  ps->server->Shutdown();
  ps.reset();
  GrpcPsClient c(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), address, 1,
                 1, 1);
  std::vector<float> g = {1};
  absl::Status s = c.Push(1, 0, 0, g, 1, absl::Now() + absl::Milliseconds(300));
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kDeadlineExceeded)
      << s;
  EXPECT_NE(s.message().find("ps shard 1 (" + address + ")"), std::string::npos) << s;
}

// Beyond max_jobs, the key created longest ago goes, not the lowest: a
// restarted coordinator's group keys may sort below the old ones.
TEST(PsServiceEvictionTest, NeverDropsAJobWithRecentTraffic) {
  std::shared_ptr<LocalPs> local = StartPs(/*max_jobs=*/2);
  std::unique_ptr<PsClient> c = OwningClient(local, 0, 2, 1);
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  const float one[1] = {1.0f}, two[1] = {2.0f};
  ASSERT_TRUE(c->Push(9, 0, 0, one, 1, soon).ok());  // created first
  ASSERT_TRUE(c->Push(3, 0, 0, one, 1, soon).ok());  // lowest key
  // A third job while both are mid-step: refused, naming the limit (the
  // old policy dropped job 9's shard and its first push).
  absl::Status third = c->Push(20, 0, 0, one, 1, soon);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_NE(third.message().find("holds 2 job keys (its limit, --max_jobs)"), std::string::npos)
      << third;
  for (uint64_t job : {3, 9}) {
    ASSERT_TRUE(c->Push(job, 0, 1, two, 1, soon).ok());
    float out[1] = {0};
    int64_t count = 0;
    absl::Status pulled = c->Pull(job, 0, 0, out, &count, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(pulled.ok()) << "job " << job << ": " << pulled;
    EXPECT_EQ(out[0], 3.0f);
    EXPECT_EQ(count, 2);
  }
  local->server->Shutdown();
}

// DualPs (server/ps/dual_ps_test_util.h): one registry behind a gRPC
// PsService and a raw-TCP data plane.

TEST(PsDataPlaneTest, DataAddressNamesTheTcpPortAtTheDialedHost) {
  DualPs ps;
  GrpcPsClient c(grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials()), ps.address,
                 0, 1, 1);
  absl::StatusOr<std::string> data = c.DataAddress(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "127.0.0.1:" + std::to_string(ps.data_plane->port()));
  // A server without a data plane says so, naming the shard and the way out.
  ps.service.SetDataAddress(0);
  data = c.DataAddress(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition) << data.status();
  EXPECT_NE(data.status().message().find("ps shard 0 (" + ps.address + ")"), std::string::npos);
  EXPECT_NE(data.status().message().find("--ps_transport=grpc"), std::string::npos);
}

// DataAddress registers a job's data-plane secret with the TCP plane: the
// first fixes it, another for the same job is PERMISSION_DENIED, a TCP
// client with it works and one with another secret is refused.
TEST(PsDataPlaneTest, DataAddressRegistersTheJobsSecret) {
  DualPs ps;
  GrpcPsClient c(grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials()), ps.address,
                 0, 1, 2);
  const std::string secret(dataauth::kSecretBytes, 'k');
  absl::StatusOr<std::string> data = c.DataAddress(absl::Now() + absl::Seconds(10), 9, secret);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE(c.DataAddress(absl::Now() + absl::Seconds(10), 9, secret).ok());  // idempotent
  absl::StatusOr<std::string> other = c.DataAddress(
      absl::Now() + absl::Seconds(10), 9, std::string(dataauth::kSecretBytes, 'z'));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied) << other.status();
  const std::vector<float> g = {1, 2};
  std::vector<float> out(2);
  int64_t count = 0;
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  PsTcpClientOptions good;
  good.secret = secret;
  PsTcpClient tcp(*data, 0, 1, 2, good);
  ASSERT_TRUE(tcp.StartRound(9, 0, 0, g, 1, soon, WireFormat::kFloat32).ok());
  ASSERT_TRUE(
      tcp.FinishRound(9, 0, 0, absl::MakeSpan(out), &count, soon, WireFormat::kFloat32).ok());
  EXPECT_EQ(out, g);
  PsTcpClientOptions bad;
  bad.secret = std::string(dataauth::kSecretBytes, 'z');
  PsTcpClient stranger(*data, 0, 1, 2, bad);
  EXPECT_EQ(stranger.Push(9, 1, 0, g, 1, soon).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ps.data_plane->rejected_connections(), 1);
}

// The same rounds over gRPC and over the raw-TCP data plane give the same
// bits (the server sums in rank order either way), and one job may even mix
// them (one registry): K = 3 workers, S = 2 shards, non-integer data.
TEST(PsDataPlaneTest, TcpAndGrpcGiveTheSameBits) {
  constexpr int k = 3, shards = 2;
  constexpr int64_t n = 10007;
  std::vector<DualPs> servers(shards);
  std::vector<std::vector<float>> in(k, std::vector<float>(n));
  for (int r = 0; r < k; ++r) {
    std::mt19937 gen(7 + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : in[r]) x = dist(gen) * (r + 1) * 1e3f;
  }
  // transport[w]: 0 gRPC, 1 TCP.
  auto run = [&](uint64_t job, const std::vector<int>& transport,
                 WireFormat wire = WireFormat::kFloat32) {
    std::vector<std::vector<float>> bufs = in;
    std::vector<absl::Status> st(k);
    std::vector<std::thread> threads;
    for (int w = 0; w < k; ++w) {
      threads.emplace_back([&, w] {
        std::vector<std::unique_ptr<PsClient>> owned;
        std::vector<PsClient*> clients;
        for (int s = 0; s < shards; ++s) {
          const Range rg = ShardBounds(n, shards, s);
          auto g = std::make_unique<GrpcPsClient>(
              grpc::CreateChannel(servers[s].address, grpc::InsecureChannelCredentials()),
              servers[s].address, s, k, rg.size());
          if (transport[w] == 1) {
            // Registers the job's data-plane secret, as a worker does.
            const std::string secret(dataauth::kSecretBytes, static_cast<char>('a' + job));
            auto data = g->DataAddress(absl::Now() + absl::Seconds(10), job, secret);
            if (!data.ok()) {
              st[w] = data.status();
              return;
            }
            PsTcpClientOptions to;
            to.secret = secret;
            owned.push_back(std::make_unique<PsTcpClient>(*data, s, k, rg.size(), to));
          } else {
            owned.push_back(std::move(g));
          }
          clients.push_back(owned.back().get());
        }
        int64_t count = w + 1;
        PsAllReduceOptions o;
        o.job = job;
        o.worker = w;
        o.timeout = absl::Seconds(60);
        o.wire = wire;
        st[w] = PsAllReduce(clients, absl::MakeSpan(bufs[w]), &count, o);
        if (st[w].ok() && count != 6) st[w] = absl::InternalError("wrong count");
      });
    }
    for (auto& t : threads) t.join();
    for (int w = 0; w < k; ++w) EXPECT_TRUE(st[w].ok()) << "worker " << w << ": " << st[w];
    for (int w = 1; w < k; ++w) {
      EXPECT_EQ(std::memcmp(bufs[0].data(), bufs[w].data(), n * sizeof(float)), 0)
          << "worker " << w << " differs from worker 0";
    }
    return bufs[0];
  };
  const std::vector<float> grpc_bits = run(1, {0, 0, 0});
  const std::vector<float> tcp_bits = run(2, {1, 1, 1});
  const std::vector<float> mixed_bits = run(3, {1, 0, 1});
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = (in[0][i] + in[1][i]) + in[2][i];
  EXPECT_EQ(std::memcmp(grpc_bits.data(), want.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(tcp_bits.data(), want.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(mixed_bits.data(), want.data(), n * sizeof(float)), 0);
  // Both front ends count into the one registry's stats (the metrics).
  const PsService::Stats s = servers[0].service.stats();
  EXPECT_EQ(s.pushes, 3 * k);
  EXPECT_EQ(s.pulls, 3 * k);

  // JobSpec.compression: 16-bit values both ways. Every worker rounds its
  // push once, the server sums the decoded values in float32 in rank order
  // and rounds the sum once: the same bits over gRPC, TCP, both mixed, and
  // the in-process clients (PsClient's default), and half the bytes.
  uint64_t job = 4;
  for (WireFormat wire : {WireFormat::kBf16, WireFormat::kFp16}) {
    SCOPED_TRACE(WireFormatName(wire));
    std::vector<std::vector<float>> rounded = in;
    for (auto& v : rounded) RoundTrip16(wire, v.data(), n);
    std::vector<float> want16(n);
    for (int64_t i = 0; i < n; ++i) want16[i] = (rounded[0][i] + rounded[1][i]) + rounded[2][i];
    RoundTrip16(wire, want16.data(), n);
    // The rounding shows: float32's sum is not what a 16-bit wire gives.
    EXPECT_NE(std::memcmp(want16.data(), want.data(), n * sizeof(float)), 0);
    const PsService::Stats before = servers[0].service.stats();
    const std::vector<float> grpc16 = run(job++, {0, 0, 0}, wire);
    const PsService::Stats after = servers[0].service.stats();
    const int64_t len0 = ShardBounds(n, shards, 0).size();
    EXPECT_EQ(after.pushed_bytes - before.pushed_bytes, k * (len0 * 2 + 8));
    EXPECT_EQ(after.pulled_bytes - before.pulled_bytes, k * (len0 * 2 + 8));
    const std::vector<float> tcp16 = run(job++, {1, 1, 1}, wire);
    const std::vector<float> mixed16 = run(job++, {0, 1, 0}, wire);
    EXPECT_EQ(std::memcmp(grpc16.data(), want16.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(tcp16.data(), want16.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(mixed16.data(), want16.data(), n * sizeof(float)), 0);
    // In process (no wire): PsClient's default rounds the same way.
    std::vector<std::unique_ptr<PsClient>> local = MakeInProcessPsClients(k, shards, n);
    std::vector<PsClient*> ptrs;
    for (auto& c : local) ptrs.push_back(c.get());
    std::vector<std::vector<float>> bufs = in;
    std::vector<std::thread> threads;
    std::vector<absl::Status> st(k);
    for (int w = 0; w < k; ++w) {
      threads.emplace_back([&, w] {
        int64_t count = 1;
        PsAllReduceOptions o;
        o.job = 1;
        o.worker = w;
        o.wire = wire;
        st[w] = PsAllReduce(ptrs, absl::MakeSpan(bufs[w]), &count, o);
      });
    }
    for (auto& t : threads) t.join();
    for (int w = 0; w < k; ++w) {
      ASSERT_TRUE(st[w].ok()) << st[w];
      EXPECT_EQ(std::memcmp(bufs[w].data(), want16.data(), n * sizeof(float)), 0)
          << "in-process worker " << w;
    }
  }
}

// A 16-bit round's sizes are checked against the wire format: a gRPC push
// whose bytes fit float32 but claim bf16 (or the reverse), or a
// wire_format the server does not know, is INVALID_ARGUMENT naming the
// field, and the server keeps serving.
TEST(PsServiceTest, WireFormatIsChecked) {
  auto ps = StartPs();
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(ps->address, grpc::InsecureChannelCredentials()));
  auto push = [&](int32_t wire, size_t bytes) {
    v1::PushRequest req;
    req.set_job(1);
    req.set_num_workers(1);
    req.set_shard_len(4);
    req.set_count(1);
    req.set_wire_format(wire);
    req.set_grad_sum(std::string(bytes, '\0'));
    v1::PushReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return stub->Push(&ctx, req, &reply);
  };
  grpc::Status s = push(1, 16);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("grad_sum has 16 bytes, expected shard_len 4 x 2 "
                                   "(wire_format bf16)"),
            std::string::npos)
      << s.error_message();
  s = push(0, 8);
  EXPECT_NE(s.error_message().find("expected shard_len 4 x 4 (wire_format none)"),
            std::string::npos)
      << s.error_message();
  s = push(7, 8);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("wire_format: expected 0 (float32), 1 (bf16) or 2 (fp16), "
                                   "got 7"),
            std::string::npos)
      << s.error_message();
  v1::PullRequest pull;
  pull.set_job(1);
  pull.set_num_workers(1);
  pull.set_shard_len(4);
  pull.set_wire_format(-1);
  v1::PullReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  s = stub->Pull(&ctx, pull, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("ps pull: job 1 step 0 worker 0: wire_format: expected"),
            std::string::npos)
      << s.error_message();
  // Still serving: a bf16 round of one worker.
  GrpcPsClient c(grpc::CreateChannel(ps->address, grpc::InsecureChannelCredentials()),
                 ps->address, 0, 1, 4);
  const std::vector<float> g = {1.0f, 1.00390625f, 3.0f, -0.5f};  // 1 + 2^-8 is not a bf16
  std::vector<float> out(4);
  int64_t count = 0;
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(c.StartRound(2, 0, 0, g, 1, soon, WireFormat::kBf16).ok());
  ASSERT_TRUE(c.FinishRound(2, 0, 0, absl::MakeSpan(out), &count, soon, WireFormat::kBf16).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 1.0f, 3.0f, -0.5f}));  // ties to even
  EXPECT_EQ(count, 1);
}

}  // namespace
}  // namespace lockstep
