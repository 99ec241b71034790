#include "worker/net/shm_transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/net/data_auth.h"
#include "worker/net/shm_link.h"
#include "worker/net/tcp_wire.h"

namespace lockstep {

using tcpwire::DecodeFrame;
using tcpwire::EncodeFrame;
using tcpwire::Frame;
using tcpwire::kHeaderBytes;

namespace {
constexpr absl::Duration kStaleSegmentAge = absl::Minutes(10);
}  // namespace

// The send side of one directed link. Send writes into the ring directly
// while nothing is backlogged; otherwise (or for what does not fit) it
// appends a copy to `backlog`, which the writer thread moves into the ring
// as the reader frees space. Only the writer thread pops the backlog.
struct ShmTransport::OutLink {
  absl::Mutex mu;
  absl::CondVar cv;  // backlog grew or shrank, stop
  std::unique_ptr<ShmLink> link ABSL_GUARDED_BY(mu);
  std::deque<std::vector<uint8_t>> backlog ABSL_GUARDED_BY(mu);
  size_t front_done ABSL_GUARDED_BY(mu) = 0;  // bytes of backlog.front() written
  int64_t backlog_bytes ABSL_GUARDED_BY(mu) = 0;
  absl::Status broken ABSL_GUARDED_BY(mu);  // the ring failed: every Send fails
  bool stop ABSL_GUARDED_BY(mu) = false;
  absl::Time drain_deadline ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  bool writer_started ABSL_GUARDED_BY(mu) = false;
  std::thread writer;  // started under mu, joined by Shutdown (without mu)
};

// The receive side of one directed link; `mu` serializes Recvs from the
// peer (it is held while a Recv waits: nothing else needs it but
// Shutdown's final close, after Cancel woke the waiter).
struct ShmTransport::InLink {
  absl::Mutex mu;
  std::unique_ptr<ShmLink> link ABSL_GUARDED_BY(mu);
  std::atomic<ShmLink*> active{nullptr};  // for Shutdown's Cancel
  int64_t skip ABSL_GUARDED_BY(mu) = 0;   // payload bytes of an aborted Recv left to drop
  absl::Status broken ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(
    uint64_t group, int rank, std::vector<std::string> peer_names, ShmTransportOptions options) {
  const int world = static_cast<int>(peer_names.size());
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shm transport: rank %d out of range for world size %d", rank, world));
  }
  if (options.secret.size() != dataauth::kSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shm transport: the data-plane secret has %d bytes; expected %d",
                        options.secret.size(), dataauth::kSecretBytes));
  }
  const int64_t cap = options.ring_bytes;
  if (!ShmLink::ValidCapacity(cap)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm transport: ring_bytes %d is not a power of two in [%d, %d]", cap,
        ShmLink::kMinCapacity, ShmLink::kMaxCapacity));
  }
  // Names left by links whose reader never came (shm_link.h).
  ShmLink::RemoveStaleSegments(kStaleSegmentAge);
  return std::unique_ptr<ShmTransport>(
      new ShmTransport(group, rank, std::move(peer_names), std::move(options)));
}

ShmTransport::ShmTransport(uint64_t group, int rank, std::vector<std::string> names,
                           ShmTransportOptions options)
    : group_(group), rank_(rank), names_(std::move(names)), options_(std::move(options)) {
  for (size_t i = 0; i < names_.size(); ++i) {
    out_.push_back(std::make_unique<OutLink>());
    in_.push_back(std::make_unique<InLink>());
  }
}

ShmTransport::~ShmTransport() { Shutdown(); }

std::string ShmTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= world_size()) return absl::StrFormat("peer rank %d", peer);
  return absl::StrFormat("peer rank %d (%s)", peer, names_[peer]);
}

absl::Status ShmTransport::Named(int peer, const absl::Status& s) const {
  return absl::Status(s.code(), absl::StrCat(PeerName(peer), ": ", s.message()));
}

absl::StatusOr<std::unique_ptr<ShmLink>> ShmTransport::OpenLink(int from, int to,
                                                                 ShmLink::Side side,
                                                                 absl::Time deadline) {
  const ShmLinkId id{group_, static_cast<uint32_t>(from), static_cast<uint32_t>(to),
                     static_cast<uint32_t>(world_size())};
  return ShmLink::Open(ShmLink::SegmentName(options_.secret, id), side, id, options_.ring_bytes,
                       deadline, &shut_down_, options_.progress);
}

