// The raw-TCP ps data plane: the collective conformance suite's ps part
// (K = 1..8 workers, S = 1..3 shards, awkward lengths, arrival order,
// idempotent pushes, deadlines naming the missing workers, garbage
// collection) over real sockets on loopback, plus what only a network path
// has: persistent connections, a lost or slow worker, hellos and frames that
// do not fit the job (refused, the server keeps serving), cancellation and
// server shutdown.
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/collective/chunking.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/ps_aggregator.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/psnet/ps_tcp_server.h"
#include "common/psnet/ps_wire.h"
#include "absl/synchronization/mutex.h"
#include "common/net/data_auth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// The data-plane secret of every job in these tests (a real job's comes
// from the coordinator through the worker: common/net/data_auth.h).
const std::string kSecret(dataauth::kSecretBytes, 'p');
PsTcpClientOptions Auth() {
  PsTcpClientOptions o;
  o.secret = kSecret;
  return o;
}
// Job keys the test servers know the secret of.
constexpr uint64_t kRegisteredJobs = 64;

// A registry and its data-plane server on 127.0.0.1:0.
struct LocalServer {
  explicit LocalServer(int max_jobs = 8, int64_t max_floats = PsShardRegistry::kDefaultMaxShardFloats,
                       PsTcpServerOptions options = {})
      : registry(max_jobs, max_floats) {
    auto s = PsTcpServer::Start(&registry, "127.0.0.1", 0, options);
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
    address = absl::StrCat("127.0.0.1:", server->port());
    for (uint64_t job = 0; job < kRegisteredJobs; ++job) {
      EXPECT_TRUE(server->RegisterSecret(job, kSecret).ok());
    }
  }
  PsShardRegistry registry;
  std::unique_ptr<PsTcpServer> server;
  std::string address;
};

// A PsTcpClient that keeps its server alive.
class OwningClient : public PsClient {
 public:
  OwningClient(std::shared_ptr<LocalServer> server, int shard, int k, int64_t len)
      : server_(std::move(server)), client_(server_->address, shard, k, len, Auth()) {}
  absl::Status Push(uint64_t job, int64_t step, int worker, absl::Span<const float> g,
                    int64_t count, absl::Time deadline) override {
    return client_.Push(job, step, worker, g, count, deadline);
  }
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                    int64_t* count, absl::Time deadline) override {
    return client_.Pull(job, step, worker, out, count, deadline);
  }
  absl::Status StartRound(uint64_t job, int64_t step, int worker, absl::Span<const float> g,
                          int64_t count, absl::Time deadline, WireFormat wire) override {
    return client_.StartRound(job, step, worker, g, count, deadline, wire);
  }
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t* count, absl::Time deadline, WireFormat wire) override {
    return client_.FinishRound(job, step, worker, out, count, deadline, wire);
  }

 private:
  std::shared_ptr<LocalServer> server_;  // declared first: destroyed last
  PsTcpClient client_;
};

