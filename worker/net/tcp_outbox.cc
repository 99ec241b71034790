// The send side of the raw-TCP peer transport: see tcp_outbox.h.
#include "worker/net/tcp_outbox.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"
#include "worker/net/tcp_io.h"

namespace lockstep {

TcpSocket::~TcpSocket() { dataconn::Close(conn); }

using tcpio::Errno;
using tcpio::TimeLeft;
using tcpio::WaitFd;

TcpOutbox::TcpOutbox(int rank, int world, int writer_wake_fd,
                     int shutdown_wake_fd, absl::Duration close_timeout,
                     ProgressMark* progress)
    : rank_(rank), writer_wake_fd_(writer_wake_fd),
      shutdown_wake_fd_(shutdown_wake_fd), close_timeout_(close_timeout),
      progress_(progress) {
  for (int i = 0; i < world; ++i) {
    links_.push_back(std::make_unique<TcpOutLink>());
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

TcpOutbox::~TcpOutbox() {
  BeginShutdown();
  StopWriterAndClose();
  close(writer_wake_fd_);
}

void TcpOutbox::SetPollHookForTest(PollHook hook) {
  ABSL_RAW_CHECK(hook != nullptr, "TcpOutbox::SetPollHookForTest: empty hook");
  ABSL_RAW_CHECK(!has_poll_hook_.load(),
                 "TcpOutbox::SetPollHookForTest called twice");
  poll_hook_ = std::move(hook);
  has_poll_hook_.store(true, std::memory_order_release);
}

void TcpOutbox::WakeWriter() {
  const uint64_t one = 1;
  (void)!write(writer_wake_fd_, &one, sizeof(one));
}

void TcpOutbox::BeginShutdown() {
  shutting_down_.store(true);
  // Wake Sends waiting for room (their condition reads shutting_down()).
  for (auto& link : links_) {
    absl::MutexLock l(&link->mu);
  }
  WakeWriter();
}

void TcpOutbox::BacklogLocked(TcpOutLink& link, const uint8_t* hdr,
                              size_t hdr_bytes, size_t done,
                              absl::Span<const uint8_t> data, bool borrow) {
  backlogged_.fetch_add(1);
  TcpPendingSend p;
  if (!link.spare.empty()) {
    p.owned = std::move(link.spare.back());
    link.spare.pop_back();
  }
  p.owned.clear();
  const size_t data_done = done > hdr_bytes ? done - hdr_bytes : 0;
  if (done < hdr_bytes) p.owned.assign(hdr + done, hdr + hdr_bytes);
  if (borrow && data.size() > data_done) {
    p.ext = data.data() + data_done;
    p.ext_len = data.size() - data_done;
    ++link.borrowed;
  } else {
    p.owned.insert(p.owned.end(), data.begin() + data_done, data.end());
  }
  const bool was_empty = link.backlog.empty();
  link.backlog_bytes += static_cast<int64_t>(p.size());
  link.backlog.push_back(std::move(p));
  SyncPendingLocked(link);
  if (was_empty) WakeWriter();
}

void TcpOutbox::SyncPendingLocked(TcpOutLink& link) {
  const bool now = !link.backlog.empty();
  if (link.pending.load() == now) return;
  link.pending.store(now);
  pending_links_.fetch_add(now ? 1 : -1);
}

bool TcpOutbox::FlushLocked(int to, TcpOutLink& link) {
  while (!link.backlog.empty() && link.fd >= 0) {
    constexpr int kMaxIov = 32;
    iovec iov[kMaxIov];
    int niov = 0;
    size_t skip = link.front_done;
    for (size_t i = 0; i < link.backlog.size() && niov + 2 <= kMaxIov; ++i) {
      TcpPendingSend* it = &link.backlog[i];
      const size_t own = it->owned.size();
      if (skip < own) {
        iov[niov++] = {it->owned.data() + skip, own - skip};
        skip = 0;
      } else {
        skip -= own;
      }
      if (it->ext_len > skip) {
        iov[niov++] = {const_cast<uint8_t*>(it->ext) + skip,
                       it->ext_len - skip};
      }
      skip = 0;
    }
    ssize_t w = dataconn::Sendv(link.sock->conn, iov, niov);
    if (w > 0) TouchProgress(progress_);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w <= 0) {
      link.broken = absl::UnavailableError(absl::StrFormat(
          "rank %d: link to peer %d broke with %d bytes queued (%s)", rank_,
          to, link.backlog_bytes, w < 0 ? std::strerror(errno) : "closed"));
      link.CloseLocked();
      for (size_t i = 0; i < link.backlog.size(); ++i) {
        TcpPendingSend& b = link.backlog[i];
        if (link.spare.size() < 4) link.spare.push_back(std::move(b.owned));
      }
      link.backlog.clear();
      link.front_done = 0;
      link.backlog_bytes = 0;
      link.borrowed = 0;
      SyncPendingLocked(link);
      return false;
    }
    link.backlog_bytes -= w;
    size_t left = static_cast<size_t>(w);
    while (left > 0) {
      TcpPendingSend& front = link.backlog.front();
      const size_t rest = front.size() - link.front_done;
      if (left < rest) {
        link.front_done += left;
        left = 0;
      } else {
        left -= rest;
        link.front_done = 0;
        if (front.ext != nullptr) --link.borrowed;
        if (link.spare.size() < 4) link.spare.push_back(std::move(front.owned));
        link.backlog.pop_front();
      }
    }
  }
  SyncPendingLocked(link);
  return true;
}

absl::Status TcpOutbox::FlushBorrowed(absl::Time deadline, int* failed_peer) {
  absl::Status result;
  auto note = [&](int to, const absl::Status& s) {
    if (result.ok()) {
      result = s;
      *failed_peer = to;
    }
  };
  for (int to = 0; to < world(); ++to) {
    TcpOutLink& link = *links_[to];
    link.mu.Lock();
    while (link.borrowed > 0 && link.fd >= 0 && FlushLocked(to, link) &&
           link.borrowed > 0) {
      // Wait for room without holding the link (the writer thread and other
      // callers may use it meanwhile).
      const std::shared_ptr<TcpSocket> sock = link.sock;  // open while polled
      link.mu.Unlock();
      const pollfd polled = {sock->fd, POLLOUT, 0};
      BeforePoll(TcpPollSite::kFlushBorrowed, absl::MakeConstSpan(&polled, 1));
      absl::Status s = WaitFd(sock->fd, POLLOUT, shutdown_wake_fd_, deadline);
      link.mu.Lock();
      if (s.ok()) continue;
      // Out of time (or shutting down): copy what is still borrowed; it is
      // still sent, by the writer thread.
      const int64_t pending_bytes = link.backlog_bytes;
      for (size_t i = 0; i < link.backlog.size(); ++i) {
        TcpPendingSend& p = link.backlog[i];
        if (p.ext == nullptr) continue;
        p.owned.insert(p.owned.end(), p.ext, p.ext + p.ext_len);
        p.ext = nullptr;
        p.ext_len = 0;
        borrows_copied_.fetch_add(1);
      }
      link.borrowed = 0;
      note(to, absl::Status(
                   s.code(),
                   absl::StrFormat("rank %d: %d bytes still queued for the "
                                   "peer when flushing sends (it is not "
                                   "reading): %s",
                                   rank_, pending_bytes, s.message())));
    }
    if (!link.broken.ok()) {
      // The link broke with our messages queued: they are lost.
      note(to, link.broken);
      link.broken = absl::OkStatus();
    }
    link.mu.Unlock();
  }
  return result;
}

void TcpOutbox::WriterLoop() {
  std::vector<pollfd> fds;
  std::vector<int> peers;
  std::vector<std::shared_ptr<TcpSocket>> socks;  // references to the polled sockets
  bool draining = false;
  absl::Time drain_until = absl::InfiniteFuture();
  for (;;) {
    fds.clear();
    peers.clear();
    socks.clear();
    fds.push_back({writer_wake_fd_, POLLIN, 0});
    for (int r = 0; r < world(); ++r) {
      TcpOutLink& link = *links_[r];
      // A Recv polling the link writes its backlog (WaitReadable).
      if (!link.pending.load()) continue;
      if (link.progressed.load() > 0 && !shutting_down()) continue;
      absl::MutexLock l(&link.mu);
      if (!link.backlog.empty() && link.fd >= 0) {
        socks.push_back(link.sock);  // open while polled
        fds.push_back({link.fd, POLLOUT, 0});
        peers.push_back(r);
      }
    }
    if (shutting_down()) {
      if (!draining) {
        draining = true;
        drain_until = absl::Now() + close_timeout_;
      }
      if (peers.empty() || absl::Now() >= drain_until) return;
    }
    int timeout_ms = -1;
    if (draining) {
      timeout_ms = static_cast<int>(std::max<int64_t>(
          1, absl::ToInt64Milliseconds(drain_until - absl::Now())));
    }
    BeforePoll(TcpPollSite::kWriter, absl::MakeConstSpan(fds).subspan(1));
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      uint64_t v;
      (void)!read(writer_wake_fd_, &v, sizeof(v));
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      TcpOutLink& link = *links_[peers[i - 1]];
      absl::MutexLock l(&link.mu);
      FlushLocked(peers[i - 1], link);
    }
  }
}

absl::Status TcpOutbox::WaitReadable(int fd, absl::Time deadline,
                                     absl::Duration spin, bool progress) {
  if (spin > absl::ZeroDuration() &&
      pending_links_.load() == 0) {
    // Stay runnable for a while, yielding the CPU, before sleeping.
    const absl::Time until = std::min(deadline, absl::Now() + spin);
    do {
      pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) return absl::OkStatus();
      sched_yield();
    } while (absl::Now() < until);
  }
  if (!progress || pending_links_.load() == 0) {
    return WaitFd(fd, POLLIN, shutdown_wake_fd_, deadline);
  }
  // Also write backlogs while waiting (MPI-style progress in the caller's
  // thread); the writer thread leaves the links polled here alone and is
  // woken when we stop polling one that still has a backlog.
  pollfd p[2 + kMaxProgressPeers];
  int peers[kMaxProgressPeers];
  std::shared_ptr<TcpSocket> held[kMaxProgressPeers];  // the polled sockets
  int n = 2;
  auto release = [&] {
    bool still_pending = false;
    for (int i = 2; i < n; ++i) {
      TcpOutLink& link = *links_[peers[i - 2]];
      link.progressed.fetch_sub(1);
      still_pending |= link.pending.load();
      held[i - 2].reset();
    }
    n = 2;
    return still_pending;
  };
  for (;;) {
    p[0] = {fd, POLLIN, 0};
    p[1] = {shutdown_wake_fd_, POLLIN, 0};
    n = 2;
    for (int r = 0; r < world() && n - 2 < kMaxProgressPeers; ++r) {
      TcpOutLink& link = *links_[r];
      if (!link.pending.load()) continue;
      absl::MutexLock l(&link.mu);
      if (link.backlog.empty() || link.fd < 0) continue;
      link.progressed.fetch_add(1);
      peers[n - 2] = r;
      held[n - 2] = link.sock;  // open while polled
      p[n++] = {link.fd, POLLOUT, 0};
    }
    BeforePoll(TcpPollSite::kProgress, absl::MakeConstSpan(p + 2, n - 2));
    timespec ts;
    timespec* tsp = TimeLeft(deadline, &ts);
    const int ready = ppoll(p, n, tsp, nullptr);
    absl::Status result;
    bool done = false;
    if (ready < 0 && errno != EINTR) {
      result = absl::UnavailableError(Errno("ppoll"));
      done = true;
    } else if (ready > 0 && p[1].revents != 0) {
      result = absl::CancelledError("transport shut down");
      done = true;
    } else if (ready > 0) {
      for (int i = 2; i < n; ++i) {
        if (p[i].revents == 0) continue;
        TcpOutLink& link = *links_[peers[i - 2]];
        absl::MutexLock l(&link.mu);
        FlushLocked(peers[i - 2], link);
      }
      done = p[0].revents != 0;
    }
    if (!done && absl::Now() >= deadline) {
      result = absl::DeadlineExceededError("deadline passed");
      done = true;
    }
    const bool still_pending = release();
    if (done) {
      if (still_pending) WakeWriter();  // the backlog is the writer's again
      return result;
    }
  }
}

void TcpOutbox::StopWriterAndClose() {
  {
    absl::MutexLock l(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  BeginShutdown();
  writer_.join();  // drains the backlog for up to close_timeout
  for (auto& link : links_) {
    absl::MutexLock l(&link->mu);
    if (link->fd >= 0) {
      shutdown(link->fd, SHUT_WR);
      link->CloseLocked();
    }
    // Whatever did not drain in time is dropped (and no caller buffer is
    // referenced any more).
    link->backlog.clear();
    link->backlog_bytes = 0;
    link->borrowed = 0;
    SyncPendingLocked(*link);
  }
}

}  // namespace lockstep
