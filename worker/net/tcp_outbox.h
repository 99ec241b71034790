// The send side of the raw-TCP peer transport (tcp_transport.h): per peer,
// an outbound link (socket, backlog of bytes the kernel has not taken yet,
// recycled buffers) and the transport's one writer thread; plus the
// MPI-style progress a waiting Recv makes on the backlogs.
//
// Contract:
//   * The transport writes a message straight from its caller's buffer
//     (TcpTransport::SendImpl, under the link's mutex) and hands whatever the
//     kernel did not take at once to BacklogLocked: a copy, or with `borrow`
//     a reference to the caller's buffer (then the caller must keep the
//     buffer until FlushBorrowed returned).
//   * The backlog is written in FIFO order by whoever holds the link's mutex:
//     the writer thread (for links no Recv is polling), a waiting Recv
//     (WaitReadable, progress) or FlushBorrowed.
//   * A link whose socket broke drops its backlog, records `broken` (the
//     next Send or FlushBorrowed reports it once) and is reconnected by the
//     next Send.
//   * A socket is only polled while an owning reference to it is held
//     (TcpSocket): closing a link never closes a descriptor another thread
//     is polling, so a reused descriptor number is never polled by mistake.
// Bounds: backlog bytes per link are bounded by the transport's
// max_queued_bytes (Send waits above it) plus one message; at most 4 spare
// buffers per link; at most kMaxProgressPeers links polled by one Recv.
// Tests (tcp_outbox_test.cc) check the last contract point through
// SetPollHookForTest.
#ifndef LOCKSTEP_WORKER_NET_TCP_OUTBOX_H_
#define LOCKSTEP_WORKER_NET_TCP_OUTBOX_H_

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/progress_mark.h"
#include "common/fifo.h"
#include "common/net/data_conn.h"

namespace lockstep {

// Bytes of one message not yet taken by the kernel: `owned` first (a copy:
// the rest of the header, and the payload unless borrowed), then `ext` (the
// rest of a borrowed payload, still in the caller's buffer).
struct TcpPendingSend {
  std::vector<uint8_t> owned;
  const uint8_t* ext = nullptr;
  size_t ext_len = 0;
  size_t size() const { return owned.size() + ext_len; }
};

// An outbound socket, closed when the last reference goes: the link holds
// one, and so does every thread polling it outside the link's mutex (the
// writer thread, a Recv making progress, FlushBorrowed), so a descriptor is
// never closed, and its number reused by another socket, while a poll may
// still name it.
struct TcpSocket {
  explicit TcpSocket(dataconn::Conn conn) : conn(conn), fd(conn.fd) {}
  ~TcpSocket();
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;
  dataconn::Conn conn;  // plain or TLS (common/net/data_conn.h)
  const int fd;
};

// One outbound link.
struct TcpOutLink {
  absl::Mutex mu;
  // sock->fd, or -1 without a connection.
  int fd ABSL_GUARDED_BY(mu) = -1;
  std::shared_ptr<TcpSocket> sock ABSL_GUARDED_BY(mu);
  // Takes over a connected socket.
  void AdoptLocked(dataconn::Conn conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    sock = std::make_shared<TcpSocket>(conn);
    fd = conn.fd;
  }
  // Drops the link's reference (the socket closes once no poller holds it).
  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    sock.reset();
    fd = -1;
  }
  // Bytes not yet taken by the kernel, in order; the front is partly
  // written (front_done bytes).
  // A Fifo keeps its capacity: no allocation per backlogged message.
  Fifo<TcpPendingSend> backlog ABSL_GUARDED_BY(mu);
  size_t front_done ABSL_GUARDED_BY(mu) = 0;
  int64_t backlog_bytes ABSL_GUARDED_BY(mu) = 0;
  int borrowed ABSL_GUARDED_BY(mu) = 0;  // entries with ext != nullptr
  // !backlog.empty(), readable without the mutex.
  std::atomic<bool> pending{false};
  // Number of Recvs polling this link in WaitReadable right now.
  std::atomic<int> progressed{0};
  // Set when the writer found the link broken; reported by the next Send.
  absl::Status broken ABSL_GUARDED_BY(mu);
  // Recycled backlog buffers (fresh pages are slow here).
  std::vector<std::vector<uint8_t>> spare ABSL_GUARDED_BY(mu);
};

// The threads that poll link sockets outside the links' mutexes (see
// TcpOutbox::SetPollHookForTest).
enum class TcpPollSite {
  kWriter,         // the writer thread (its poll over every backlog)
  kProgress,       // a Recv writing backlogs while it waits (WaitReadable)
  kFlushBorrowed,  // FlushBorrowed waiting for room on one link
};

