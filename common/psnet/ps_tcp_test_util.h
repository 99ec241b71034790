// Helpers of the raw-TCP ps data plane's tests (ps_tcp_test.cc,
// ps_tcp_auth_test.cc): the test secret, a registry and server on
// 127.0.0.1:0, TCP ps clients as a conformance factory, a cluster of shards,
// and RawConn, a hand-driven connection that speaks the wire. Test-only.
#ifndef LOCKSTEP_COMMON_PSNET_PS_TCP_TEST_UTIL_H_
#define LOCKSTEP_COMMON_PSNET_PS_TCP_TEST_UTIL_H_

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


namespace lockstep::ps_tcp_test {


// The data-plane secret of every job in these tests (a real job's comes
// from the coordinator through the worker: common/net/data_auth.h).
inline const std::string kSecret(dataauth::kSecretBytes, 'p');
inline PsTcpClientOptions Auth() {
  PsTcpClientOptions o;
  o.secret = kSecret;
  return o;
}
// Job keys the test servers know the secret of.
inline constexpr uint64_t kRegisteredJobs = 64;

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
inline std::unique_ptr<PsClient> OwningClient(std::shared_ptr<LocalServer> server, int shard,
                                              int k, int64_t len) {
  auto client = std::make_unique<PsTcpClient>(server->address, shard, k, len, Auth());
  return std::make_unique<OwningPsClient>(std::move(server), std::move(client));
}

inline std::vector<std::unique_ptr<PsClient>> MakeTcpPsClients(int k, int shards, int64_t n) {
  std::vector<std::unique_ptr<PsClient>> out;
  for (int s = 0; s < shards; ++s) {
    const Range rg = ShardBounds(n, shards, s);
    out.push_back(
        OwningClient(std::make_shared<LocalServer>(), s, k, rg.size()));
  }
  return out;
}

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
    psnet::EncodeHello(h, secret, nonce_, dataauth::RandomNonce(), b);
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

}  // namespace lockstep::ps_tcp_test

#endif  // LOCKSTEP_COMMON_PSNET_PS_TCP_TEST_UTIL_H_
