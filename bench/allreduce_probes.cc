#include "bench/allreduce_probes.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep::allreduce_bench {
namespace {

// ---------------------------------------------------------------- raw TCP

constexpr size_t kRawChunk = 256 << 10;

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, std::min(n, kRawChunk));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, std::min(n, kRawChunk));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

double RawLoopbackBandwidth(int64_t bytes, int messages, int sock_buf) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(lfd, 1) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("raw tcp: listen");
    return 0;
  }
  const int a = socket(AF_INET, SOCK_STREAM, 0);
  if (sock_buf > 0) {
    // Before connect (and inherited by accept) so the window scale fits.
    setsockopt(a, SOL_SOCKET, SO_SNDBUF, &sock_buf, sizeof(sock_buf));
    setsockopt(a, SOL_SOCKET, SO_RCVBUF, &sock_buf, sizeof(sock_buf));
    setsockopt(lfd, SOL_SOCKET, SO_SNDBUF, &sock_buf, sizeof(sock_buf));
    setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &sock_buf, sizeof(sock_buf));
  }
  if (connect(a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("raw tcp: connect");
    return 0;
  }
  const int b = accept(lfd, nullptr, nullptr);
  close(lfd);
  const int one = 1;
  setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Separate, pre-touched buffers per thread.
  std::vector<std::vector<uint8_t>> bufs(4, std::vector<uint8_t>(bytes, 1));
  bool ok = true;
  const absl::Time start = absl::Now();
  {
    std::vector<std::thread> th;
    th.emplace_back([&] { for (int i = 0; i < messages; ++i) ok &= WriteAll(a, bufs[0].data(), bytes); });
    th.emplace_back([&] { for (int i = 0; i < messages; ++i) ok &= ReadAll(a, bufs[1].data(), bytes); });
    th.emplace_back([&] { for (int i = 0; i < messages; ++i) ok &= WriteAll(b, bufs[2].data(), bytes); });
    th.emplace_back([&] { for (int i = 0; i < messages; ++i) ok &= ReadAll(b, bufs[3].data(), bytes); });
    for (auto& t : th) t.join();
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  close(a);
  close(b);
  if (!ok) return 0;
  return static_cast<double>(bytes) * messages / secs;
}

// ---------------------------------------------------------------- malloc

int RunMallocProbe() {
  constexpr size_t kBytes = 64 << 20;
  // Compiler barriers: the mallocs, memsets and clock reads must happen in
  // program order and must not be elided.
#define LOCKSTEP_BARRIER() __asm__ volatile("" ::: "memory")
  char* p = static_cast<char*>(std::malloc(kBytes));
  LOCKSTEP_BARRIER();
  std::memset(p, 1, kBytes);
  LOCKSTEP_BARRIER();
  const struct mallinfo2 during = mallinfo2();
  std::free(p);
  LOCKSTEP_BARRIER();
  const struct mallinfo2 after = mallinfo2();
  // A second block: fresh pages (slow first touch) unless the heap kept them.
  const absl::Time t0 = absl::Now();
  LOCKSTEP_BARRIER();
  char* q = static_cast<char*>(std::malloc(kBytes));
  LOCKSTEP_BARRIER();
  std::memset(q, 2, kBytes);
  LOCKSTEP_BARRIER();
  const double touch_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  unsigned sum = 0;
  for (size_t i = 0; i < kBytes; i += 4096) sum += static_cast<unsigned char>(q[i]);
  std::free(q);
#undef LOCKSTEP_BARRIER
  if (sum != 2 * (kBytes / 4096)) return 1;
  std::printf("%s %s %.1f\n", during.hblkhd >= kBytes ? "mmap" : "heap",
              after.arena >= kBytes ? "kept" : "returned", touch_ms);
  return 0;
}

}  // namespace lockstep::allreduce_bench
