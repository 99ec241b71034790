#include "common/psnet/ps_tcp_client.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {

using psnet::Frame;
using psnet::Kind;

absl::StatusCode CodeFromWire(int64_t code) {
  if (code <= 0 || code > static_cast<int64_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCode::kUnknown;
  }
  return static_cast<absl::StatusCode>(code);
}

}  // namespace

PsTcpClient::PsTcpClient(std::string address, int shard, int num_workers, int64_t shard_len,
                         PsTcpClientOptions options)
    : address_(std::move(address)),
      shard_(shard),
      num_workers_(num_workers),
      shard_len_(shard_len),
      options_(options) {}

PsTcpClient::~PsTcpClient() {
  absl::MutexLock l(&mu_);
  for (auto& [fd, io] : live_) dataconn::Close(io);
  live_.clear();
  idle_.clear();
  rounds_.clear();
}

int64_t PsTcpClient::dials() const {
  absl::MutexLock l(&mu_);
  return dials_;
}

absl::Status PsTcpClient::Named(const absl::Status& s) const {
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat("ps shard ", shard_, " (", address_, ", tcp): ", s.message()));
}

absl::Status PsTcpClient::CancelledStatus() const {
  return Named(absl::CancelledError("cancelled (the job was stopped)"));
}

void PsTcpClient::Cancel() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
  // Only Release closes an fd, after removing it from live_ under mu_: every
  // fd here is open, so this never touches a reused descriptor.
  for (const auto& [fd, io] : live_) shutdown(fd, SHUT_RDWR);
}

void PsTcpClient::Release(Conn c, bool reusable) {
  if (c.fd < 0) return;
  {
    absl::MutexLock l(&mu_);
    if (reusable && !cancelled_ && static_cast<int>(idle_.size()) < options_.max_idle_connections) {
      c.idle_since = absl::Now();
      idle_.push_back(c);
      return;
    }
    live_.erase(c.fd);
  }
  dataconn::Close(c.io);
}

