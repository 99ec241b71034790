#include "worker/net/shm_link.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/net/data_auth.h"

namespace lockstep {

// The shared header (see shm_link.h for the offsets).
struct ShmLink::Layout {
  // Line 0: identity, written once by whoever arrives first.
  uint32_t magic;
  uint32_t version;
  uint64_t capacity;
  uint64_t group;
  uint32_t from;
  uint32_t to;
  uint32_t world;
  uint8_t pad0[60 - 36];
  std::atomic<uint32_t> init_state;  // 0 fresh, 1 being written, 2 ready
  // Line 1: the writer's.
  std::atomic<uint64_t> head;
  std::atomic<uint32_t> data_seq;
  std::atomic<uint32_t> writer_pid;
  std::atomic<uint32_t> writer_closed;
  uint8_t pad1[64 - 20];
  // Line 2: the reader's.
  std::atomic<uint64_t> tail;
  std::atomic<uint32_t> space_seq;
  std::atomic<uint32_t> reader_pid;
  std::atomic<uint32_t> reader_closed;
  std::atomic<uint32_t> reader_waiting;
  std::atomic<uint32_t> writer_waiting;
  std::atomic<uint32_t> name_removed;  // 1 once a side removed the name
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

namespace {

constexpr char kNameDomain[] = "lockstep shm segment name v1";

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  struct timespec ts = absl::ToTimespec(timeout);
  // Shared (not FUTEX_PRIVATE): the waker is another process.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

inline void CpuRelax() { __builtin_ia32_pause(); }

// Longest single futex sleep: waits re-check cancellation and closure at
// least this often even if a wake-up were lost.
constexpr absl::Duration kMaxSleep = absl::Milliseconds(100);
// Longest time Open waits for the peer that created a segment to size it
// and write its header (microseconds of work on its side).
constexpr absl::Duration kMaxOpenWait = absl::Seconds(5);

std::string IdString(uint64_t group, uint32_t from, uint32_t to, uint32_t world, uint64_t cap) {
  return absl::StrCat("group ", group, " rank ", from, "->", to, " of ", world, ", ", cap,
                      "-byte ring");
}

}  // namespace

std::string ShmLink::SegmentName(const std::string& secret, const ShmLinkId& id) {
  uint8_t msg[20];
  std::memcpy(msg, &id.group, 8);
  std::memcpy(msg + 8, &id.from, 4);
  std::memcpy(msg + 12, &id.to, 4);
  std::memcpy(msg + 16, &id.world, 4);
  const dataauth::Nonce zero{};
  const dataauth::Mac mac = dataauth::HelloMac(secret, kNameDomain, msg, sizeof(msg), zero);
  const std::string hex = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac.data()), 12));
  return absl::StrCat("/lockstep-", hex, "-", id.from, "-", id.to);
}

