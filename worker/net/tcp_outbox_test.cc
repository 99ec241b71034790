// TcpOutbox (tcp_outbox.h): "a socket is only polled while an owning
// reference to it is held" (the descriptor-reuse fix of cf737a1, issue 11).
//
// Each of the three threads that poll a link's socket outside the link's
// mutex (the writer thread, a Recv making progress in WaitReadable,
// FlushBorrowed) is caught by the outbox's test hook (SetPollHookForTest)
// after it collected what it polls and before it polls. The hook then does
// what another thread may do at that moment: the link's peer goes away, the
// link breaks (FlushLocked finds it and drops the link's reference, as any
// broken link before its reconnect), and a new connection is opened. The
// polled descriptor must still be the same open socket, so the new
// connection cannot get its number. A poller that copied only the link's
// descriptor number (the code before the fix) lets the socket close in the
// hook; the new connection then lands on the very number that poller is
// about to poll, and these tests fail. No timing is involved: the hook runs
// at the one moment the race needs.
//
// The links are AF_UNIX socketpairs (the outbox only sends and polls; the
// kernel's send-buffer accounting makes "full" exact), their send buffers
// filled by the test so the backlog stays queued.
#include "worker/net/tcp_outbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/net/data_conn.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Every wait of these tests ends by then (they take milliseconds).
constexpr absl::Duration kLong = absl::Seconds(30);
constexpr int kRank = 0;
constexpr int kPeer = 1;  // the link under test: rank 0 sends to rank 1

// Owns a descriptor; closes it on destruction or reset.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// What the hook saw, written by the polling thread in the hook and read by
// the test thread after `broke` was notified (which orders the two).
struct HookRecord {
  bool flush_broke = false;   // FlushLocked reported the link broken
  bool link_closed = false;   // ... and the link let go of its socket
  bool polled_open = false;   // fstat of the polled descriptor worked
  bool polled_same = false;   // ... and it is still the link's socket
  int polled_errno = 0;       // fstat's errno when it failed
  // The new connection's descriptors: its two ends and a duplicate at the
  // lowest free number >= the polled one (-1: could not be opened).
  int new_conn_fds[3] = {-1, -1, -1};
};

class TcpOutboxPollTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shutdown_wake_.reset(eventfd(0, EFD_CLOEXEC));
    ASSERT_GE(shutdown_wake_.get(), 0) << std::strerror(errno);
    const int writer_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ASSERT_GE(writer_wake, 0) << std::strerror(errno);
    outbox_ = std::make_unique<TcpOutbox>(kRank, /*world=*/2, writer_wake,
                                          shutdown_wake_.get(),
                                          /*close_timeout=*/absl::Seconds(5));

    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0)
        << std::strerror(errno);
    polled_fd_ = sv[0];
    peer_.reset(sv[1]);
    struct stat st;
    ASSERT_EQ(fstat(polled_fd_, &st), 0) << std::strerror(errno);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    // Fill the send buffer (the peer never reads): the socket is then not
    // writable, so whatever is backlogged stays queued and every poller
    // keeps the link in its poll set.
    const std::vector<uint8_t> chunk(64 << 10, 0x5a);
    bool full = false;
    for (int i = 0; i < 1024 && !full; ++i) {  // 64 MiB at most
      const ssize_t w = send(polled_fd_, chunk.data(), chunk.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0) {
        ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK)
            << std::strerror(errno);
        full = true;
      }
    }
    ASSERT_TRUE(full) << "the socket's send buffer never filled";
    absl::MutexLock l(&link().mu);
    link().AdoptLocked(dataconn::Plain(polled_fd_));  // the link owns it now
  }

  TcpOutLink& link() { return outbox_->link(kPeer); }

  // Installs the hook: the first time `site` is about to poll the link's
  // socket, the link breaks under it and a new connection is opened
  // (BreakAndReconnect); `broke` is then notified. Afterwards the writer's
  // next round (it has dropped the references of the round before) notifies
  // `writer_next_round`.
  void Arm(TcpPollSite site) {
    outbox_->SetPollHookForTest(
        [this, site](TcpPollSite s, absl::Span<const pollfd> sockets) {
          if (s == TcpPollSite::kWriter && broke_.HasBeenNotified() &&
              !writer_next_round_.HasBeenNotified()) {
            writer_next_round_.Notify();  // only the writer thread gets here
          }
          if (s != site || triggered_.load()) return;
          bool polls_link = false;
          for (const pollfd& p : sockets) polls_link |= p.fd == polled_fd_;
          if (!polls_link || triggered_.exchange(true)) return;
          BreakAndReconnect();
          broke_.Notify();
        });
  }

  // Runs in the hook, in the polling thread, no lock held.
  void BreakAndReconnect() {
    // The peer goes away; the next write finds the link broken, drops its
    // backlog and the link's reference (CloseLocked), as on any broken link
    // before the next Send reconnects it.
    peer_.reset();
    {
      absl::MutexLock l(&link().mu);
      record_.flush_broke = !outbox_->FlushLocked(kPeer, link());
      record_.link_closed = link().fd < 0 && link().sock == nullptr;
    }
    // The descriptor about to be polled must still be that socket.
    struct stat st;
    record_.polled_open = fstat(polled_fd_, &st) == 0;
    record_.polled_errno = record_.polled_open ? 0 : errno;
    record_.polled_same =
        record_.polled_open && st.st_dev == dev_ && st.st_ino == ino_;
    // A new connection (another link's reconnect, an accept). The kernel
    // gives its two ends the lowest free numbers; its duplicate by F_DUPFD
    // gets the lowest free number >= the polled one, so a freed polled
    // number is reused for certain, whatever lower numbers happen to be
    // free. Kept open until the end of the test: a buggy poller then polls
    // this socket.
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return;
    new_conn_.reset(pair[0]);
    new_conn_peer_.reset(pair[1]);
    new_conn_dup_.reset(fcntl(pair[0], F_DUPFD_CLOEXEC, polled_fd_));
    record_.new_conn_fds[0] = pair[0];
    record_.new_conn_fds[1] = pair[1];
    record_.new_conn_fds[2] = new_conn_dup_.get();
  }

  // Queues one message (40 header bytes and `data`) on the link, as
  // TcpTransport::SendImpl does when the kernel takes none of it; wakes the
  // writer thread.
  void Backlog(absl::Span<const uint8_t> data, bool borrow) {
    uint8_t hdr[40];
    std::memset(hdr, 0x11, sizeof(hdr));
    absl::MutexLock l(&link().mu);
    outbox_->BacklogLocked(link(), hdr, sizeof(hdr), /*done=*/0, data, borrow);
  }

  // Whether `polled_fd_` still names the link's original socket.
  bool PolledSocketStillOpen() const {
    struct stat st;
    return fstat(polled_fd_, &st) == 0 && st.st_dev == dev_ &&
           st.st_ino == ino_;
  }

  // The checks common to the three pollers, once the hook ran in `who`.
  void ExpectHeldWhilePolled(const char* who) {
    const HookRecord& r = record_;
    EXPECT_TRUE(r.flush_broke) << "the link did not break when its peer closed";
    EXPECT_TRUE(r.link_closed) << "the broken link kept its socket";
    EXPECT_TRUE(r.polled_same)
        << who << " was about to poll descriptor " << polled_fd_
        << ", but the link's socket there was closed when the link broke ("
        << (r.polled_open ? "a different file is there now"
                          : std::strerror(r.polled_errno))
        << "): the poller holds no reference to the socket it polls";
    for (const int fd : r.new_conn_fds) {
      EXPECT_GE(fd, 0) << "opening the new connection failed";
      EXPECT_NE(fd, polled_fd_)
          << "a new connection got descriptor " << fd << ", which " << who
          << " is about to poll as the broken link's socket";
    }
  }

  // Declared before outbox_: outlive it (the outbox polls and the hook uses
  // them until it is destroyed).
  Fd shutdown_wake_;
  Fd peer_;
  Fd new_conn_, new_conn_peer_, new_conn_dup_;
  int polled_fd_ = -1;  // the link's socket, owned by the link
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::atomic<bool> triggered_{false};
  absl::Notification broke_;
  absl::Notification writer_next_round_;
  HookRecord record_;
  std::unique_ptr<TcpOutbox> outbox_;
};