absl::Status ShmTransport::Send(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                                absl::Time deadline) {
  if (absl::Status s = CheckPeer(rank_, world_size(), to, "send to"); !s.ok()) return s;
  OutLink& o = *out_[to];
  absl::MutexLock l(&o.mu);
  if (shut_down_.load()) return Named(to, absl::CancelledError("transport shut down"));
  if (!o.broken.ok()) return Named(to, o.broken);
  if (o.link == nullptr) {
    auto link = OpenLink(rank_, to, ShmLink::Side::kWriter, deadline);
    if (!link.ok()) return Named(to, link.status());
    o.link = *std::move(link);
  }
  // Flow control: wait (bounded) while the backlog is over its limit; one
  // message is always accepted.
  while (o.backlog_bytes > options_.max_queued_bytes && o.broken.ok() && !shut_down_.load()) {
    if (o.cv.WaitWithDeadline(&o.mu, deadline)) {
      if (o.backlog_bytes <= options_.max_queued_bytes) break;
      return Named(to, absl::DeadlineExceededError(absl::StrFormat(
                           "rank %d: %d bytes still queued for it at the deadline (limit %d)",
                           rank_, o.backlog_bytes, options_.max_queued_bytes)));
    }
  }
  if (shut_down_.load()) return Named(to, absl::CancelledError("transport shut down"));
  if (!o.broken.ok()) return Named(to, o.broken);
  uint8_t hdr[kHeaderBytes];
  EncodeFrame(key, static_cast<int64_t>(data.size()), hdr);
  const absl::Span<const uint8_t> head(hdr, kHeaderBytes);
  size_t written = 0;
  if (o.backlog.empty()) {
    absl::StatusOr<size_t> n = o.link->Write(head, data);
    if (!n.ok()) {
      o.broken = n.status();
      return Named(to, n.status());
    }
    written = *n;
  }
  const size_t total = kHeaderBytes + data.size();
  if (written < total) {
    // The rest goes through the backlog (a copy: the caller may reuse
    // `data` when Send returns).
    std::vector<uint8_t> rest(total - written);
    size_t at = 0;
    if (written < kHeaderBytes) {
      std::memcpy(rest.data(), hdr + written, kHeaderBytes - written);
      at = kHeaderBytes - written;
    }
    const size_t data_from = written > kHeaderBytes ? written - kHeaderBytes : 0;
    if (data.size() > data_from) {
      std::memcpy(rest.data() + at, data.data() + data_from, data.size() - data_from);
    }
    o.backlog_bytes += static_cast<int64_t>(rest.size());
    o.backlog.push_back(std::move(rest));
    backlogged_.fetch_add(1);
    if (!o.writer_started) {
      o.writer_started = true;
      o.writer = std::thread([this, to] { WriterLoop(to); });
    }
    o.cv.SignalAll();
  }
  sent_.fetch_add(1);
  return absl::OkStatus();
}

// Drops what is still queued for the link (it can no longer be written)
// and wakes Sends waiting in flow control. Called with o.mu held.
void ShmTransport::DropBacklogLocked(OutLink& o) {
  o.backlog.clear();
  o.backlog_bytes = 0;
  o.front_done = 0;
  o.cv.SignalAll();
}

void ShmTransport::WriterLoop(int to) {
  OutLink& o = *out_[to];
  for (;;) {
    ShmLink* link = nullptr;
    absl::Time wait_until;
    {
      absl::MutexLock l(&o.mu);
      while (o.backlog.empty() && !o.stop) o.cv.Wait(&o.mu);
      if (o.backlog.empty()) return;  // stopped and drained
      const absl::Time now = absl::Now();
      if (now >= o.drain_deadline) {
        DropBacklogLocked(o);  // Shutdown's close_timeout: the rest is lost
        return;
      }
      link = o.link.get();
      while (!o.backlog.empty()) {
        std::vector<uint8_t>& f = o.backlog.front();
        absl::StatusOr<size_t> n =
            link->Write(absl::MakeConstSpan(f).subspan(o.front_done));
        if (!n.ok()) {
          o.broken = n.status();
          DropBacklogLocked(o);
          return;
        }
        o.front_done += *n;
        o.backlog_bytes -= static_cast<int64_t>(*n);
        if (o.front_done < f.size()) break;  // the ring is full
        o.backlog.pop_front();
        o.front_done = 0;
      }
      o.cv.SignalAll();
      if (o.backlog.empty()) continue;
      wait_until = std::min(o.drain_deadline, now + absl::Milliseconds(100));
    }
    // Outside the lock: Sends may queue meanwhile. The link lives until
    // Shutdown joins this thread.
    absl::Status s = link->WaitForSpace(wait_until);
    if (!s.ok() && s.code() != absl::StatusCode::kDeadlineExceeded) {
      absl::MutexLock l(&o.mu);
      o.broken = s;
      DropBacklogLocked(o);
      return;
    }
  }
}

absl::Status ShmTransport::Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                                absl::Time deadline) {
  if (absl::Status s = CheckPeer(rank_, world_size(), from, "receive from"); !s.ok()) return s;
  InLink& in = *in_[from];
  absl::MutexLock l(&in.mu);
  return RecvLocked(from, in, key, out, deadline);
}

