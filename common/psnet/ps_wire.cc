#include "common/psnet/ps_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net/resolve.h"

namespace lockstep {
namespace psnet {
namespace {

template <typename T>
void Put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  // Round up so a wait never ends just before its deadline.
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

}  // namespace

const char* KindName(uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kPush: return "PUSH";
    case Kind::kPull: return "PULL";
    case Kind::kRound: return "ROUND";
    case Kind::kAck: return "ACK";
    case Kind::kResult: return "RESULT";
    case Kind::kError: return "ERROR";
  }
  return "unknown";
}

void EncodeChallenge(const dataauth::Nonce& nonce, uint8_t out[kChallengeBytes]) {
  Put<uint32_t>(out, 0, kChallengeMagic);
  Put<uint32_t>(out, 4, kVersion);
  std::memcpy(out + 8, nonce.data(), nonce.size());
}

absl::Status DecodeChallenge(const uint8_t in[kChallengeBytes], dataauth::Nonce* nonce) {
  if (Get<uint32_t>(in, 0) != kChallengeMagic || Get<uint32_t>(in, 4) != kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "challenge: magic 0x%08x version %d, expected 0x%08x (\"LKPC\") version %d: not a "
        "lockstep ps data plane, or one of another version",
        Get<uint32_t>(in, 0), Get<uint32_t>(in, 4), kChallengeMagic, kVersion));
  }
  std::memcpy(nonce->data(), in + 8, nonce->size());
  return absl::OkStatus();
}

void EncodeHello(const Hello& h, absl::string_view secret, const dataauth::Nonce& challenge,
                 const dataauth::Nonce& own_nonce, uint8_t out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  Put<uint32_t>(out, 0, kHelloMagic);
  Put<uint32_t>(out, 4, kVersion);
  Put<uint64_t>(out, 8, h.job);
  Put<int32_t>(out, 16, h.shard);
  Put<int32_t>(out, 20, h.num_workers);
  Put<int64_t>(out, 24, h.shard_len);
  Put<uint32_t>(out, 32, static_cast<uint32_t>(WireFormatCode(h.wire)));
  std::memcpy(out + kHelloFieldBytes, own_nonce.data(), own_nonce.size());
  const dataauth::Mac mac =
      dataauth::HelloMac(secret, kHelloDomain, out, kHelloSignedBytes, challenge);
  std::memcpy(out + kHelloSignedBytes, mac.data(), mac.size());
}

absl::Status VerifyHello(const uint8_t in[kHelloBytes], absl::string_view secret,
                         const dataauth::Nonce& challenge) {
  const dataauth::Mac want =
      dataauth::HelloMac(secret, kHelloDomain, in, kHelloSignedBytes, challenge);
  if (dataauth::MacEqual(want.data(), in + kHelloSignedBytes, want.size())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrFormat(
      "hello for job %d shard %d has a wrong mac (not the job's data-plane secret, or a hello "
      "recorded on another connection)",
      Get<uint64_t>(in, 8), Get<int32_t>(in, 16)));
}

absl::Status DecodeHello(const uint8_t in[kHelloBytes], Hello* h) {
  if (Get<uint32_t>(in, 0) != kHelloMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello: magic is 0x%08x, expected 0x%08x (\"LKPH\"): not a lockstep ps client",
        Get<uint32_t>(in, 0), kHelloMagic));
  }
  if (Get<uint32_t>(in, 4) != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("hello: version is ", Get<uint32_t>(in, 4),
                                                   ", expected ", kVersion));
  }
  h->job = Get<uint64_t>(in, 8);
  h->shard = Get<int32_t>(in, 16);
  h->num_workers = Get<int32_t>(in, 20);
  h->shard_len = Get<int64_t>(in, 24);
  absl::StatusOr<WireFormat> wire = WireFormatFromCode(Get<uint32_t>(in, 32));
  if (!wire.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello: wire format: ", wire.status().message()));
  }
  h->wire = *wire;
  return absl::OkStatus();
}

