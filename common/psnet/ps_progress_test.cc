// The raw-TCP ps data plane reports progress (common/collective/
// progress_mark.h): ReadFully and WriteFully touch the mark whenever bytes
// move, so a worker's shard wait counts from the last byte, not from the
// start of a push or pull that a slow link stretches past lost_after.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/collective/peer_wait.h"
#include "common/collective/progress_mark.h"
#include "common/collective/ps_aggregator.h"
#include "common/net/data_auth.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/psnet/ps_tcp_server.h"
#include "common/psnet/ps_wire.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

constexpr size_t kPayload = 4 << 20;  // far more than a socket pair buffers
constexpr size_t kPiece = 4096;

struct SocketPair {
  SocketPair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
    for (int f : fd) fcntl(f, F_SETFL, fcntl(f, F_GETFL) | O_NONBLOCK);
  }
  ~SocketPair() {
    for (int f : fd) close(f);
  }
  int fd[2];
};

// A write the reader drains in small pieces: the writer's last touch comes
// after the reader's first piece (its last bytes could only go once the
// reader made room), so the mark moved while the write was held.
TEST(PsProgressTest, WriteFullyTouchesTheMarkAsBytesGo) {
  SocketPair sp;
  ProgressMark mark;
  std::atomic<int64_t> first_read_ns{0};
  std::thread reader([&] {
    std::vector<uint8_t> buf(kPiece);
    size_t got = 0;
    while (got < kPayload) {
      const ssize_t r = read(sp.fd[1], buf.data(), buf.size());
      if (r > 0) {
        if (got == 0) first_read_ns = ProgressMark::SteadyNanos();
        got += static_cast<size_t>(r);
      } else {
        std::this_thread::yield();  // EAGAIN: the writer has not refilled yet
      }
    }
  });
  std::vector<uint8_t> data(kPayload, 7);
  iovec iov{data.data(), data.size()};
  const int64_t before = ProgressMark::SteadyNanos();
  ASSERT_TRUE(psnet::WriteFully(dataconn::Plain(sp.fd[0]), &iov, 1,
                                absl::Now() + absl::Seconds(60), &mark)
                  .ok());
  reader.join();
  EXPECT_GE(mark.last_ns(), before);
  EXPECT_GT(mark.last_ns(), first_read_ns.load());
}

// A read fed in small pieces: the reader's last touch comes after the
// writer began its last piece.
TEST(PsProgressTest, ReadFullyTouchesTheMarkAsBytesCome) {
  SocketPair sp;
  ProgressMark mark;
  std::atomic<int64_t> last_write_ns{0};
  std::thread writer([&] {
    std::vector<uint8_t> buf(kPiece, 3);
    size_t sent = 0;
    while (sent < kPayload) {
      if (sent + kPiece >= kPayload) last_write_ns = ProgressMark::SteadyNanos();
      const ssize_t w = write(sp.fd[1], buf.data(), std::min(kPiece, kPayload - sent));
      if (w > 0) {
        sent += static_cast<size_t>(w);
      } else {
        std::this_thread::yield();  // full: the reader has not drained yet
      }
    }
  });
  std::vector<uint8_t> out(kPayload);
  ASSERT_TRUE(psnet::ReadFully(dataconn::Plain(sp.fd[0]), out.data(), out.size(),
                               absl::Now() + absl::Seconds(60), nullptr, &mark)
                  .ok());
  writer.join();
  EXPECT_GT(mark.last_ns(), last_write_ns.load());
  EXPECT_EQ(out[kPayload - 1], 3);
  // No mark: nothing to touch, and the bytes still arrive.
  std::thread again([&] {
    const uint8_t b = 9;
    while (write(sp.fd[1], &b, 1) != 1) std::this_thread::yield();
  });
  uint8_t one = 0;
  ASSERT_TRUE(
      psnet::ReadFully(dataconn::Plain(sp.fd[0]), &one, 1, absl::Now() + absl::Seconds(60)).ok());
  again.join();
  EXPECT_EQ(one, 9);
}

// The client wiring: a PsTcpClient given the job's PeerWait progress
// touches it with its round's bytes, so the shard wait a worker's heartbeat
// reports restarts with them.
TEST(PsProgressTest, TheTcpClientTouchesTheJobsProgress) {
  const std::string secret(dataauth::kSecretBytes, 'p');
  PsShardRegistry registry(8, PsShardRegistry::kDefaultMaxShardFloats);
  auto server = PsTcpServer::Start(&registry, "127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->RegisterSecret(5, secret).ok());
  PeerWait wait;
  PsTcpClientOptions options;
  options.secret = secret;
  options.progress = wait.progress();
  PsTcpClient client(absl::StrCat("127.0.0.1:", (*server)->port()), 0, 1, 1000, options);
  ASSERT_EQ(wait.progress()->last_ns(), 0);
  std::vector<float> grad(1000, 2.0f);
  int64_t count = 4;
  PsAllReduceOptions o;
  o.job = 5;
  o.step = 0;
  o.timeout = absl::Seconds(30);
  const int64_t before = ProgressMark::SteadyNanos();
  ASSERT_TRUE(PsAllReduce({&client}, absl::MakeSpan(grad), &count, o).ok());
  EXPECT_GE(wait.progress()->last_ns(), before);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(grad[999], 2.0f);
}

}  // namespace
}  // namespace lockstep