absl::StatusOr<PsTcpClient::Conn> PsTcpClient::Acquire(uint64_t job, WireFormat wire,
                                                       absl::Time deadline) {
  std::vector<dataconn::Conn> stale;
  Conn found;
  {
    absl::MutexLock l(&mu_);
    if (cancelled_) return CancelledStatus();
    const absl::Time now = absl::Now();
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (now - it->idle_since > options_.max_idle) {
        stale.push_back(it->io);
        live_.erase(it->fd);
        it = idle_.erase(it);
      } else if (found.fd < 0 && it->job == job && it->wire == wire) {
        found = *it;
        it = idle_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (dataconn::Conn& io : stale) dataconn::Close(io);
  if (found.fd >= 0) return found;

  const absl::Time until = std::min(deadline, absl::Now() + options_.connect_timeout);
  absl::StatusOr<int> fd = psnet::Connect(address_, until);
  if (!fd.ok()) return Named(fd.status());
  Conn c;
  c.fd = *fd;
  c.io = dataconn::Plain(*fd);
  c.job = job;
  c.wire = wire;
  if (wire != WireFormat::kFloat32) c.scratch = std::make_shared<std::vector<uint16_t>>();
  if (options_.tls != nullptr) {
    absl::StatusOr<dataconn::Conn> tls = dataconn::StartTls(*options_.tls, *fd, /*server=*/false);
    if (!tls.ok()) {
      close(*fd);
      return Named(tls.status());
    }
    c.io = *tls;
  }
  {
    absl::MutexLock l(&mu_);
    if (cancelled_) {
      dataconn::Close(c.io);
      return CancelledStatus();
    }
    live_[c.fd] = c.io;
    ++dials_;
  }
  if (options_.tls != nullptr) {
    // Shut down by Cancel like any other wait (the fd is in live_).
    absl::Status hs = dataconn::Handshake(*options_.tls, c.io, -1, until);
    if (!hs.ok()) {
      Release(c, false);
      {
        absl::MutexLock l(&mu_);
        if (cancelled_) return CancelledStatus();
      }
      return Named(absl::UnavailableError(hs.message()));
    }
  }
  psnet::Hello h;
  h.job = job;
  h.shard = shard_;
  h.num_workers = num_workers_;
  h.shard_len = shard_len_;
  h.wire = wire;
  // The server's challenge, then our hello answering it under the job's
  // secret.
  uint8_t cb[psnet::kChallengeBytes];
  dataauth::Nonce nonce{};
  absl::Status s = psnet::ReadFully(c.io, cb, sizeof(cb), until);
  if (s.ok()) s = psnet::DecodeChallenge(cb, &nonce);
  uint8_t hb[psnet::kHelloBytes];
  psnet::EncodeHello(h, options_.secret, nonce, dataauth::RandomNonce(), hb);
  iovec iov[1] = {{hb, sizeof(hb)}};
  if (s.ok()) s = psnet::WriteFully(c.io, iov, 1, until);
  uint8_t rb[psnet::kHelloReplyBytes];
  if (s.ok()) s = psnet::ReadFully(c.io, rb, sizeof(rb), until);
  int32_t code = 0;
  int64_t len = 0;
  if (s.ok()) s = psnet::DecodeHelloReply(rb, &code, &len);
  std::string text(static_cast<size_t>(len), '\0');
  if (s.ok() && len > 0) s = psnet::ReadFully(c.io, text.data(), text.size(), until);
  if (!s.ok()) {
    Release(c, false);
    {
      absl::MutexLock l(&mu_);
      if (cancelled_) return CancelledStatus();
    }
    return Named(absl::Status(s.code() == absl::StatusCode::kDeadlineExceeded
                                  ? s.code()
                                  : absl::StatusCode::kUnavailable,
                              absl::StrCat("hello: ", s.message())));
  }
  if (code != 0) {
    Release(c, false);
    return Named(absl::Status(CodeFromWire(code),
                              absl::StrCat("the server refused the connection: ", text)));
  }
  // Accepted: before any frame, the server must prove it holds the secret.
  if (absl::Status proof = psnet::VerifyHelloReply(rb, hb, options_.secret, nonce);
      !proof.ok()) {
    Release(c, false);
    return Named(proof);
  }
  return c;
}

absl::Status PsTcpClient::SendRequest(const Conn& c, Kind kind, uint64_t job, int64_t step,
                                      int worker, absl::Span<const float> payload, int64_t count,
                                      absl::Time deadline) {
  Frame f;
  f.kind = static_cast<uint32_t>(kind);
  f.job = job;
  f.step = step;
  f.worker = worker;
  f.count = count;
  const int64_t n = static_cast<int64_t>(payload.size());
  f.len = n * WireBytesPerFloat(c.wire);
  f.wait_us = std::max<int64_t>(0, absl::ToInt64Microseconds(deadline - absl::Now()));
  uint8_t h[psnet::kFrameBytes];
  psnet::EncodeFrame(f, h);
  const void* bytes = payload.data();
  if (c.wire != WireFormat::kFloat32 && n > 0) {
    c.scratch->resize(static_cast<size_t>(n));  // its capacity stays: no allocation per step
    Encode16(c.wire, payload.data(), n, c.scratch->data());
    bytes = c.scratch->data();
  }
  iovec iov[2] = {{h, sizeof(h)}, {const_cast<void*>(bytes), static_cast<size_t>(f.len)}};
  // The server reads every request as it comes: writing can only stall on a
  // dead server, which the grace after the deadline bounds.
  return psnet::WriteFully(c.io, iov, payload.empty() ? 1 : 2, deadline + options_.reply_grace,
                           options_.progress);
}

absl::Status PsTcpClient::ReadAnswer(const Conn& c, uint64_t job, int64_t step, int worker,
                                     bool expect_result, absl::Span<float> out, int64_t* count,
                                     absl::Time deadline, bool* stream_ok) {
  *stream_ok = false;
  const absl::Time until = deadline + options_.reply_grace;
  uint8_t h[psnet::kFrameBytes];
  absl::Status s = psnet::ReadFully(c.io, h, sizeof(h), until, nullptr, options_.progress);
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrCat("no answer for step ", step, " (worker ", worker,
                       ") by the deadline (plus ", absl::FormatDuration(options_.reply_grace),
                       " grace)"));
    }
    return s;
  }
  Frame f;
  if (s = psnet::DecodeFrame(h, &f); !s.ok()) return s;
  if (f.kind == static_cast<uint32_t>(Kind::kError)) {
    if (f.len > psnet::kMaxErrorBytes) {
      return absl::DataLossError(absl::StrCat("ERROR frame with ", f.len, " bytes of text, max ",
                                              psnet::kMaxErrorBytes));
    }
    std::string text(static_cast<size_t>(f.len), '\0');
    if (s = psnet::ReadFully(c.io, text.data(), text.size(), until); !s.ok()) return s;
    return absl::Status(CodeFromWire(f.count), text);  // not reused: the server may close it
  }
  const Kind want = expect_result ? Kind::kResult : Kind::kAck;
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t want_len = expect_result ? n * WireBytesPerFloat(c.wire) : int64_t{0};
  if (f.kind != static_cast<uint32_t>(want) || f.job != job || f.step != step ||
      f.worker != worker || f.len != want_len) {
    return absl::DataLossError(absl::StrCat(
        "expected ", psnet::KindName(static_cast<uint32_t>(want)), " for job ", job, " step ",
        step, " worker ", worker, " with ", want_len, " bytes, got ", psnet::KindName(f.kind),
        " for job ", f.job, " step ", f.step, " worker ", f.worker, " with ", f.len, " bytes"));
  }
  if (want_len > 0 && c.wire == WireFormat::kFloat32) {
    if (s = psnet::ReadFully(c.io, out.data(), static_cast<size_t>(want_len), until, nullptr,
                             options_.progress);
        !s.ok()) {
      return s;
    }
  } else if (want_len > 0) {
    c.scratch->resize(static_cast<size_t>(n));
    if (s = psnet::ReadFully(c.io, c.scratch->data(), static_cast<size_t>(want_len), until,
                             nullptr, options_.progress);
        !s.ok()) {
      return s;
    }
    Decode16(c.wire, c.scratch->data(), n, out.data());
  }
  if (count != nullptr) *count = f.count;
  *stream_ok = true;
  return absl::OkStatus();
}

