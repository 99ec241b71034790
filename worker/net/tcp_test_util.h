// Tests only: helpers the raw-TCP transport's tests share
// (tcp_transport_test.cc: transport behaviour; tcp_hello_auth_test.cc:
// accepting, hellos and their authentication): hubs on loopback, raw
// sockets speaking the wire format, and the refusal checks.
#ifndef LOCKSTEP_WORKER_NET_TCP_TEST_UTIL_H_
#define LOCKSTEP_WORKER_NET_TCP_TEST_UTIL_H_

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net/data_auth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/net/tcp_transport.h"
#include "worker/net/tcp_wire.h"

namespace lockstep {
namespace tcptest {

// The job secret every transport in these tests uses (the coordinator hands
// real ones out; common/net/data_auth.h).
inline const std::string kSecret(dataauth::kSecretBytes, 's');
inline TcpTransportOptions WithSecret(TcpTransportOptions o) {
  if (o.secret.empty()) o.secret = kSecret;
  return o;
}

// One hub per rank, as if each rank were its own process, on OS-chosen
// loopback ports.
struct Hubs {
  explicit Hubs(int k, TcpHubOptions options = {})
      : Hubs(std::vector<TcpHubOptions>(k, options)) {}
  // Rank r's hub with options[r].
  explicit Hubs(const std::vector<TcpHubOptions>& options) {
    for (const TcpHubOptions& o : options) {
      auto h = TcpPeerHub::Start("127.0.0.1", 0, o);
      ABSL_RAW_CHECK(h.ok(), "TcpPeerHub::Start failed");
      hubs.push_back(*std::move(h));
    }
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> a;
    for (const auto& h : hubs) a.push_back(absl::StrCat("127.0.0.1:", h->port()));
    return a;
  }
  std::unique_ptr<TcpTransport> Make(uint64_t group, int r,
                                     TcpTransportOptions o = {}) {
    auto t = TcpTransport::Create(hubs[r].get(), group, r, Addresses(), WithSecret(o));
    ABSL_RAW_CHECK(t.ok(), "TcpTransport::Create failed");
    return *std::move(t);
  }
  std::vector<std::unique_ptr<TcpPeerHub>> hubs;
};

inline const absl::Duration kLong = absl::Seconds(30);

inline std::vector<uint8_t> Bytes(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

// A hello (tcp_wire's encoder): rank `from` of `world` in `group` calling
// rank `to`, answering `nonce` under `secret`.
inline std::vector<uint8_t> HelloBytes(uint64_t group, uint32_t from, uint32_t to, uint32_t world,
                                const dataauth::Nonce& nonce,
                                const std::string& secret = kSecret) {
  std::vector<uint8_t> hello(tcpwire::kHelloBytes);
  tcpwire::Hello h;
  h.group = group;
  h.from = from;
  h.to = to;
  h.world = world;
  tcpwire::EncodeHello(h, secret, nonce, dataauth::RandomNonce(), hello.data());
  return hello;
}

// A plain socket bound to an OS-chosen loopback port (listening unless
// `listening` is false); returns the fd and sets *address ("127.0.0.1:P").
inline int LoopbackSocket(std::string* address, bool listening = true) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (listening) {
    EXPECT_EQ(listen(fd, 4), 0);
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *address = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  return fd;
}

// Plays a hub on listening socket `lfd`: accepts one connection, sends it a
// fresh challenge (*challenge) and gives its reads a 10 s timeout. Returns
// the connection's fd.
inline int AcceptAndChallenge(int lfd, dataauth::Nonce* challenge) {
  const int c = accept(lfd, nullptr, nullptr);
  *challenge = dataauth::RandomNonce();
  uint8_t ch[tcpwire::kChallengeBytes];
  tcpwire::EncodeChallenge(*challenge, ch);
  EXPECT_EQ(send(c, ch, sizeof(ch), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(ch)));
  timeval tv{};
  tv.tv_sec = 10;
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return c;
}

inline void SendAll(int fd, const std::vector<uint8_t>& bytes) {
  EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Connects a raw socket to `port`; returns the fd. With `nonce`, first reads
// the hub's challenge (10 s at most) into it.
inline int RawConnect(int port, dataauth::Nonce* nonce = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (nonce != nullptr) {
    timeval tv{};
    tv.tv_sec = 10;
    EXPECT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    uint8_t c[tcpwire::kChallengeBytes];
    EXPECT_EQ(recv(fd, c, sizeof(c), MSG_WAITALL), static_cast<ssize_t>(sizeof(c)));
    EXPECT_TRUE(tcpwire::DecodeChallenge(c, nonce).ok());
  }
  return fd;
}

// Connects, reads the challenge and answers it with a hello under `secret`.
inline int RawHello(int port, uint64_t group, uint32_t from, uint32_t to, uint32_t world,
             const std::string& secret = kSecret) {
  dataauth::Nonce nonce{};
  const int fd = RawConnect(port, &nonce);
  SendAll(fd, HelloBytes(group, from, to, world, nonce, secret));
  return fd;
}

// Waits (10 s at most, never forever) until the hub closes fd: recv sees
// end of stream or a reset; a timeout fails the test.
inline void ExpectClosedByHub(int fd) {
  timeval tv{};
  tv.tv_sec = 10;
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  // The hub's challenge may still be unread, and its accept if the hello was
  // accepted before the refusal (a full queue): skip them (and only them).
  char c[tcpwire::kChallengeBytes + tcpwire::kAcceptBytes + 1];
  size_t skipped = 0;
  ssize_t n = 0;
  int err = 0;
  for (;;) {
    n = recv(fd, c, sizeof(c), 0);
    err = errno;
    if (n <= 0) break;
    skipped += static_cast<size_t>(n);
    if (skipped > tcpwire::kChallengeBytes + tcpwire::kAcceptBytes) break;  // fail below
  }
  EXPECT_TRUE(n == 0 || (n < 0 && err != EAGAIN && err != EWOULDBLOCK))
      << "recv returned " << n << ", errno " << err
      << " (EAGAIN: the hub did not close the connection within 10 s)";
}

// Sends one 4-byte message from t0 to t1 under `key` and checks it arrives.
inline void ExpectDelivered(TcpTransport& t0, TcpTransport& t1, const MessageKey& key) {
  const uint8_t msg[4] = {1, 2, 3, 4};
  ASSERT_TRUE(t0.Send(1, key, msg, absl::Now() + absl::Seconds(5)).ok());
  uint8_t got[4] = {};
  absl::Status s = t1.Recv(0, key, absl::MakeSpan(got), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::memcmp(got, msg, 4), 0);
}

// A frame header carrying `n` payload bytes for `key`, and the payload.
inline std::vector<uint8_t> ForgedFrame(const MessageKey& key, size_t n) {
  std::vector<uint8_t> f(tcpwire::kHeaderBytes + n, 0xEE);
  tcpwire::EncodeFrame(key, static_cast<int64_t>(n), f.data());
  return f;
}

// The hub refused fd's connection: it closed it (ExpectClosedByHub), has
// refused `count` connections in all, and its last refusal names the
// connecting address and says each of `what`.
inline void ExpectRefused(const TcpPeerHub& hub, int fd, int64_t count,
                          const std::vector<std::string>& what) {
  ExpectClosedByHub(fd);
  EXPECT_EQ(hub.rejected_connections(), count);
  const std::string last = hub.last_rejection();
  EXPECT_THAT(last, ::testing::HasSubstr("connection from 127.0.0.1:"));
  for (const std::string& w : what) EXPECT_THAT(last, ::testing::HasSubstr(w));
}

}  // namespace tcptest
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_TEST_UTIL_H_