std::vector<std::unique_ptr<PsClient>> MakeTcpPsClients(int k, int shards, int64_t n) {
  std::vector<std::unique_ptr<PsClient>> out;
  for (int s = 0; s < shards; ++s) {
    const Range rg = ShardBounds(n, shards, s);
    out.push_back(
        std::make_unique<OwningClient>(std::make_shared<LocalServer>(), s, k, rg.size()));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tcp, PsConformanceTest,
                         ::testing::Values(PsClientFactoryParam{"Tcp", MakeTcpPsClients}),
                         PsParamName);

// K workers, each with its own clients (as worker processes have), run
// `steps` rounds of PsAllReduce over S shards; returns each worker's status.
struct Cluster {
  Cluster(int k, int shards, int64_t n) : k(k), n(n) {
    for (int s = 0; s < shards; ++s) servers.push_back(std::make_shared<LocalServer>());
    clients.resize(k);
    for (int w = 0; w < k; ++w) {
      for (int s = 0; s < shards; ++s) {
        clients[w].push_back(std::make_unique<PsTcpClient>(servers[s]->address, s, k,
                                                           ShardBounds(n, shards, s).size(),
                                                           Auth()));
      }
    }
  }
  std::vector<PsClient*> Ptrs(int w) {
    std::vector<PsClient*> p;
    for (auto& c : clients[w]) p.push_back(c.get());
    return p;
  }
  int k;
  int64_t n;
  std::vector<std::shared_ptr<LocalServer>> servers;
  std::vector<std::vector<std::unique_ptr<PsTcpClient>>> clients;
};

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

// Raw bytes on a socket: what a broken or foreign client could send.
class RawConn {
 public:
  explicit RawConn(const std::string& address) {
    auto fd = psnet::Connect(address, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    fd_ = fd.ok() ? *fd : -1;
    // The server's challenge comes first.
    uint8_t c[psnet::kChallengeBytes];
    EXPECT_TRUE(psnet::ReadFully(fd_, c, sizeof(c), absl::Now() + absl::Seconds(5)).ok());
    EXPECT_TRUE(psnet::DecodeChallenge(c, &nonce_).ok());
  }
  ~RawConn() {
    if (fd_ >= 0) close(fd_);
  }
  void Write(const void* p, size_t n) {
    iovec iov[1] = {{const_cast<void*>(p), n}};
    ASSERT_TRUE(psnet::WriteFully(fd_, iov, 1, absl::Now() + absl::Seconds(5)).ok());
  }
  // The hello reply's code and text.
  std::pair<int32_t, std::string> ReadHelloReply() {
    uint8_t r[psnet::kHelloReplyBytes];
    EXPECT_TRUE(psnet::ReadFully(fd_, r, sizeof(r), absl::Now() + absl::Seconds(5)).ok());
    int32_t code = -1;
    int64_t len = 0;
    EXPECT_TRUE(psnet::DecodeHelloReply(r, &code, &len).ok());
    std::string text(static_cast<size_t>(len), '\0');
    if (len > 0) {
      EXPECT_TRUE(
          psnet::ReadFully(fd_, text.data(), text.size(), absl::Now() + absl::Seconds(5)).ok());
    }
    return {code, text};
  }
  // The next frame and its payload as text.
  std::pair<psnet::Frame, std::string> ReadFrame() {
    uint8_t h[psnet::kFrameBytes];
    psnet::Frame f;
    EXPECT_TRUE(psnet::ReadFully(fd_, h, sizeof(h), absl::Now() + absl::Seconds(5)).ok());
    EXPECT_TRUE(psnet::DecodeFrame(h, &f).ok());
    std::string text(static_cast<size_t>(std::min<int64_t>(f.len, 1 << 20)), '\0');
    if (!text.empty()) {
      EXPECT_TRUE(
          psnet::ReadFully(fd_, text.data(), text.size(), absl::Now() + absl::Seconds(5)).ok());
    }
    return {f, text};
  }
  bool ClosedByPeer() {
    uint8_t b;
    bool eof = false;
    absl::Status s = psnet::ReadFully(fd_, &b, 1, absl::Now() + absl::Seconds(5), &eof);
    return !s.ok() && s.code() == absl::StatusCode::kUnavailable;
  }
  void Hello(uint64_t job, int shard, int k, int64_t len,
             const std::string& secret = kSecret, WireFormat wire = WireFormat::kFloat32,
             uint8_t wire_byte_override = 0) {
    psnet::Hello h;
    h.job = job;
    h.shard = shard;
    h.num_workers = k;
    h.shard_len = len;
    h.wire = wire;
    uint8_t b[psnet::kHelloBytes];
    psnet::EncodeHello(h, secret, nonce_, b);
    if (wire_byte_override != 0) b[32] = wire_byte_override;  // the wire field (ps_wire.h)
    Write(b, sizeof(b));
  }
  const dataauth::Nonce& nonce() const { return nonce_; }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  void Frame(const psnet::Frame& f) {
    uint8_t b[psnet::kFrameBytes];
    psnet::EncodeFrame(f, b);
    Write(b, sizeof(b));
  }

 private:
  int fd_ = -1;
  dataauth::Nonce nonce_{};
};

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


// ---- data-plane authentication (issue 11)

// A stranger without the job's secret (or with another job's), a job whose
// secret was never registered, a hello cut short: refused before anything is
// looked up or allocated, named with the peer's address; the job goes on.
TEST(PsTcpAuthTest, ForgedUnregisteredAndTruncatedHellosAreRefused) {
  std::vector<std::string> logged;
  absl::Mutex log_mu;
  PsTcpServerOptions o;
  o.on_reject = [&](const std::string& why) {
    absl::MutexLock l(&log_mu);
    logged.push_back(why);
  };
  auto server = std::make_shared<LocalServer>(8, PsShardRegistry::kDefaultMaxShardFloats, o);
  for (const std::string& secret :
       {std::string(dataauth::kSecretBytes, 'x'), std::string(dataauth::kSecretBytes, 'q')}) {
    RawConn c(server->address);
    c.Hello(5, 0, 2, 3, secret);
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(text, HasSubstr("hello for job 5 shard 0 has a wrong mac"));
    EXPECT_TRUE(c.ClosedByPeer());
  }
  {
    RawConn c(server->address);
    c.Hello(kRegisteredJobs + 5, 0, 2, 3);  // nobody registered this job's secret
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(text, HasSubstr("no data-plane secret for job 69"));
  }
  {
    RawConn c(server->address);
    psnet::Hello h;
    h.job = 5;
    h.num_workers = 2;
    h.shard_len = 3;
    uint8_t b[psnet::kHelloBytes];
    psnet::EncodeHello(h, kSecret, c.nonce(), b);
    c.Write(b, psnet::kHelloFieldBytes);  // no mac
    c.ShutdownWrite();
    EXPECT_TRUE(c.ClosedByPeer());
  }
  EXPECT_EQ(server->registry.num_jobs(), 0);  // nothing allocated for any of them
  EXPECT_EQ(server->server->rejected_connections(), 4);
  {
    absl::MutexLock l(&log_mu);
    ASSERT_EQ(logged.size(), 4u);
    EXPECT_THAT(logged[0], HasSubstr("connection from 127.0.0.1:"));
    EXPECT_THAT(logged[0], HasSubstr("wrong mac"));
    EXPECT_THAT(logged[3], HasSubstr("closed or silent before its 72-byte hello"));
  }
  // The real job's client connects and works.
  PsTcpClient a(server->address, 0, 1, 3, Auth());
  const std::vector<float> g = {1, 2, 3};
  std::vector<float> out(3);
  int64_t count = 0;
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(a.StartRound(5, 0, 0, g, 1, soon, WireFormat::kFloat32).ok());
  ASSERT_TRUE(
      a.FinishRound(5, 0, 0, absl::MakeSpan(out), &count, soon, WireFormat::kFloat32).ok());
  EXPECT_EQ(out, g);
  // A client without the secret is refused, naming why.
  PsTcpClient no_secret(server->address, 0, 1, 3);
  absl::Status s = no_secret.Push(5, 1, 0, g, 1, soon);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

// A hello recorded on one connection (a valid one) does not fit another's
// challenge.
TEST(PsTcpAuthTest, AReplayedHelloIsRefused) {
  auto server = std::make_shared<LocalServer>();
  std::vector<uint8_t> recorded(psnet::kHelloBytes);
  {
    RawConn c(server->address);
    psnet::Hello h;
    h.job = 5;
    h.num_workers = 2;
    h.shard_len = 3;
    psnet::EncodeHello(h, kSecret, c.nonce(), recorded.data());
    c.Write(recorded.data(), recorded.size());
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, 0) << text;
  }
  RawConn replay(server->address);
  replay.Write(recorded.data(), recorded.size());
  auto [code, text] = replay.ReadHelloReply();
  EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(text, HasSubstr("wrong mac"));
}

TEST(PsTcpAuthTest, RegisterSecretKeepsTheFirstAndChecksItsLength) {
  LocalServer server;
  EXPECT_TRUE(server.server->RegisterSecret(5, kSecret).ok());  // the same again: fine
  const absl::Status other =
      server.server->RegisterSecret(5, std::string(dataauth::kSecretBytes, 'o'));
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied) << other;
  EXPECT_EQ(server.server->RegisterSecret(500, "short").code(),
            absl::StatusCode::kInvalidArgument);
}

// Secrets are bounded without dropping a running job's: when full, a new
// job's secret replaces only one idle for secret_idle with no open
// connection (the idlest), else it is refused naming the limit. (Before,
// the oldest registration was forgotten first in, first out: a long job's
// secret went after enough later job starts and its next reconnect was
// refused.)
TEST(PsTcpAuthTest, FullSecretTableEvictsOnlyIdleJobsWithoutConnections) {
  absl::Mutex mu;
  absl::Time now = absl::FromUnixSeconds(1000000);
  PsTcpServerOptions options;
  options.max_secrets = kRegisteredJobs + 2;
  options.secret_idle = absl::Minutes(10);
  options.now = [&] {
    absl::MutexLock l(&mu);
    return now;
  };
  auto advance = [&](absl::Duration d) {
    absl::MutexLock l(&mu);
    now += d;
  };
  // Jobs 0..63 registered at t0 (LocalServer), 100 and 101 a minute later.
  LocalServer server(8, PsShardRegistry::kDefaultMaxShardFloats, options);
  advance(absl::Minutes(1));
  ASSERT_TRUE(server.server->RegisterSecret(100, kSecret).ok());
  ASSERT_TRUE(server.server->RegisterSecret(101, kSecret).ok());
  const absl::Status full = server.server->RegisterSecret(102, kSecret);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr("holds 66 data-plane secrets"));
  EXPECT_THAT(std::string(full.message()), HasSubstr("active within the last 10m"));

  auto hello = [&](RawConn* c, uint64_t job) {
    std::vector<uint8_t> b(psnet::kHelloBytes);
    psnet::Hello h;
    h.job = job;
    h.num_workers = 2;
    h.shard_len = 3;
    psnet::EncodeHello(h, kSecret, c->nonce(), b.data());
    c->Write(b.data(), b.size());
    return c->ReadHelloReply();
  };
  // Job 0 (the long job) connects once at t0+1min and keeps its connection.
  RawConn long_job(server.address);
  ASSERT_EQ(hello(&long_job, 0).first, 0);
  // Twenty minutes later every t0 secret is idle, but job 0 is connected:
  // the idlest other one (job 1: ties go to the lowest id) makes room.
  advance(absl::Minutes(20));
  ASSERT_TRUE(server.server->RegisterSecret(102, kSecret).ok());
  {
    RawConn c(server.address);
    auto [code, text] = hello(&c, 1);
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kPermissionDenied)) << text;
    EXPECT_THAT(text, HasSubstr("no data-plane secret for job 1"));
  }
  {  // the connected job's secret is still there: it may reconnect
    RawConn c(server.address);
    auto [code, text] = hello(&c, 0);
    EXPECT_EQ(code, 0) << text;
  }
  // The 64 idle, unconnected secrets (2..63, 100, 101) make room for 64 new
  // jobs; the 65th is refused: job 0 (connected) and 102 (fresh) stay.
  for (uint64_t job = 200; job < 264; ++job) {
    ASSERT_TRUE(server.server->RegisterSecret(job, kSecret).ok()) << job;
  }
  EXPECT_EQ(server.server->RegisterSecret(264, kSecret).code(),
            absl::StatusCode::kResourceExhausted);
  RawConn again(server.address);
  EXPECT_EQ(hello(&again, 0).first, 0);
}

}  // namespace
}  // namespace lockstep
