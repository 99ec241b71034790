// The raw-TCP ps data plane: the collective conformance suite's ps part
// (K = 1..8 workers, S = 1..3 shards, awkward lengths, arrival order,
// idempotent pushes, deadlines naming the missing workers, garbage
// collection) over real sockets on loopback, plus what only a network path
// has: persistent connections, a lost or slow worker, hellos and frames that
// do not fit the job (refused, the server keeps serving), cancellation and
// server shutdown.
// The helpers are in ps_tcp_test_util.h; the hello authentication cases in
// ps_tcp_auth_test.cc.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/psnet/ps_tcp_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::ps_tcp_test {
namespace {

using ::testing::HasSubstr;

INSTANTIATE_TEST_SUITE_P(Tcp, PsConformanceTest,
                         ::testing::Values(PsClientFactoryParam{"Tcp", MakeTcpPsClients}),
                         PsParamName);

TEST(PsTcpTest, ConnectionsArePersistentAcrossSteps) {
  Cluster c(3, 2, 1001);
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<std::thread> threads;
    std::vector<absl::Status> st(3);
    std::vector<std::vector<float>> bufs(3, std::vector<float>(1001));
    for (int w = 0; w < 3; ++w) {
      threads.emplace_back([&, w] {
        for (int64_t i = 0; i < 1001; ++i) bufs[w][i] = static_cast<float>(w + 1);
        int64_t count = w + 1;
        PsAllReduceOptions o;
        o.job = 7;
        o.step = step;
        o.worker = w;
        o.timeout = absl::Seconds(30);
        st[w] = PsAllReduce(c.Ptrs(w), absl::MakeSpan(bufs[w]), &count, o);
        if (st[w].ok() && count != 6) st[w] = absl::InternalError("count");
      });
    }
    for (auto& t : threads) t.join();
    for (int w = 0; w < 3; ++w) {
      ASSERT_TRUE(st[w].ok()) << st[w];
      for (float x : bufs[w]) ASSERT_EQ(x, 6.0f);
    }
  }
  // One connection per worker and shard, dialed once.
  for (int w = 0; w < 3; ++w) {
    for (auto& cl : c.clients[w]) EXPECT_EQ(cl->dials(), 1);
  }
}