void EncodeHelloReply(int32_t code, int64_t len, uint8_t out[kHelloReplyBytes]) {
  std::memset(out, 0, kHelloReplyBytes);
  Put<uint32_t>(out, 0, kHelloReplyMagic);
  Put<int32_t>(out, 4, code);
  Put<int64_t>(out, 8, len);
}

namespace {
// The reply's mac: over its fields and the hello's signed bytes.
dataauth::Mac ReplyMac(const uint8_t reply[kHelloReplyBytes], const uint8_t hello[kHelloBytes],
                       absl::string_view secret, const dataauth::Nonce& challenge) {
  uint8_t m[kHelloReplyFieldBytes + kHelloSignedBytes];
  std::memcpy(m, reply, kHelloReplyFieldBytes);
  std::memcpy(m + kHelloReplyFieldBytes, hello, kHelloSignedBytes);
  return dataauth::HelloMac(secret, kReplyDomain, m, sizeof(m), challenge);
}
}  // namespace

void SignHelloReply(const uint8_t hello[kHelloBytes], absl::string_view secret,
                    const dataauth::Nonce& challenge, uint8_t out[kHelloReplyBytes]) {
  const dataauth::Mac mac = ReplyMac(out, hello, secret, challenge);
  std::memcpy(out + kHelloReplyFieldBytes, mac.data(), mac.size());
}

absl::Status VerifyHelloReply(const uint8_t reply[kHelloReplyBytes],
                              const uint8_t hello[kHelloBytes], absl::string_view secret,
                              const dataauth::Nonce& challenge) {
  const dataauth::Mac want = ReplyMac(reply, hello, secret, challenge);
  if (dataauth::MacEqual(want.data(), reply + kHelloReplyFieldBytes, want.size())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrFormat(
      "its hello reply for job %d shard %d has a wrong mac: it does not hold the job's "
      "data-plane secret (a stranger at the shard's data address, or a reply recorded on "
      "another connection)",
      Get<uint64_t>(hello, 8), Get<int32_t>(hello, 16)));
}

absl::Status DecodeHelloReply(const uint8_t in[kHelloReplyBytes], int32_t* code, int64_t* len) {
  if (Get<uint32_t>(in, 0) != kHelloReplyMagic) {
    return absl::DataLossError(absl::StrFormat(
        "hello reply: magic is 0x%08x, expected 0x%08x (\"LKPR\"): not a lockstep ps data port",
        Get<uint32_t>(in, 0), kHelloReplyMagic));
  }
  *code = Get<int32_t>(in, 4);
  *len = Get<int64_t>(in, 8);
  if (*len < 0 || *len > kMaxErrorBytes) {
    return absl::DataLossError(absl::StrCat("hello reply: text length ", *len,
                                            " outside [0, ", kMaxErrorBytes, "]"));
  }
  return absl::OkStatus();
}

void EncodeFrame(const Frame& f, uint8_t out[kFrameBytes]) {
  Put<uint32_t>(out, 0, kFrameMagic);
  Put<uint32_t>(out, 4, f.kind);
  Put<uint64_t>(out, 8, f.job);
  Put<int64_t>(out, 16, f.step);
  Put<int32_t>(out, 24, f.worker);
  Put<int32_t>(out, 28, f.chunk);
  Put<int64_t>(out, 32, f.count);
  Put<int64_t>(out, 40, f.len);
  Put<int64_t>(out, 48, f.wait_us);
}

absl::Status DecodeFrame(const uint8_t in[kFrameBytes], Frame* f) {
  if (Get<uint32_t>(in, 0) != kFrameMagic) {
    return absl::DataLossError(absl::StrFormat("frame: magic is 0x%08x, expected 0x%08x (\"LKPF\")",
                                               Get<uint32_t>(in, 0), kFrameMagic));
  }
  f->kind = Get<uint32_t>(in, 4);
  f->job = Get<uint64_t>(in, 8);
  f->step = Get<int64_t>(in, 16);
  f->worker = Get<int32_t>(in, 24);
  f->chunk = Get<int32_t>(in, 28);
  f->count = Get<int64_t>(in, 32);
  f->len = Get<int64_t>(in, 40);
  f->wait_us = Get<int64_t>(in, 48);
  if (f->len < 0) {
    return absl::DataLossError(absl::StrCat("frame: payload length ", f->len, " is negative"));
  }
  return absl::OkStatus();
}

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