absl::StatusOr<std::unique_ptr<ShmLink>> ShmLink::Open(const std::string& name, Side side,
                                                       const ShmLinkId& id, int64_t capacity,
                                                       absl::Time deadline,
                                                       const std::atomic<bool>* cancel,
                                                       ProgressMark* progress) {
  if (!ValidCapacity(capacity)) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory ring size: expected a power of two in [",
                                                   kMinCapacity, ", ", kMaxCapacity, "], got ",
                                                   capacity));
  }
  const size_t map_bytes = static_cast<size_t>(kHeaderBytes + capacity);
  const absl::Time until = std::min(deadline, absl::Now() + kMaxOpenWait);
  // Waits a moment for the peer that created the segment to size it or
  // write its header; false at `until` or when cancelled.
  auto wait_for_peer = [&]() {
    if ((cancel != nullptr && cancel->load()) || absl::Now() >= until) return false;
    absl::SleepFor(absl::Microseconds(200));
    return true;
  };
  // Exactly one side creates the file (O_EXCL) and sizes it; the other
  // opens it and waits for the size, so neither ever truncates a file the
  // other has mapped.
  int fd = -1;
  bool created = false;
  for (;;) {
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      created = true;
      break;
    }
    if (errno != EEXIST) {
      return absl::UnavailableError(absl::StrCat("shm_open ", name, ": ", std::strerror(errno)));
    }
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd >= 0) break;
    if (errno != ENOENT) {
      return absl::UnavailableError(absl::StrCat("shm_open ", name, ": ", std::strerror(errno)));
    }
    if (!wait_for_peer()) {  // removed between the two calls: again
      return absl::DeadlineExceededError(absl::StrCat("shm_open ", name, ": no deadline left"));
    }
  }
  // Before mapping, a failure leaves the segment as it was (a file this
  // call created is removed again).
  auto fail = [&](absl::Status s) {
    close(fd);
    if (created) shm_unlink(name.c_str());
    return s;
  };
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(absl::UnavailableError(absl::StrCat("fstat ", name, ": ", std::strerror(errno))));
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return fail(absl::PermissionDeniedError(absl::StrCat(
        "shared-memory segment /dev/shm", name, " belongs to uid ", st.st_uid, " with mode ",
        absl::StrCat(absl::Hex(st.st_mode & 0777)), "; expected uid ", geteuid(),
        " and no access for others")));
  }
  if (created) {
    // Reserve the pages now: a full /dev/shm is an error here, not a
    // SIGBUS at the first write.
    const int e = posix_fallocate(fd, 0, static_cast<off_t>(map_bytes));
    if (e != 0) {
      return fail(absl::UnavailableError(absl::StrCat("reserving ", map_bytes, " bytes for /dev/shm",
                                                      name, ": ", std::strerror(e),
                                                      " (is /dev/shm full?)")));
    }
  } else {
    while (st.st_size == 0) {
      if (!wait_for_peer()) {
        return fail(absl::DeadlineExceededError(absl::StrCat(
            "shared-memory segment /dev/shm", name, ": its creator never sized it")));
      }
      if (fstat(fd, &st) != 0) return fail(absl::UnavailableError(absl::StrCat("fstat ", name, ": ", std::strerror(errno))));
    }
    if (st.st_size != static_cast<off_t>(map_bytes)) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "shared-memory segment /dev/shm", name, " has ", st.st_size, " bytes; expected ",
          map_bytes)));
    }
  }
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return fail(absl::UnavailableError(absl::StrCat("mmap ", name, " (", map_bytes,
                                                    " bytes): ", std::strerror(errno))));
  }
  close(fd);
  Layout* l = reinterpret_cast<Layout*>(p);
  // After mapping, a failure only unmaps: nothing is written into a segment
  // this side did not join (its peer's view of the link stays intact).
  auto unmap_fail = [&](absl::Status s) {
    munmap(p, map_bytes);
    if (created) shm_unlink(name.c_str());
    return s;
  };
  if (created) {
    l->magic = kMagic;
    l->version = kVersion;
    l->capacity = static_cast<uint64_t>(capacity);
    l->group = id.group;
    l->from = id.from;
    l->to = id.to;
    l->world = id.world;
    l->init_state.store(2, std::memory_order_release);
  } else {
    while (l->init_state.load(std::memory_order_acquire) != 2) {
      if (!wait_for_peer() && l->init_state.load(std::memory_order_acquire) != 2) {
        return unmap_fail(absl::DeadlineExceededError(absl::StrCat(
            "shared-memory segment /dev/shm", name, ": the peer never finished its header")));
      }
    }
    if (l->magic != kMagic || l->version != kVersion || l->capacity != uint64_t(capacity) ||
        l->group != id.group || l->from != id.from || l->to != id.to || l->world != id.world) {
      return unmap_fail(absl::FailedPreconditionError(absl::StrCat(
          "shared-memory segment /dev/shm", name, " was made for ",
          IdString(l->group, l->from, l->to, l->world, l->capacity), " (magic ",
          absl::Hex(l->magic), ", version ", l->version, "); expected ",
          IdString(id.group, id.from, id.to, id.world, capacity))));
    }
  }
  std::unique_ptr<ShmLink> link(
      new ShmLink(name, side, capacity, static_cast<uint8_t*>(p), map_bytes, progress));
  const uint32_t pid = static_cast<uint32_t>(getpid());
  (side == Side::kWriter ? l->writer_pid : l->reader_pid).store(pid == 0 ? 1 : pid);
  link->local_ = side == Side::kWriter ? l->head.load() : l->tail.load();
  link->peer_attached();  // removes the name at once when the peer came first
  return link;
}

