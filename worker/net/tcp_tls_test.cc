// The raw-TCP ring with --data_plane_tls (TcpHubOptions::tls; common/net/
// data_conn.h): the transport conformance suite over mutual TLS, ring
// all-reduce results bit-identical to plain TCP for K = 2..4, and peers that
// do not belong refused with errors naming them: another CA's certificate,
// a certificate of another role, a peer speaking plain TCP.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/ring_allreduce.h"
#include "common/net/data_auth.h"
#include "common/net/test_certs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/net/tcp_test_util.h"
#include "worker/net/tcp_transport.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using tcptest::Hubs;
using tcptest::kLong;

std::shared_ptr<const dataconn::DataTls> WorkerTls(const std::string& pki = "pki",
                                                   const std::string& role = "worker") {
  return testcerts::Tls(pki, role, {"worker"});
}

std::vector<TcpHubOptions> Same(int k, std::shared_ptr<const dataconn::DataTls> tls) {
  TcpHubOptions o;
  o.tls = std::move(tls);
  return std::vector<TcpHubOptions>(k, o);
}

std::vector<std::unique_ptr<Transport>> MakeTlsTransports(int k) {
  auto hubs = std::make_shared<Hubs>(Same(k, WorkerTls()));
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < k; ++r) {
    out.push_back(std::make_unique<OwningTransport>(hubs, hubs->Make(1, r)));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(TcpTls, TransportConformanceTest,
                         ::testing::Values(TransportFactoryParam{"TcpTls", MakeTlsTransports}),
                         TransportParamName);

// K ranks' ring all-reduce of awkward values (n not a multiple of K or of a
// TLS record) on hubs with `tls`; returns every rank's result.
std::vector<std::vector<float>> Ring(int k, std::shared_ptr<const dataconn::DataTls> tls) {
  Hubs h(Same(k, std::move(tls)));
  std::vector<std::unique_ptr<TcpTransport>> t;
  for (int r = 0; r < k; ++r) t.push_back(h.Make(7, r));
  const size_t n = 300007;
  std::vector<std::vector<float>> v(k, std::vector<float>(n));
  for (int r = 0; r < k; ++r) {
    for (size_t i = 0; i < n; ++i) {
      v[r][i] = 0.1f * static_cast<float>((i * 7919 + r * 104729) % 1000) - 37.3f / (r + 1);
    }
  }
  std::vector<absl::Status> st(k);
  std::vector<std::thread> th;
  for (int r = 0; r < k; ++r) {
    th.emplace_back([&, r] {
      int64_t count = r + 1;
      AllReduceOptions o;
      o.job = 7;
      for (int step = 0; step < 3 && st[r].ok(); ++step) {
        o.step = step;
        st[r] = RingAllReduce(*t[r], absl::MakeSpan(v[r]), &count, o);
      }
    });
  }
  for (auto& x : th) x.join();
  for (int r = 0; r < k; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  return v;
}

TEST(TcpTlsTest, RingAllReduceIsBitIdenticalToPlainTcp) {
  for (int k = 2; k <= 4; ++k) {
    SCOPED_TRACE(absl::StrCat("K=", k));
    const std::vector<std::vector<float>> plain = Ring(k, nullptr);
    const std::vector<std::vector<float>> tls = Ring(k, WorkerTls());
    ASSERT_EQ(plain.size(), tls.size());
    for (int r = 0; r < k; ++r) {
      ASSERT_EQ(plain[r].size(), tls[r].size());
      EXPECT_EQ(std::memcmp(plain[r].data(), tls[r].data(), plain[r].size() * sizeof(float)), 0)
          << "rank " << r;
      EXPECT_EQ(std::memcmp(tls[0].data(), tls[r].data(), tls[0].size() * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0";
    }
  }
}

// Sends one message from rank 1 (hub options `from`) to rank 0 (`to`);
// returns the send's status and rank 0's hub's last rejection once it has one.
struct Refusal {
  absl::Status send;
  std::string rejection;
  std::string acceptor;  // "127.0.0.1:<rank 0's port>"
};
Refusal SendAcross(TcpHubOptions to, TcpHubOptions from) {
  Hubs h({to, from});
  auto t0 = h.Make(3, 0);
  auto t1 = h.Make(3, 1);
  Refusal out;
  out.acceptor = h.Addresses()[0];
  const std::vector<uint8_t> msg(100, 1);
  out.send = t1->Send(0, MakeKey(3, 0, 0, 0), msg, absl::Now() + absl::Seconds(10));
  if (out.send.ok()) {
    // A refused connector may learn it only when it reads or writes next.
    std::vector<uint8_t> got(msg.size());
    (void)t0->Recv(1, MakeKey(3, 0, 0, 0), absl::MakeSpan(got), absl::Now() + absl::Seconds(2));
  }
  const absl::Time until = absl::Now() + kLong;
  while (h.hubs[0]->rejected_connections() == 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));  // polling with a deadline
  }
  out.rejection = h.hubs[0]->last_rejection();
  return out;
}

TEST(TcpTlsTest, PeerWithAnotherCasCertificateIsRefusedNamingIt) {
  TcpHubOptions ours, theirs;
  ours.tls = WorkerTls("pki");
  theirs.tls = WorkerTls("other");  // certs.sh run again: another CA
  const Refusal r = SendAcross(ours, theirs);
  // The connector checks the acceptor first (TLS 1.3: the server's
  // certificate comes first) and names it.
  EXPECT_FALSE(r.send.ok());
  EXPECT_THAT(std::string(r.send.message()),
              AllOf(HasSubstr(absl::StrCat("peer rank 0 (", r.acceptor, ")")),
                    HasSubstr("TLS handshake failed"), HasSubstr("certificate verify failed")));
  // The acceptor logs the connection with its address.
  EXPECT_THAT(r.rejection,
              AllOf(HasSubstr("connection from 127.0.0.1:"), HasSubstr("TLS handshake failed")));
}

TEST(TcpTlsTest, CertificateOfAnotherRoleIsRefused) {
  TcpHubOptions ours, client;
  ours.tls = WorkerTls("pki");
  client.tls = WorkerTls("pki", "client");  // same CA, role client
  const Refusal r = SendAcross(ours, client);
  EXPECT_THAT(r.rejection, AllOf(HasSubstr("connection from 127.0.0.1:"),
                                 HasSubstr("role 'client'"), HasSubstr("expected worker")));
}

TEST(TcpTlsTest, PlainPeerIsRefusedByATlsHub) {
  TcpHubOptions ours, plain;
  ours.tls = WorkerTls("pki");
  ours.hello_timeout = absl::Milliseconds(300);
  const Refusal r = SendAcross(ours, plain);
  EXPECT_FALSE(r.send.ok());
  EXPECT_THAT(std::string(r.send.message()),
              HasSubstr(absl::StrCat("peer rank 0 (", r.acceptor, ")")));
  EXPECT_THAT(r.rejection, AllOf(HasSubstr("connection from 127.0.0.1:"),
                                 HasSubstr("no complete TLS handshake")));
}

TEST(TcpTlsTest, TlsPeerIsRefusedByAPlainHub) {
  TcpHubOptions plain, ours;
  ours.tls = WorkerTls("pki");
  const Refusal r = SendAcross(plain, ours);
  EXPECT_FALSE(r.send.ok());
  EXPECT_THAT(std::string(r.send.message()),
              AllOf(HasSubstr(absl::StrCat("peer rank 0 (", r.acceptor, ")")),
                    HasSubstr("TLS handshake failed")));
}

}  // namespace
}  // namespace lockstep
