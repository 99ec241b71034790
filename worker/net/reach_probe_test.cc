// ProbeReachable (reach_probe.h): listening ports answer, closed ports and
// bad addresses do not, the caller's own "" entry does, a connect that gets
// no answer ends at the deadline; and a probe of a data hub is closed there
// without a refusal (tcp_hub.cc), plain and under TLS.
#include "worker/net/reach_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net/test_certs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/net/tcp_test_util.h"

namespace lockstep {
namespace {

using tcptest::Hubs;

// A port with nothing listening on it: bound (so nobody else takes it
// meanwhile) but not listening, so a connect is refused.
int ClosedPort(std::string* address) { return tcptest::LoopbackSocket(address, false); }

TEST(ReachProbeTest, ListeningPortsAnswerClosedPortsAndBadAddressesDoNot) {
  std::string up1, up2, down;
  const int l1 = tcptest::LoopbackSocket(&up1);
  const int l2 = tcptest::LoopbackSocket(&up2);
  const int c = ClosedPort(&down);
  const absl::Time start = absl::Now();
  const std::vector<bool> ok = ProbeReachable(
      {up1, "", down, "no-port-here", up2, "[::1", "127.0.0.1:0"}, start + absl::Seconds(5));
  EXPECT_THAT(ok, ::testing::ElementsAre(true, true, false, false, true, false, false));
  // Nothing waited for the deadline: every answer came at once.
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  close(l1);
  close(l2);
  close(c);
}

TEST(ReachProbeTest, AConnectWithNoAnswerEndsAtTheDeadline) {
  // A listening socket whose accept queue is full drops further SYNs:
  // the connect stays pending, as towards a host whose packets are dropped.
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(l, 0), 0);
  socklen_t len = sizeof(a);
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  // Fill the queue (backlog 0 holds one) with connections nobody accepts.
  std::vector<int> fill;
  for (int i = 0; i < 2; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fill.push_back(fd);
  }
  const absl::Time start = absl::Now();
  const std::vector<bool> ok = ProbeReachable({address}, start + absl::Milliseconds(400));
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(ok, ::testing::ElementsAre(false));
  EXPECT_GE(took, absl::Milliseconds(390));
  EXPECT_LT(took, absl::Seconds(3));
  for (int fd : fill) close(fd);
  close(l);
}

// The hub closes a connection that sent nothing without counting a
// refusal; the next real refusal is the first it counts.
void ExpectProbeIsNotARefusal(Hubs& h) {
  const std::vector<std::string> addresses = h.Addresses();
  EXPECT_THAT(ProbeReachable(addresses, absl::Now() + absl::Seconds(5)),
              ::testing::ElementsAre(true, true));
  // A refused connection after the probe: a hub handles connections in
  // order, so once this one is counted the probe's close was seen.
  for (auto& hub : h.hubs) {
    std::vector<uint8_t> junk(tcpwire::kHelloBytes, 'x');
    const int fd = tcptest::RawConnect(hub->port());
    tcptest::SendAll(fd, junk);
    tcptest::ExpectClosedByHub(fd);
    close(fd);
    EXPECT_EQ(hub->rejected_connections(), 1) << hub->last_rejection();
    EXPECT_THAT(hub->last_rejection(), ::testing::Not(::testing::HasSubstr("0 of")));
  }
}

// A connection that ends unused later than probe_close is refused as
// before (here probe_close is 0: every one is late).
TEST(ReachProbeTest, ALateSilentCloseIsStillARefusal) {
  TcpHubOptions o;
  o.probe_close = absl::ZeroDuration();
  Hubs h(1, o);
  EXPECT_THAT(ProbeReachable(h.Addresses(), absl::Now() + absl::Seconds(5)),
              ::testing::ElementsAre(true));
  const int fd = tcptest::RawConnect(h.hubs[0]->port());  // a second one, to wait on
  close(fd);
  for (absl::Time end = absl::Now() + absl::Seconds(30);
       h.hubs[0]->rejected_connections() < 2 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a counter, with a deadline
  }
  EXPECT_EQ(h.hubs[0]->rejected_connections(), 2);
  EXPECT_THAT(h.hubs[0]->last_rejection(), ::testing::HasSubstr("no complete hello (0 of"));
}

TEST(ReachProbeTest, APlainHubClosesAProbeWithoutARefusal) {
  Hubs h(2);
  ExpectProbeIsNotARefusal(h);
}

TEST(ReachProbeTest, ATlsHubClosesAProbeWithoutARefusal) {
  TcpHubOptions o;
  o.tls = testcerts::Tls("pki", "worker", {"worker"});
  Hubs h(2, o);
  ExpectProbeIsNotARefusal(h);
}

}  // namespace
}  // namespace lockstep