TEST(PsTcpTest, LostWorkerIsNamedWithinTheDeadline) {
  Cluster c(3, 2, 100);
  const absl::Duration timeout = absl::Milliseconds(400);
  std::vector<absl::Status> st(2);
  std::vector<absl::Duration> took(2);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {  // worker 2 never shows up
    threads.emplace_back([&, w] {
      std::vector<float> buf(100, 1.0f);
      int64_t count = 1;
      PsAllReduceOptions o;
      o.job = 1;
      o.step = 0;
      o.worker = w;
      o.timeout = timeout;
      const absl::Time start = absl::Now();
      st[w] = PsAllReduce(c.Ptrs(w), absl::MakeSpan(buf), &count, o);
      took[w] = absl::Now() - start;
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(st[w].code(), absl::StatusCode::kDeadlineExceeded) << st[w];
    EXPECT_THAT(std::string(st[w].message()), HasSubstr("missing pushes from workers [2]"));
    EXPECT_THAT(std::string(st[w].message()), HasSubstr("ps shard 0 (127.0.0.1:"));
    EXPECT_GE(took[w], timeout);
    EXPECT_LT(took[w], timeout + absl::Milliseconds(800)) << "worker " << w;
  }
}

TEST(PsTcpTest, SlowWorkerOnlyDelaysTheRound) {
  Cluster c(2, 1, 64);
  std::vector<absl::Status> st(2);
  std::vector<std::vector<float>> bufs(2, std::vector<float>(64));
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      if (w == 1) absl::SleepFor(absl::Milliseconds(300));  // the slow one
      for (int i = 0; i < 64; ++i) bufs[w][i] = static_cast<float>(i * (w + 1));
      int64_t count = 1;
      PsAllReduceOptions o;
      o.job = 3;
      o.worker = w;
      o.timeout = absl::Seconds(10);
      st[w] = PsAllReduce(c.Ptrs(w), absl::MakeSpan(bufs[w]), &count, o);
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(st[w].ok()) << st[w];
  for (int i = 0; i < 64; ++i) EXPECT_EQ(bufs[0][i], static_cast<float>(3 * i));
  EXPECT_EQ(std::memcmp(bufs[0].data(), bufs[1].data(), 64 * sizeof(float)), 0);
}

TEST(PsTcpTest, MismatchedHelloIsRefusedAndTheServerKeepsServing) {
  auto server = std::make_shared<LocalServer>();
  PsTcpClient a(server->address, 0, 2, 3, Auth());
  const std::vector<float> g = {1, 2, 3};
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(a.Push(1, 0, 0, g, 1, soon).ok());
  PsTcpClient other_k(server->address, 0, 3, 3, Auth());  // same job and shard, K=3
  absl::Status s = other_k.Push(1, 0, 1, g, 1, soon);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_workers is 3, expected 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps shard 0 (" + server->address + ", tcp)"));
  PsTcpClient other_len(server->address, 0, 2, 4, Auth());
  const std::vector<float> g4 = {1, 2, 3, 4};
  s = other_len.Push(1, 0, 1, g4, 1, soon);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard_len is 4, expected 3"));
  EXPECT_EQ(server->server->rejected_connections(), 2);
  // The job goes on.
  ASSERT_TRUE(a.Push(1, 0, 1, g, 1, soon).ok());
  std::vector<float> out(3);
  int64_t count = 0;
  ASSERT_TRUE(a.Pull(1, 0, 0, absl::MakeSpan(out), &count, soon).ok());
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(count, 2);
}

TEST(PsTcpTest, OversizedShardIsRefusedBeforeAllocating) {
  auto server = std::make_shared<LocalServer>(8, /*max_floats=*/1000);
  PsTcpClient huge(server->address, 0, 2, int64_t{1} << 40, Auth());
  std::vector<float> out(1);
  int64_t count = 0;
  absl::Status s =
      huge.Pull(1, 0, 0, absl::MakeSpan(out), &count, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard_len is 1099511627776, expected 0..1000"));
  PsTcpClient many(server->address, 0, 1 << 20, 10, Auth());
  std::vector<float> ten(10);
  s = many.Push(1, 0, 0, ten, 1, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_workers is 1048576, expected 1..65536"));
  EXPECT_EQ(server->registry.num_jobs(), 0);
  PsTcpClient fine(server->address, 0, 1, 10, Auth());
  EXPECT_TRUE(fine.Push(1, 0, 0, ten, 1, absl::Now() + absl::Seconds(5)).ok());
}


TEST(PsTcpTest, BadHellosAndFramesAreAnsweredClosedAndCounted) {
  auto server = std::make_shared<LocalServer>();
  {
    RawConn c(server->address);
    const char junk[psnet::kHelloBytes] = "GET / HTTP/1.1\r\n";
    c.Write(junk, sizeof(junk));
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(text, HasSubstr("magic"));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  struct Case {
    const char* name;
    psnet::Frame frame;
    const char* expect;
  };
  auto push = [](uint64_t job, int worker, int64_t len, int32_t chunk = 0) {
    psnet::Frame f;
    f.kind = static_cast<uint32_t>(psnet::Kind::kRound);
    f.job = job;
    f.worker = worker;
    f.chunk = chunk;
    f.len = len;
    f.count = 1;
    f.wait_us = 1000000;
    return f;
  };
  psnet::Frame bad_kind = push(5, 0, 12);
  bad_kind.kind = 99;
  const std::vector<Case> cases = {
      {"oversized payload", push(5, 0, int64_t{1} << 40), "expected 12 (the shard's length x 4)"},
      {"short payload", push(5, 0, 8), "carries 8 payload bytes, expected 12"},
      {"other job", push(6, 0, 12), "names job 6, but this connection's hello named job 5"},
      {"worker out of range", push(5, 2, 12), "worker 2, expected a worker in [0, 2)"},
      {"chunk", push(5, 0, 12, 3), "names chunk 3"},
      {"kind", bad_kind, "frame kind 99"},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    RawConn c(server->address);
    c.Hello(5, 0, 2, 3);
    EXPECT_EQ(c.ReadHelloReply().first, 0);
    c.Frame(tc.frame);
    auto [f, text] = c.ReadFrame();
    EXPECT_EQ(f.kind, static_cast<uint32_t>(psnet::Kind::kError));
    EXPECT_EQ(f.count, static_cast<int64_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(text, HasSubstr(tc.expect));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  EXPECT_EQ(server->server->rejected_connections(), 1 + static_cast<int64_t>(cases.size()));
  // Nothing was pushed, and the server still serves job 5.
  PsTcpClient a(server->address, 0, 2, 3, Auth());
  const std::vector<float> g = {1, 1, 1};
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(a.Push(5, 0, 0, g, 1, soon).ok());
  ASSERT_TRUE(a.Push(5, 0, 1, g, 1, soon).ok());
  std::vector<float> out(3);
  int64_t count = 0;
  ASSERT_TRUE(a.Pull(5, 0, 1, absl::MakeSpan(out), &count, soon).ok());
  EXPECT_EQ(out, (std::vector<float>{2, 2, 2}));
}

// JobSpec.compression over the data plane: the hello names the wire
// format (an unknown one is refused naming the field), and a frame's
// payload must be the shard's length x 2 for a 16-bit wire.
TEST(PsTcpTest, TheHellosWireFormatFixesThePayloadSize) {
  auto server = std::make_shared<LocalServer>();
  {
    RawConn c(server->address);
    c.Hello(5, 0, 2, 3, kSecret, WireFormat::kFloat32, /*wire_byte_override=*/9);
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(text, HasSubstr("hello: wire format: expected 0 (float32), 1 (bf16) or 2 "
                                "(fp16), got 9"));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  {
    RawConn c(server->address);
    c.Hello(5, 0, 2, 3, kSecret, WireFormat::kBf16);
    EXPECT_EQ(c.ReadHelloReply().first, 0);
    psnet::Frame f;
    f.kind = static_cast<uint32_t>(psnet::Kind::kRound);
    f.job = 5;
    f.len = 12;  // float32-sized
    f.count = 1;
    c.Frame(f);
    auto [answer, text] = c.ReadFrame();
    EXPECT_EQ(answer.kind, static_cast<uint32_t>(psnet::Kind::kError));
    EXPECT_THAT(text, HasSubstr("(K=2, 3 floats, bf16 on the wire)"));
    EXPECT_THAT(text, HasSubstr("carries 12 payload bytes, expected 6 (the shard's length x 2)"));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  EXPECT_EQ(server->server->rejected_connections(), 2);
  // An fp16 round of two workers through the client: each push rounded
  // once, the sum rounded once (2049 is not an fp16: it travels as 2048,
  // ties to even, so the sum is 4096, not 4097).
  PsTcpClient a(server->address, 0, 2, 3, Auth());
  const std::vector<float> x0 = {2048, 0.5f, -1}, x1 = {2049, 0.25f, 3};
  std::vector<float> out0(3), out1(3);
  int64_t c0 = 0, c1 = 0;
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(a.StartRound(6, 0, 0, x0, 1, soon, WireFormat::kFp16).ok());
  ASSERT_TRUE(a.StartRound(6, 0, 1, x1, 2, soon, WireFormat::kFp16).ok());
  ASSERT_TRUE(a.FinishRound(6, 0, 0, absl::MakeSpan(out0), &c0, soon, WireFormat::kFp16).ok());
  ASSERT_TRUE(a.FinishRound(6, 0, 1, absl::MakeSpan(out1), &c1, soon, WireFormat::kFp16).ok());
  EXPECT_EQ(out0, (std::vector<float>{4096, 0.75f, 2}));
  EXPECT_EQ(out1, out0);
  EXPECT_EQ(c0, 3);
  EXPECT_EQ(c1, 3);
}

TEST(PsTcpTest, ConnectionsBeyondTheLimitAreRefusedNamingIt) {
  PsTcpServerOptions o;
  o.max_connections = 1;
  auto server = std::make_shared<LocalServer>(8, PsShardRegistry::kDefaultMaxShardFloats, o);
  PsTcpClient a(server->address, 0, 2, 1, Auth());
  const std::vector<float> g = {1};
  ASSERT_TRUE(a.Push(1, 0, 0, g, 1, absl::Now() + absl::Seconds(5)).ok());  // keeps its connection
  PsTcpClient b(server->address, 0, 2, 1, Auth());
  absl::Status s = b.Push(1, 0, 1, g, 1, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_connections is 1"));
  // The first client's connection still works.
  ASSERT_TRUE(a.Push(1, 0, 1, g, 1, absl::Now() + absl::Seconds(5)).ok());
  std::vector<float> out(1);
  int64_t count = 0;
  ASSERT_TRUE(a.Pull(1, 0, 0, absl::MakeSpan(out), &count, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ(out[0], 2.0f);
}

TEST(PsTcpTest, CancelEndsAWaitingRoundAtOnceAndFreesTheServer) {
  auto server = std::make_shared<LocalServer>();
  PsTcpClient c(server->address, 0, 2, 4, Auth());
  std::vector<float> buf(4, 1.0f);
  ASSERT_TRUE(
      c.StartRound(1, 0, 0, buf, 1, absl::Now() + absl::Seconds(60), WireFormat::kFloat32).ok());
  absl::Status finished;
  absl::Time returned;
  std::thread t([&] {
    int64_t count = 0;
    finished = c.FinishRound(1, 0, 0, absl::MakeSpan(buf), &count,
                             absl::Now() + absl::Seconds(60), WireFormat::kFloat32);
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(100));  // let the round wait at the server
  const absl::Time cancelled = absl::Now();
  c.Cancel();
  t.join();
  EXPECT_EQ(finished.code(), absl::StatusCode::kCancelled) << finished;
  EXPECT_LT(returned - cancelled, absl::Seconds(1));
  // The server's connection thread notices the hang-up within its wait slice.
  const absl::Time limit = absl::Now() + absl::Seconds(5);
  while (server->server->connections() > 0 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server->server->connections(), 0);
  EXPECT_EQ(c.Push(1, 0, 1, buf, 1, absl::Now() + absl::Seconds(1)).code(),
            absl::StatusCode::kCancelled);
}

TEST(PsTcpTest, ServerShutdownEndsAWaitingRound) {
  auto server = std::make_shared<LocalServer>();
  PsTcpClient c(server->address, 0, 2, 4, Auth());
  std::vector<float> buf(4, 1.0f);
  ASSERT_TRUE(
      c.StartRound(1, 0, 0, buf, 1, absl::Now() + absl::Seconds(60), WireFormat::kFloat32).ok());
  const absl::Time start = absl::Now();
  std::thread stopper([&] { server->server->Shutdown(); });
  int64_t count = 0;
  absl::Status s = c.FinishRound(1, 0, 0, absl::MakeSpan(buf), &count,
                                 absl::Now() + absl::Seconds(60), WireFormat::kFloat32);
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps shard 0"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PsTcpTest, UnreachableServerIsNamed) {
  std::string address;
  {
    LocalServer gone;
    address = gone.address;
  }
  PsTcpClient c(address, 1, 1, 1, Auth());
  const std::vector<float> g = {1};
  absl::Status s = c.Push(1, 0, 0, g, 1, absl::Now() + absl::Milliseconds(500));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps shard 1 (" + address + ", tcp)"));
}

}  // namespace
}  // namespace lockstep::ps_tcp_test