absl::StatusOr<int> Listen(const std::string& host, int port, int* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = absl::StrCat(port);
  const std::string bare = Unbracketed(host);
  const int gai = getaddrinfo(bare.empty() ? nullptr : bare.c_str(), port_text.c_str(), &hints,
                              &res);
  if (gai != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot resolve listen host '%s': %s", host, gai_strerror(gai)));
  }
  int fd = -1;
  std::string err = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      err = Errno("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
    err = Errno("bind/listen");
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrFormat("cannot listen on %s:%d: %s", host, port, err));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

absl::StatusOr<int> Connect(const std::string& address, absl::Time deadline) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": expected HOST:PORT"));
  }
  const std::string host = Unbracketed(address.substr(0, colon));
  // Bounded by `deadline` (common/net/resolve.h; getaddrinfo is not).
  absl::StatusOr<AddrInfoList> resolved = Resolve(host, absl::StrCat(port), deadline);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(address, ": ", resolved.status().message()));
  }
  addrinfo* res = resolved->get();
  std::string err = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      err = Errno("socket");
      continue;
    }
    absl::Status s;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        s = absl::UnavailableError(Errno("connect"));
      } else {
        s = WaitFd(fd, POLLOUT, deadline);
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (s.ok() && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0)) {
          errno = soerr;
          s = absl::UnavailableError(Errno("connect"));
        }
      }
    }
    if (!s.ok()) {
      err = std::string(s.message());
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to ", address, ": ", err));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::Status WaitFd(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, PollTimeoutMs(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(Errno("poll"));
    }
    if (n > 0) return absl::OkStatus();
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("deadline passed");
  }
}

absl::Status ReadFully(const dataconn::Conn& c, void* p, size_t n, absl::Time deadline,
                       bool* clean_eof, ProgressMark* progress, bool* nothing) {
  if (clean_eof != nullptr) *clean_eof = false;
  if (nothing != nullptr) *nothing = false;
  uint8_t* b = static_cast<uint8_t*>(p);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = dataconn::Recv(c, b + got, n - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
      TouchProgress(progress);
      continue;
    }
    if (r == 0) {
      if (got == 0 && clean_eof != nullptr) *clean_eof = true;
      if (got == 0 && nothing != nullptr) *nothing = true;
      return absl::UnavailableError("end of stream (the other side closed the connection)");
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET && got == 0 && nothing != nullptr) *nothing = true;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return absl::UnavailableError(Errno("recv"));
    absl::Status s = WaitFd(c.fd, POLLIN, deadline);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WriteFully(const dataconn::Conn& c, iovec* iov, int iovcnt, absl::Time deadline,
                        ProgressMark* progress) {
  while (iovcnt > 0) {
    if (iov->iov_len == 0) {
      ++iov;
      --iovcnt;
      continue;
    }
    const ssize_t w = dataconn::Sendv(c, iov, iovcnt);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return absl::UnavailableError(Errno("send"));
      absl::Status s = WaitFd(c.fd, POLLOUT, deadline);
      if (!s.ok()) return s;
      continue;
    }
    if (w > 0) TouchProgress(progress);
    size_t left = static_cast<size_t>(w);
    while (left > 0 && iovcnt > 0) {
      const size_t take = std::min(left, iov->iov_len);
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + take;
      iov->iov_len -= take;
      left -= take;
      if (iov->iov_len == 0) {
        ++iov;
        --iovcnt;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Discard(const dataconn::Conn& c, int64_t n, absl::Time deadline) {
  uint8_t buf[4096];
  while (n > 0) {
    const size_t take = static_cast<size_t>(std::min<int64_t>(n, sizeof(buf)));
    absl::Status s = ReadFully(c, buf, take, deadline);
    if (!s.ok()) return s;
    n -= static_cast<int64_t>(take);
  }
  return absl::OkStatus();
}

}  // namespace psnet
}  // namespace lockstep
