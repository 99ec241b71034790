// The raw-TCP ps data plane's hello authentication (issue 11): forged,
// unregistered, truncated and replayed hellos are refused before anything is
// looked up or allocated; the secret table keeps the first secret and evicts
// only idle jobs. Helpers: ps_tcp_test_util.h.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "common/psnet/ps_tcp_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::ps_tcp_test {
namespace {

using ::testing::HasSubstr;

// Job 5's hello fields: shard 0 of K workers, 3 floats.
psnet::Hello Job5(int k) {
  psnet::Hello h;
  h.job = 5;
  h.num_workers = k;
  h.shard_len = 3;
  return h;
}

// One K=1 round of job 5 (shard 0, 3 floats) on `a`: its sum is its push.
void OneRoundOfJob5(PsTcpClient& a) {
  const std::vector<float> g = {1, 2, 3};
  std::vector<float> out(3);
  int64_t count = 0;
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(a.StartRound(5, 0, 0, g, 1, soon, WireFormat::kFloat32).ok());
  ASSERT_TRUE(
      a.FinishRound(5, 0, 0, absl::MakeSpan(out), &count, soon, WireFormat::kFloat32).ok());
  EXPECT_EQ(out, g);
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
    uint8_t b[psnet::kHelloBytes];
    psnet::EncodeHello(Job5(2), kSecret, c.nonce(), dataauth::RandomNonce(), b);
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
    EXPECT_THAT(logged[3], HasSubstr("closed or silent before its 104-byte hello"));
  }
  // The real job's client connects and works.
  PsTcpClient a(server->address, 0, 1, 3, Auth());
  OneRoundOfJob5(a);
  const std::vector<float> g = {1, 2, 3};
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  // A client without the secret is refused, naming why.
  PsTcpClient no_secret(server->address, 0, 1, 3);
  absl::Status s = no_secret.Push(5, 1, 0, g, 1, soon);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

// A connection that ends having sent nothing within probe_close of its
// accept (a reachability probe, worker/net/reach_probe.h) is closed
// without a refusal; with probe_close 0 the same two are refused.
TEST(PsTcpAuthTest, AProbeThatClosesAtOnceIsNotARefusal) {
  for (const absl::Duration probe_close : {absl::Seconds(1), absl::ZeroDuration()}) {
    PsTcpServerOptions o;
    o.probe_close = probe_close;
    auto server = std::make_shared<LocalServer>(8, PsShardRegistry::kDefaultMaxShardFloats, o);
    auto probe = psnet::Connect(server->address, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(probe.ok()) << probe.status();
    close(*probe);  // at once, unread challenge and all
    {
      RawConn after(server->address);  // accepted after the probe: its challenge came
    }  // closed, having sent nothing either
    for (absl::Time end = absl::Now() + absl::Seconds(30);
         server->server->connections() > 0 && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(5));  // polling a count, with a deadline
    }
    ASSERT_EQ(server->server->connections(), 0);
    EXPECT_EQ(server->server->rejected_connections(), probe_close > absl::ZeroDuration() ? 0 : 2)
        << server->server->last_rejection();
  }
}

// A hello recorded on one connection (a valid one) does not fit another's
// challenge.
TEST(PsTcpAuthTest, AReplayedHelloIsRefused) {
  auto server = std::make_shared<LocalServer>();
  std::vector<uint8_t> recorded(psnet::kHelloBytes);
  {
    RawConn c(server->address);
    psnet::EncodeHello(Job5(2), kSecret, c.nonce(), dataauth::RandomNonce(), recorded.data());
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

// The server's side of the proof: a reply verifies only for the hello it
// answers, under the job's secret and the challenge.
TEST(PsTcpAuthTest, WireReplyVerifiesOnlyForItsHelloSecretAndNonce) {
  const dataauth::Nonce nonce = dataauth::RandomNonce();
  const psnet::Hello h = Job5(2);
  uint8_t hello[psnet::kHelloBytes];
  psnet::EncodeHello(h, kSecret, nonce, dataauth::RandomNonce(), hello);
  uint8_t r[psnet::kHelloReplyBytes];
  ASSERT_EQ(sizeof(r), 48u);
  psnet::EncodeHelloReply(0, 0, r);
  psnet::SignHelloReply(hello, kSecret, nonce, r);
  EXPECT_TRUE(psnet::VerifyHelloReply(r, hello, kSecret, nonce).ok());
  const absl::Status other =
      psnet::VerifyHelloReply(r, hello, std::string(dataauth::kSecretBytes, 'x'), nonce);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(other.message()),
              HasSubstr("its hello reply for job 5 shard 0 has a wrong mac"));
  EXPECT_FALSE(psnet::VerifyHelloReply(r, hello, kSecret, dataauth::RandomNonce()).ok());
  uint8_t other_hello[psnet::kHelloBytes];  // the same fields, another client nonce
  psnet::EncodeHello(h, kSecret, nonce, dataauth::RandomNonce(), other_hello);
  EXPECT_FALSE(psnet::VerifyHelloReply(r, other_hello, kSecret, nonce).ok());
  for (size_t i = 0; i < sizeof(r); ++i) {
    uint8_t changed[psnet::kHelloReplyBytes];
    std::memcpy(changed, r, sizeof(r));
    changed[i] ^= 0x01;
    EXPECT_FALSE(psnet::VerifyHelloReply(changed, hello, kSecret, nonce).ok()) << "byte " << i;
  }
  // The hello's own mac as the reply's: another domain, refused.
  std::memcpy(r + psnet::kHelloReplyFieldBytes, hello + psnet::kHelloSignedBytes,
              dataauth::kMacBytes);
  EXPECT_FALSE(psnet::VerifyHelloReply(r, hello, kSecret, nonce).ok());
}

// A stranger listening at a shard's data address that does not hold the
// job's secret: it gets the hello, but its "accepted" reply does not fit,
// so the client's request fails naming the shard and no frame byte reaches
// it. A stranger that does hold the secret (the control) gets the ROUND.
TEST(PsTcpAuthTest, AStrangerAtTheShardsAddressGetsNoFrame) {
  enum Answer { kForged, kUnsigned, kRecorded, kGenuine };
  for (Answer answer : {kForged, kUnsigned, kRecorded, kGenuine}) {
    SCOPED_TRACE(answer);
    int port = 0;
    absl::StatusOr<int> lfd = psnet::Listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(lfd.ok()) << lfd.status();
    const std::string address = absl::StrCat("127.0.0.1:", port);
    std::vector<uint8_t> after_hello;
    std::thread fake([&] {
      const absl::Time soon = absl::Now() + absl::Seconds(10);
      // psnet::Listen's socket does not block: wait for the client first.
      EXPECT_TRUE(psnet::WaitFd(*lfd, POLLIN, soon).ok());
      const int c = accept(*lfd, nullptr, nullptr);
      ASSERT_GE(c, 0) << psnet::Errno("accept");
      const dataauth::Nonce challenge = dataauth::RandomNonce();
      uint8_t ch[psnet::kChallengeBytes];
      psnet::EncodeChallenge(challenge, ch);
      iovec iov[1] = {{ch, sizeof(ch)}};
      EXPECT_TRUE(psnet::WriteFully(c, iov, 1, soon).ok());
      uint8_t hello[psnet::kHelloBytes];
      EXPECT_TRUE(psnet::ReadFully(c, hello, sizeof(hello), soon).ok());
      uint8_t r[psnet::kHelloReplyBytes];
      psnet::EncodeHelloReply(0, 0, r);  // "accepted"
      switch (answer) {
        case kForged:
          psnet::SignHelloReply(hello, std::string(dataauth::kSecretBytes, 'x'), challenge, r);
          break;
        case kUnsigned:  // a version-2 server's reply: no mac
          break;
        case kRecorded: {  // a genuine reply to another connection's hello
          uint8_t other[psnet::kHelloBytes];
          psnet::EncodeHello(Job5(1), kSecret, challenge, dataauth::RandomNonce(), other);
          psnet::SignHelloReply(other, kSecret, challenge, r);
          break;
        }
        case kGenuine:
          psnet::SignHelloReply(hello, kSecret, challenge, r);
          break;
      }
      iovec riov[1] = {{r, sizeof(r)}};
      EXPECT_TRUE(psnet::WriteFully(c, riov, 1, soon).ok());
      uint8_t buf[256];
      for (;;) {  // until the client closes (or 10 s)
        const ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        after_hello.insert(after_hello.end(), buf, buf + n);
        if (answer == kGenuine && after_hello.size() >= psnet::kFrameBytes) break;
      }
      close(c);
    });
    {
      PsTcpClient client(address, 0, 1, 3, Auth());
      const std::vector<float> g = {1, 2, 3};
      const absl::Status s = client.StartRound(5, 0, 0, g, 1, absl::Now() + absl::Seconds(10),
                                               WireFormat::kFloat32);
      if (answer == kGenuine) {
        EXPECT_TRUE(s.ok()) << s;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
        EXPECT_THAT(std::string(s.message()), HasSubstr(address));
        EXPECT_THAT(std::string(s.message()),
                    HasSubstr("does not hold the job's data-plane secret"));
      }
      client.Cancel();  // closes the connection: the fake's read ends
    }
    fake.join();
    close(*lfd);
    if (answer == kGenuine) {
      ASSERT_GE(after_hello.size(), psnet::kFrameBytes);
      psnet::Frame f;
      ASSERT_TRUE(psnet::DecodeFrame(after_hello.data(), &f).ok());
      EXPECT_EQ(f.kind, static_cast<uint32_t>(psnet::Kind::kRound));
    } else {
      EXPECT_TRUE(after_hello.empty()) << after_hello.size() << " bytes reached the stranger";
    }
  }
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

// In plain text the coordinator's secret replaces whatever a worker
// registered first.
TEST(PsTcpAuthTest, TheCoordinatorsSecretReplacesAFirstRegistration) {
  LocalServer server;
  const std::string bogus(dataauth::kSecretBytes, 'b');
  ASSERT_TRUE(server.server->RegisterSecret(70, bogus).ok());  // a stranger was first
  ASSERT_TRUE(server.server->SetCoordinatorSecret(70, kSecret).ok());
  EXPECT_TRUE(server.server->RegisterSecret(70, kSecret).ok());
  EXPECT_EQ(server.server->RegisterSecret(70, bogus).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(server.server->SetCoordinatorSecret(71, "short").code(),
            absl::StatusCode::kInvalidArgument);
}

// Under TLS (secrets_from_coordinator) a worker's registration stores
// nothing: it waits for the coordinator's secret and must match it; hellos
// authenticate only under the coordinator's; Shutdown ends a wait.
TEST(PsTcpAuthTest, InCoordinatorModeOnlyTheCoordinatorFixesASecret) {
  PsShardRegistry registry(8);
  PsTcpServerOptions o;
  o.secrets_from_coordinator = true;
  auto started = PsTcpServer::Start(&registry, "127.0.0.1", 0, o);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<PsTcpServer> server = *std::move(started);
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  const std::string bogus(dataauth::kSecretBytes, 'b');
  const absl::Status early = server->RegisterSecret(5, bogus, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  EXPECT_THAT(early.message(), HasSubstr("job 5: the coordinator has not set"));
  {
    RawConn c(address);
    c.Hello(5, 0, 1, 3, bogus);  // the stranger's registration fixed nothing
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(text, HasSubstr("no data-plane secret for job 5"));
  }
  ASSERT_TRUE(server->SetCoordinatorSecret(5, kSecret).ok());
  EXPECT_EQ(server->RegisterSecret(5, bogus).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(server->RegisterSecret(5, kSecret).ok());
  {
    RawConn c(address);
    c.Hello(5, 0, 1, 3, bogus);
    auto [code, text] = c.ReadHelloReply();
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kPermissionDenied));
    EXPECT_THAT(text, HasSubstr("wrong mac"));
  }
  PsTcpClient a(address, 0, 1, 3, Auth());
  OneRoundOfJob5(a);
  absl::Status waited;
  std::thread t([&] { waited = server->RegisterSecret(6, kSecret, absl::InfiniteFuture()); });
  server->Shutdown();
  t.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
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
    psnet::EncodeHello(h, kSecret, c->nonce(), dataauth::RandomNonce(), b.data());
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
}  // namespace lockstep::ps_tcp_test