absl::Status ShmTransport::RecvLocked(int from, InLink& in, const MessageKey& key,
                                      absl::Span<uint8_t> out, absl::Time deadline) {
  int skipped = 0;
  auto waiting = [&](const absl::Status& why) {
    std::string extra;
    if (skipped > 0) extra = absl::StrFormat("; %d stale message(s) discarded", skipped);
    if (in.link != nullptr && !in.link->peer_attached()) {
      absl::StrAppend(&extra, "; it never attached to /dev/shm", in.link->name(),
                      " (is it on this host, with the same /dev/shm?)");
    }
    const char* what = why.code() == absl::StatusCode::kDeadlineExceeded
                           ? "timed out waiting for"
                           : "failed while waiting for";
    return Named(from, absl::Status(why.code(),
                                    absl::StrFormat("rank %d: %s message %s (%d bytes) from "
                                                    "peer %d: %s%s",
                                                    rank_, what, KeyToString(key), out.size(),
                                                    from, why.message(), extra)));
  };
  if (shut_down_.load()) return waiting(absl::CancelledError("transport shut down"));
  if (!in.broken.ok()) return Named(from, in.broken);
  if (in.link == nullptr) {
    auto link = OpenLink(from, rank_, ShmLink::Side::kReader, deadline);
    if (!link.ok()) return Named(from, link.status());
    in.link = *std::move(link);
    in.active.store(in.link.get());
    if (shut_down_.load()) return waiting(absl::CancelledError("transport shut down"));
  }
  ShmLink& link = *in.link;
  // Drops `in.skip` bytes as they arrive.
  auto skip = [&]() -> absl::Status {
    while (in.skip > 0) {
      absl::Status s = link.WaitForData(1, deadline, options_.recv_spin);
      if (!s.ok()) return s;
      absl::StatusOr<size_t> avail = link.Available();
      if (!avail.ok()) return avail.status();
      const size_t n = static_cast<size_t>(std::min<int64_t>(in.skip, *avail));
      link.Consume(n);
      in.skip -= static_cast<int64_t>(n);
    }
    return absl::OkStatus();
  };
  for (;;) {
    absl::Status s = skip();
    if (s.ok()) s = link.WaitForData(kHeaderBytes, deadline, options_.recv_spin);
    if (!s.ok()) {
      if (s.code() == absl::StatusCode::kDataLoss) in.broken = s;
      return waiting(s);
    }
    uint8_t hdr[kHeaderBytes];
    link.Peek(0, hdr, kHeaderBytes);
    Frame f;
    if (!DecodeFrame(hdr, &f)) {
      in.broken = absl::DataLossError(absl::StrFormat(
          "rank %d: corrupt frame header from peer %d (magic 0x%08x) on /dev/shm%s", rank_,
          from, tcpwire::Get<uint32_t>(hdr, 0), link.name()));
      return Named(from, in.broken);
    }
    if (IsStale(f.key, key)) {
      link.Consume(kHeaderBytes);
      in.skip = f.len;
      ++skipped;
      stale_.fetch_add(1);
      continue;
    }
    if (absl::Status m = MismatchError(rank_, from, f.key, f.len, key,
                                       static_cast<int64_t>(out.size()));
        !m.ok()) {
      return Named(from, m);  // not consumed
    }
    link.Consume(kHeaderBytes);
    size_t got = 0;
    while (got < out.size()) {
      absl::StatusOr<size_t> avail = link.Available();
      if (!avail.ok()) {
        in.broken = avail.status();
        return Named(from, in.broken);
      }
      if (*avail == 0) {
        s = link.WaitForData(1, deadline, options_.recv_spin);
        if (!s.ok()) {
          in.skip = static_cast<int64_t>(out.size() - got);
          return waiting(absl::Status(
              s.code(), absl::StrFormat("%s after %d of its %d bytes (the rest will be "
                                        "discarded)",
                                        s.message(), got, out.size())));
        }
        continue;
      }
      const size_t n = std::min(*avail, out.size() - got);
      link.Peek(0, out.data() + got, n);
      link.Consume(n);
      got += n;
    }
    return absl::OkStatus();
  }
}

void ShmTransport::Shutdown() {
  if (shut_down_.exchange(true)) return;
  for (auto& in : in_) {
    if (ShmLink* link = in->active.load()) link->Cancel();
  }
  // Close the receive side first: a peer draining its backlog to us then
  // sees the close at once instead of waiting its close_timeout.
  for (auto& in : in_) {
    absl::MutexLock l(&in->mu);  // a cancelled Recv returns promptly
    in->active.store(nullptr);
    in->link.reset();
  }
  const absl::Time drain_deadline = absl::Now() + options_.close_timeout;
  for (auto& o : out_) {
    absl::MutexLock l(&o->mu);
    o->stop = true;
    o->drain_deadline = drain_deadline;
    o->cv.SignalAll();
  }
  for (auto& o : out_) {
    if (o->writer.joinable()) o->writer.join();  // no lock held
    absl::MutexLock l(&o->mu);
    o->link.reset();  // the peer sees the close after what the ring holds
  }
}

}  // namespace lockstep