absl::Status PsTcpClient::Push(uint64_t job, int64_t step, int worker,
                               absl::Span<const float> shard_grad_sum, int64_t count,
                               absl::Time deadline) {
  absl::StatusOr<Conn> c = Acquire(job, WireFormat::kFloat32, deadline);
  if (!c.ok()) return c.status();
  absl::Status s =
      SendRequest(*c, Kind::kPush, job, step, worker, shard_grad_sum, count, deadline);
  bool stream_ok = false;
  if (s.ok()) s = ReadAnswer(*c, job, step, worker, false, {}, nullptr, deadline, &stream_ok);
  Release(*c, stream_ok);
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    if (cancelled_) return CancelledStatus();
  }
  return Named(s);
}

absl::Status PsTcpClient::Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                               int64_t* count, absl::Time deadline) {
  if (count == nullptr) return Named(absl::InvalidArgumentError("count is null"));
  absl::StatusOr<Conn> c = Acquire(job, WireFormat::kFloat32, deadline);
  if (!c.ok()) return c.status();
  absl::Status s = SendRequest(*c, Kind::kPull, job, step, worker, {}, 0, deadline);
  bool stream_ok = false;
  if (s.ok()) s = ReadAnswer(*c, job, step, worker, true, out, count, deadline, &stream_ok);
  Release(*c, stream_ok);
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    if (cancelled_) return CancelledStatus();
  }
  return Named(s);
}

absl::Status PsTcpClient::StartRound(uint64_t job, int64_t step, int worker,
                                     absl::Span<const float> shard_grad_sum, int64_t count,
                                     absl::Time deadline, WireFormat wire) {
  // A round of this worker given up half way (its FinishRound never came)
  // cannot be answered any more: drop its connection.
  for (;;) {
    Conn dropped;
    {
      absl::MutexLock l(&mu_);
      for (auto it = rounds_.begin(); it != rounds_.end(); ++it) {
        if (it->job == job && it->worker == worker) {
          dropped = it->conn;
          rounds_.erase(it);
          break;
        }
      }
    }
    if (dropped.fd < 0) break;
    Release(dropped, false);
  }
  absl::StatusOr<Conn> c = Acquire(job, wire, deadline);
  if (!c.ok()) return c.status();
  absl::Status s =
      SendRequest(*c, Kind::kRound, job, step, worker, shard_grad_sum, count, deadline);
  if (!s.ok()) {
    Release(*c, false);
    absl::MutexLock l(&mu_);
    if (cancelled_) return CancelledStatus();
    return Named(s);
  }
  absl::MutexLock l(&mu_);
  rounds_.push_back(Round{job, step, worker, *c});
  return absl::OkStatus();
}

absl::Status PsTcpClient::FinishRound(uint64_t job, int64_t step, int worker,
                                      absl::Span<float> out, int64_t* count,
                                      absl::Time deadline, WireFormat wire) {
  if (count == nullptr) return Named(absl::InvalidArgumentError("count is null"));
  Conn c;
  {
    absl::MutexLock l(&mu_);
    auto it = std::find_if(rounds_.begin(), rounds_.end(), [&](const Round& r) {
      return r.job == job && r.step == step && r.worker == worker && r.conn.wire == wire;
    });
    if (it == rounds_.end()) {
      return Named(absl::FailedPreconditionError(
          absl::StrCat("FinishRound for job ", job, " step ", step, " worker ", worker,
                       " (wire ", WireFormatName(wire), ") without a started round")));
    }
    c = it->conn;
    rounds_.erase(it);
  }
  bool stream_ok = false;
  absl::Status s = ReadAnswer(c, job, step, worker, true, out, count, deadline, &stream_ok);
  Release(c, stream_ok);
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    if (cancelled_) return CancelledStatus();
  }
  return Named(s);
}

}  // namespace lockstep