// The writer thread polls every link with a backlog (WriterLoop).
TEST_F(TcpOutboxPollTest, WriterThreadHoldsThePolledSocket) {
  Arm(TcpPollSite::kWriter);
  const std::vector<uint8_t> payload(4096, 0x22);
  Backlog(payload, /*borrow=*/false);  // wakes the writer: it polls the link
  ASSERT_TRUE(broke_.WaitForNotificationWithTimeout(kLong))
      << "the writer thread never polled the link's socket";
  ExpectHeldWhilePolled("the writer thread");
  // The socket closes once the writer lets go of it: at its next round.
  ASSERT_TRUE(writer_next_round_.WaitForNotificationWithTimeout(kLong))
      << "the writer thread never came back from polling the broken link";
  EXPECT_FALSE(PolledSocketStillOpen())
      << "the writer thread kept the broken link's socket open";
}

// A Recv waiting with progress writes the backlogs meanwhile (WaitReadable).
TEST_F(TcpOutboxPollTest, RecvMakingProgressHoldsThePolledSocket) {
  // As if another Recv were polling the link: the writer thread leaves it
  // alone (and so holds no reference to it), only the Recv under test polls
  // it. Set before the backlog exists, so the writer never sees the link
  // pending without it.
  link().progressed.fetch_add(1);
  Arm(TcpPollSite::kProgress);
  const std::vector<uint8_t> payload(4096, 0x33);
  Backlog(payload, /*borrow=*/false);
  // What the Recv waits for is readable at once: one round of progress
  // (collect, hook, ppoll), then WaitReadable returns.
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0) << std::strerror(errno);
  Fd readable(pipe_fds[0]), writer_end(pipe_fds[1]);
  ASSERT_EQ(write(writer_end.get(), "x", 1), 1) << std::strerror(errno);
  const absl::Status s =
      outbox_->WaitReadable(readable.get(), absl::Now() + kLong,
                            /*spin=*/absl::ZeroDuration(), /*progress=*/true);
  link().progressed.fetch_sub(1);
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_TRUE(broke_.HasBeenNotified())
      << "WaitReadable never polled the link's socket";
  ExpectHeldWhilePolled("a Recv making progress");
  // WaitReadable let go of the socket when it returned.
  EXPECT_FALSE(PolledSocketStillOpen())
      << "WaitReadable kept the broken link's socket open";
}

// FlushBorrowed waits for room on a link with a borrowed backlog.
TEST_F(TcpOutboxPollTest, FlushBorrowedHoldsThePolledSocket) {
  link().progressed.fetch_add(1);  // the writer leaves the link alone, as above
  Arm(TcpPollSite::kFlushBorrowed);
  // Borrowed: the outbox refers to it until FlushBorrowed returned.
  const std::vector<uint8_t> payload(4096, 0x44);
  Backlog(payload, /*borrow=*/true);
  int failed_peer = -1;
  const absl::Status s =
      outbox_->FlushBorrowed(absl::Now() + kLong, &failed_peer);
  link().progressed.fetch_sub(1);
  ASSERT_TRUE(broke_.HasBeenNotified())
      << "FlushBorrowed never waited on the link's socket; it returned " << s;
  ExpectHeldWhilePolled("FlushBorrowed");
  // The borrowed message was lost with the link, and that is reported.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("broke"));
  EXPECT_EQ(failed_peer, kPeer);
  // FlushBorrowed let go of the socket when it returned.
  EXPECT_FALSE(PolledSocketStillOpen())
      << "FlushBorrowed kept the broken link's socket open";
}

}  // namespace
}  // namespace lockstep