ShmLink::ShmLink(std::string name, Side side, int64_t capacity, uint8_t* base, size_t map_bytes,
                 ProgressMark* progress)
    : name_(std::move(name)),
      side_(side),
      capacity_(capacity),
      base_(base),
      map_bytes_(map_bytes),
      progress_(progress) {}

ShmLink::~ShmLink() {
  Layout* l = layout();
  if (side_ == Side::kWriter) {
    l->writer_closed.store(1);
    l->data_seq.fetch_add(1);
    FutexWake(&l->data_seq);
  } else {
    l->reader_closed.store(1);
    l->space_seq.fetch_add(1);
    FutexWake(&l->space_seq);
  }
  // A reader that never came: its peer would find a fresh segment under the
  // name, so the name goes. A writer whose reader has not come keeps it when
  // it wrote anything (the reader may still come for those bytes and unlinks
  // it then); RemoveStaleSegments bounds what a reader that never comes
  // leaves behind.
  const bool keep = side_ == Side::kWriter && local_ != 0 && l->reader_pid.load() == 0;
  if (!keep) RemoveName();
  munmap(base_, map_bytes_);
}

int ShmLink::RemoveStaleSegments(absl::Duration older_than) {
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  const absl::Time cutoff = absl::Now() - older_than;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    if (file.rfind("lockstep-", 0) != 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (absl::TimeFromTimespec(st.st_mtim) >= cutoff) continue;
    if (shm_unlink(("/" + file).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

ShmLink::Layout* ShmLink::layout() const {
  static_assert(offsetof(Layout, init_state) == 60, "layout");
  static_assert(offsetof(Layout, head) == 64, "layout");
  static_assert(offsetof(Layout, tail) == 128, "layout");
  static_assert(sizeof(Layout) <= kHeaderBytes, "layout");
  return reinterpret_cast<Layout*>(base_);
}

bool ShmLink::peer_attached() {
  Layout* l = layout();
  const bool attached = (side_ == Side::kWriter ? l->reader_pid : l->writer_pid).load() != 0;
  if (attached) RemoveName();
  return attached;
}

void ShmLink::RemoveName() {
  // Once per segment (a word in it), not per side: a second shm_unlink could
  // remove a newer segment made under the same name.
  if (!unlinked_.exchange(true) && layout()->name_removed.exchange(1) == 0) {
    shm_unlink(name_.c_str());
  }
}

bool ShmLink::peer_closed() const {
  Layout* l = layout();
  return (side_ == Side::kWriter ? l->reader_closed : l->writer_closed).load() != 0;
}

absl::Status ShmLink::Corrupt(uint64_t head, uint64_t tail) const {
  return absl::DataLossError(absl::StrCat("corrupt shared-memory link /dev/shm", name_,
                                          ": head ", head, ", tail ", tail, ", capacity ",
                                          capacity_));
}

absl::StatusOr<size_t> ShmLink::Write(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  Layout* l = layout();
  const uint64_t tail = l->tail.load(std::memory_order_acquire);
  const uint64_t head = local_;
  if (tail > head || head - tail > static_cast<uint64_t>(capacity_)) return Corrupt(head, tail);
  size_t free_bytes = static_cast<size_t>(capacity_ - static_cast<int64_t>(head - tail));
  const size_t mask = static_cast<size_t>(capacity_ - 1);
  size_t written = 0;
  if (l->reader_closed.load() != 0) {
    return absl::UnavailableError(absl::StrCat("the reader closed /dev/shm", name_));
  }
  for (absl::Span<const uint8_t> part : {a, b}) {
    if (free_bytes == 0) break;
    const size_t n = std::min(free_bytes, part.size());
    if (n == 0) continue;
    const size_t pos = static_cast<size_t>(head + written) & mask;
    const size_t first = std::min(n, static_cast<size_t>(capacity_) - pos);
    std::memcpy(data() + pos, part.data(), first);
    if (n > first) std::memcpy(data(), part.data() + first, n - first);
    written += n;
    free_bytes -= n;
    if (n < part.size()) break;
  }
  if (written == 0) return written;
  TouchProgress(progress_);
  local_ = head + written;
  l->head.store(local_, std::memory_order_release);
  l->data_seq.fetch_add(1, std::memory_order_seq_cst);
  if (l->reader_waiting.load(std::memory_order_seq_cst) != 0) FutexWake(&l->data_seq);
  return written;
}

absl::Status ShmLink::WaitForSpace(absl::Time deadline) {
  Layout* l = layout();
  for (;;) {
    const uint32_t seq = l->space_seq.load(std::memory_order_acquire);
    const uint64_t tail = l->tail.load(std::memory_order_acquire);
    if (tail > local_ || local_ - tail > static_cast<uint64_t>(capacity_)) {
      return Corrupt(local_, tail);
    }
    if (local_ - tail < static_cast<uint64_t>(capacity_)) return absl::OkStatus();
    if (cancelled_.load()) return absl::CancelledError("shared-memory link cancelled");
    if (l->reader_closed.load() != 0) {
      return absl::UnavailableError(absl::StrCat("the reader closed /dev/shm", name_));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("ring /dev/shm", name_, " still full"));
    }
    l->writer_waiting.store(1, std::memory_order_seq_cst);
    if (l->space_seq.load(std::memory_order_seq_cst) == seq) {
      FutexWait(&l->space_seq, seq, std::min(left, kMaxSleep));
    }
    l->writer_waiting.store(0, std::memory_order_relaxed);
  }
}

absl::StatusOr<size_t> ShmLink::Available() {
  const uint64_t head = layout()->head.load(std::memory_order_acquire);
  if (head < local_ || head - local_ > static_cast<uint64_t>(capacity_)) {
    return Corrupt(head, local_);
  }
  return static_cast<size_t>(head - local_);
}

void ShmLink::Peek(size_t offset, uint8_t* out, size_t n) const {
  const size_t mask = static_cast<size_t>(capacity_ - 1);
  const size_t pos = static_cast<size_t>(local_ + offset) & mask;
  const size_t first = std::min(n, static_cast<size_t>(capacity_) - pos);
  std::memcpy(out, data() + pos, first);
  if (n > first) std::memcpy(out + first, data(), n - first);
}

void ShmLink::Consume(size_t n) {
  if (n == 0) return;
  TouchProgress(progress_);
  Layout* l = layout();
  local_ += n;
  l->tail.store(local_, std::memory_order_release);
  l->space_seq.fetch_add(1, std::memory_order_seq_cst);
  if (l->writer_waiting.load(std::memory_order_seq_cst) != 0) FutexWake(&l->space_seq);
}

absl::Status ShmLink::WaitForData(size_t n, absl::Time deadline, absl::Duration spin) {
  Layout* l = layout();
  const absl::Time spin_until = absl::Now() + spin;
  int polls = 0;
  for (;;) {
    const uint32_t seq = l->data_seq.load(std::memory_order_acquire);
    absl::StatusOr<size_t> avail = Available();
    if (!avail.ok()) return avail.status();
    if (*avail >= n) return absl::OkStatus();
    if (cancelled_.load()) return absl::CancelledError("shared-memory link cancelled");
    if (l->writer_closed.load() != 0) {
      // Everything written before the close is in the ring already.
      avail = Available();
      if (!avail.ok()) return avail.status();
      if (*avail >= n) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("the writer closed /dev/shm", name_));
    }
    const absl::Time now = absl::Now();
    if (now < spin_until) {
      // Spin a little before sleeping (as the tcp transport's recv_spin):
      // the peer is usually about to publish.
      if (++polls % 64 == 0) {
        std::this_thread::yield();
      } else {
        CpuRelax();
      }
      continue;
    }
    const absl::Duration left = deadline - now;
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no data on /dev/shm", name_, " (", *avail, " of ", n, " bytes)"));
    }
    l->reader_waiting.store(1, std::memory_order_seq_cst);
    if (l->data_seq.load(std::memory_order_seq_cst) == seq) {
      FutexWait(&l->data_seq, seq, std::min(left, kMaxSleep));
    }
    l->reader_waiting.store(0, std::memory_order_relaxed);
  }
}

void ShmLink::Cancel() {
  cancelled_.store(true);
  Layout* l = layout();
  // Bump the sequence this side sleeps on so a sleeper that already read
  // it returns at once (a spurious change is harmless: waits re-check).
  std::atomic<uint32_t>* word = side_ == Side::kWriter ? &l->space_seq : &l->data_seq;
  word->fetch_add(1);
  FutexWake(word);
}

}  // namespace lockstep