class TcpOutbox {
 public:
  static constexpr int kMaxProgressPeers = 64;

  // `sockets`: the link sockets about to be polled (not the wake eventfds).
  using PollHook =
      std::function<void(TcpPollSite site, absl::Span<const pollfd> sockets)>;

  // `world` links for rank `rank`; writer_wake_fd (an eventfd, owned) wakes
  // the writer; shutdown_wake_fd (not owned) is readable once the transport
  // shuts down. The writer thread starts at once.
  // `progress` (optional, not owned, outlives this) is touched whenever a
  // write moves bytes.
  TcpOutbox(int rank, int world, int writer_wake_fd, int shutdown_wake_fd,
            absl::Duration close_timeout, ProgressMark* progress = nullptr);
  ~TcpOutbox();  // StopWriter(); closes writer_wake_fd
  TcpOutbox(const TcpOutbox&) = delete;
  TcpOutbox& operator=(const TcpOutbox&) = delete;

  TcpOutLink& link(int to) { return *links_[to]; }
  int world() const { return static_cast<int>(links_.size()); }

  // Set once the transport shuts down: waits end, the writer drains for up
  // to close_timeout and exits.
  bool shutting_down() const { return shutting_down_.load(); }
  void BeginShutdown();

  // Queues the part of a message the kernel did not take: header bytes
  // [done, 40) and payload bytes from max(done - 40, 0). Wakes the writer.
  void BacklogLocked(TcpOutLink& link, const uint8_t* hdr, size_t hdr_bytes,
                     size_t done, absl::Span<const uint8_t> data, bool borrow)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link.mu);

  // Writes as much backlog of `link` as the socket takes; false if the link
  // broke (the backlog is then dropped and `broken` set).
  bool FlushLocked(int to, TcpOutLink& link)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link.mu);

  // Writes borrowed backlog from the calling thread until none is left; at
  // the deadline copies what is still borrowed (the writer sends it). The
  // first error and the peer it concerns go to *failed_peer.
  absl::Status FlushBorrowed(absl::Time deadline, int* failed_peer);

  // Waits until fd is readable (or shutdown / deadline), writing backlogs
  // meanwhile when `progress` (the links it polls are marked `progressed`;
  // the writer thread leaves those alone). Spins for up to `spin` first.
  absl::Status WaitReadable(int fd, absl::Time deadline, absl::Duration spin,
                            bool progress);

  // Drains (up to close_timeout after BeginShutdown) and joins the writer,
  // then closes every socket and drops what did not drain. Idempotent.
  void StopWriterAndClose();

  int64_t backlogged() const { return backlogged_.load(); }
  int64_t borrows_copied() const { return borrows_copied_.load(); }

  // Tests only: `hook` runs in every thread that polls link sockets outside
  // their mutexes (the writer thread on each round, WaitReadable with
  // `progress` on each round, FlushBorrowed before each wait for room),
  // after it took its references to the sockets and released every link's
  // mutex, just before it polls. No lock of the outbox is held: the hook may
  // lock a link and break or close it (FlushLocked, CloseLocked), as another
  // thread could at that moment. Any thread; at most once per outbox, with
  // a non-empty hook (else aborts); the hook stays until the outbox is
  // destroyed, so what it refers to must outlive the outbox. Unset, the
  // pollers pay one atomic load.
  void SetPollHookForTest(PollHook hook);

 private:
  // Runs the test hook, if set (see SetPollHookForTest).
  void BeforePoll(TcpPollSite site, absl::Span<const pollfd> sockets) {
    if (has_poll_hook_.load(std::memory_order_acquire)) {
      poll_hook_(site, sockets);
    }
  }
  void SyncPendingLocked(TcpOutLink& link)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link.mu);
  void WriterLoop();
  void WakeWriter();

  const int rank_;
  const int writer_wake_fd_;
  const int shutdown_wake_fd_;
  const absl::Duration close_timeout_;
  ProgressMark* const progress_;
  std::vector<std::unique_ptr<TcpOutLink>> links_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int> pending_links_{0};  // links with a non-empty backlog
  std::atomic<int64_t> backlogged_{0};
  std::atomic<int64_t> borrows_copied_{0};
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
  // Written once by SetPollHookForTest before has_poll_hook_ is set.
  PollHook poll_hook_;
  std::atomic<bool> has_poll_hook_{false};
  std::thread writer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_TCP_OUTBOX_H_
