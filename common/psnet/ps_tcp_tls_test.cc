// The raw-TCP ps data plane with --data_plane_tls (PsTcpServerOptions::tls,
// PsTcpClientOptions::tls): the ps conformance suite over mutual TLS,
// PsAllReduce results bit-identical to plain TCP, and clients that do not
// belong refused naming them (another CA; a server certificate posing as a
// worker).
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
#include "common/net/data_auth.h"
#include "common/net/test_certs.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/psnet/ps_tcp_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kSecret(dataauth::kSecretBytes, 'q');

// A registry and its TLS (or plain: tls null) data-plane server; jobs 0..63
// have the secret.
struct LocalServer {
  explicit LocalServer(std::shared_ptr<const dataconn::DataTls> tls) : registry(8) {
    PsTcpServerOptions o;
    o.tls = std::move(tls);
    auto s = PsTcpServer::Start(&registry, "127.0.0.1", 0, o);
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
    address = absl::StrCat("127.0.0.1:", server->port());
    for (uint64_t job = 0; job < 64; ++job) EXPECT_TRUE(server->RegisterSecret(job, kSecret).ok());
  }
  PsShardRegistry registry;
  std::unique_ptr<PsTcpServer> server;
  std::string address;
};

std::shared_ptr<const dataconn::DataTls> ServerTls() {
  return testcerts::Tls("pki", "server", {"worker"});
}
PsTcpClientOptions ClientOptions(std::shared_ptr<const dataconn::DataTls> tls) {
  PsTcpClientOptions o;
  o.secret = kSecret;
  o.tls = std::move(tls);
  return o;
}
std::shared_ptr<const dataconn::DataTls> WorkerTls(const std::string& pki = "pki",
                                                   const std::string& role = "worker") {
  return testcerts::Tls(pki, role, {"server", "coordinator"});
}

// A TLS PsTcpClient that keeps its server alive.
std::unique_ptr<PsClient> OwningClient(std::shared_ptr<LocalServer> server, int shard, int k,
                                       int64_t len) {
  auto client = std::make_unique<PsTcpClient>(server->address, shard, k, len,
                                              ClientOptions(WorkerTls()));
  return std::make_unique<OwningPsClient>(std::move(server), std::move(client));
}

std::vector<std::unique_ptr<PsClient>> MakeTlsPsClients(int k, int shards, int64_t n) {
  std::vector<std::unique_ptr<PsClient>> out;
  for (int s = 0; s < shards; ++s) {
    out.push_back(OwningClient(std::make_shared<LocalServer>(ServerTls()), s, k,
                               ShardBounds(n, shards, s).size()));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(TcpTls, PsConformanceTest,
                         ::testing::Values(PsClientFactoryParam{"TcpTls", MakeTlsPsClients}),
                         PsParamName);

// K workers x 2 shards, 3 rounds of PsAllReduce; every worker's result.
std::vector<std::vector<float>> Rounds(int k, bool tls) {
  constexpr int kShards = 2;
  const int64_t n = 200003;
  std::vector<std::unique_ptr<LocalServer>> servers;
  for (int s = 0; s < kShards; ++s) {
    servers.push_back(std::make_unique<LocalServer>(tls ? ServerTls() : nullptr));
  }
  std::vector<std::vector<std::unique_ptr<PsTcpClient>>> clients(k);
  for (int w = 0; w < k; ++w) {
    for (int s = 0; s < kShards; ++s) {
      clients[w].push_back(std::make_unique<PsTcpClient>(
          servers[s]->address, s, k, ShardBounds(n, kShards, s).size(),
          ClientOptions(tls ? WorkerTls() : nullptr)));
    }
  }
  std::vector<std::vector<float>> v(k, std::vector<float>(n));
  for (int w = 0; w < k; ++w) {
    for (int64_t i = 0; i < n; ++i) {
      v[w][i] = 0.37f * static_cast<float>((i * 31 + w * 7) % 997) - 11.0f / (w + 3);
    }
  }
  std::vector<absl::Status> st(k);
  std::vector<std::thread> th;
  for (int w = 0; w < k; ++w) {
    th.emplace_back([&, w] {
      std::vector<PsClient*> shards;
      for (auto& c : clients[w]) shards.push_back(c.get());
      for (int step = 0; step < 3 && st[w].ok(); ++step) {
        PsAllReduceOptions o;
        o.job = 5;
        o.step = step;
        o.worker = w;
        o.timeout = absl::Seconds(30);
        int64_t count = 1;
        st[w] = PsAllReduce(shards, absl::MakeSpan(v[w]), &count, o);
      }
    });
  }
  for (auto& t : th) t.join();
  for (int w = 0; w < k; ++w) EXPECT_TRUE(st[w].ok()) << "worker " << w << ": " << st[w];
  return v;
}

TEST(PsTcpTlsTest, PsAllReduceIsBitIdenticalToPlainTcp) {
  for (int k = 2; k <= 3; ++k) {
    SCOPED_TRACE(absl::StrCat("K=", k));
    const auto plain = Rounds(k, false);
    const auto tls = Rounds(k, true);
    for (int w = 0; w < k; ++w) {
      ASSERT_EQ(plain[w].size(), tls[w].size());
      EXPECT_EQ(std::memcmp(plain[w].data(), tls[w].data(), plain[w].size() * sizeof(float)), 0)
          << "worker " << w;
    }
  }
}

// One Push from a client with `tls` to a TLS server; its status and the
// server's last rejection.
std::pair<absl::Status, std::string> PushWith(std::shared_ptr<const dataconn::DataTls> tls) {
  LocalServer server(ServerTls());
  PsTcpClient c(server.address, 0, 1, 4, ClientOptions(std::move(tls)));
  const std::vector<float> g(4, 1.0f);
  absl::Status s = c.Push(1, 0, 0, g, 1, absl::Now() + absl::Seconds(10));
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (server.server->rejected_connections() == 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  return {s, server.server->last_rejection() + " | " + server.address};
}

TEST(PsTcpTlsTest, ClientWithAnotherCasCertificateIsRefusedNamingTheServer) {
  auto [s, rejection] = PushWith(WorkerTls("other"));
  EXPECT_FALSE(s.ok());
  const std::string address = rejection.substr(rejection.rfind(" | ") + 3);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(absl::StrCat("ps shard 0 (", address, ", tcp)")),
                    HasSubstr("TLS handshake failed"), HasSubstr("certificate verify failed")));
  EXPECT_THAT(rejection, AllOf(HasSubstr("connection from 127.0.0.1:"),
                               HasSubstr("TLS handshake failed")));
}

TEST(PsTcpTlsTest, ServerCertificatePosingAsAWorkerIsRefused) {
  auto [s, rejection] = PushWith(WorkerTls("pki", "server"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(rejection, AllOf(HasSubstr("connection from 127.0.0.1:"),
                               HasSubstr("role 'server'"), HasSubstr("expected worker")));
}

}  // namespace
}  // namespace lockstep
