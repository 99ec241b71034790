// One directed link of the shared-memory peer transport (shm_transport.h):
// a single-producer single-consumer byte ring in a POSIX shared-memory
// segment (/dev/shm) that two worker processes on one host both map. The
// writer process appends bytes, the reader process consumes them; neither
// ever waits for the other except when the ring is full (writer) or empty
// (reader), and then on a futex in the segment (no socket, no kernel copy).
//
// Segment layout (offsets in bytes; every field is naturally aligned and
// every std::atomic used here is lock-free, hence address-free):
//      0  u32 magic 'LKSM' | u32 version | u64 capacity | u64 group |
//         u32 from | u32 to | u32 world | ... | u32 init_state (at 60)
//     64  writer's line:  u64 head | u32 data_seq | u32 writer_pid |
//                         u32 writer_closed
//    128  reader's line:  u64 tail | u32 space_seq | u32 reader_pid |
//                         u32 reader_closed | u32 reader_waiting |
//                         u32 writer_waiting | u32 name_removed
//   4096  `capacity` data bytes (a power of two)
// head and tail count bytes since the link began; the ring holds
// head - tail bytes (never more than capacity) at positions modulo capacity.
//
// Opening: either side may come first. The first creates the file
// (O_EXCL, mode 0600), reserves its pages (posix_fallocate: a full
// /dev/shm is an error, not a SIGBUS later), maps it and writes the
// identity fields (init_state 2 = ready); the second opens it, checks that
// it belongs to this user and is not readable by anyone else, waits
// (bounded) for its size and header and checks they name the same group,
// ranks, world and capacity.
// Once a side sees the other attached it unlinks the name (the mappings
// stay). A side that closes before its peer came removes the name too,
// except a writer that wrote something (its reader may still come for it):
// such a segment outlives its processes when the reader never comes, until
// RemoveStaleSegments (run by every ShmTransport::Create) removes names
// older than 10 minutes.
//
// Waking: a side that finds nothing to do spins for a moment, then
// announces itself in reader_waiting / writer_waiting and sleeps on
// data_seq / space_seq with FUTEX_WAIT (shared, not private: two processes).
// The other side bumps the sequence after every publish and calls
// FUTEX_WAKE only when someone announced (one atomic add per publish
// otherwise). Every wait has a deadline.
//
// Trust: the peer is another lockstep worker of the same job, but its
// indices are still checked: head - tail above capacity (or tail past head)
// is DataLossError "corrupt shared-memory link", never an out-of-bounds copy.
//
// Threading: one thread writes (Write*, WaitForSpace) and one thread reads
// (Available, Peek, Consume, WaitForData) at a time; the caller serializes
// each side. Cancel() may be called from any thread.
#ifndef LOCKSTEP_WORKER_NET_SHM_LINK_H_
#define LOCKSTEP_WORKER_NET_SHM_LINK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/progress_mark.h"

namespace lockstep {

struct ShmLinkId {
  uint64_t group = 0;
  uint32_t from = 0;  // the writing rank
  uint32_t to = 0;    // the reading rank
  uint32_t world = 0;
};

class ShmLink {
 public:
  enum class Side { kWriter, kReader };

  static constexpr uint32_t kMagic = 0x4d534b4c;  // "LKSM"
  static constexpr uint32_t kVersion = 1;
  static constexpr int64_t kHeaderBytes = 4096;
  static constexpr int64_t kMinCapacity = 4096;
  static constexpr int64_t kMaxCapacity = int64_t{1} << 30;

  // Whether `capacity` is a power of two in [kMinCapacity, kMaxCapacity].
  static bool ValidCapacity(int64_t capacity) {
    return capacity >= kMinCapacity && capacity <= kMaxCapacity &&
           (capacity & (capacity - 1)) == 0;
  }

  // The segment name of link `id` for a job whose data-plane secret is
  // `secret`: "/lockstep-<24 hex of an HMAC of (group, from, to)>-<from>-<to>",
  // unguessable without the secret and distinct per job group and link.
  static std::string SegmentName(const std::string& secret, const ShmLinkId& id);

  // Opens (creating if needed) segment `name` as `side` of link `id` with a
  // ring of `capacity` bytes (a power of two in [kMinCapacity,
  // kMaxCapacity]). Waits for a peer that is initializing the header until
  // `deadline`. Errors: InvalidArgumentError (capacity), UnavailableError
  // (shm_open/ftruncate/mmap failed, naming the segment and errno),
  // PermissionDeniedError (the file belongs to another user or others may
  // read it), FailedPreconditionError (the segment was made for another
  // link, size, version or world, naming both), DeadlineExceededError (the
  // peer's header never became ready).
  // A failed Open changes nothing in a segment it did not create (the
  // peer's link stays intact); one it created is removed again. `cancel`
  // (may be null) ends the waits for the peer early (CancelledError is not
  // used: DeadlineExceededError). `progress` (may be null; not owned, must
  // outlive the link) is touched whenever Write or Consume moves bytes.
  static absl::StatusOr<std::unique_ptr<ShmLink>> Open(const std::string& name, Side side,
                                                       const ShmLinkId& id, int64_t capacity,
                                                       absl::Time deadline,
                                                       const std::atomic<bool>* cancel = nullptr,
                                                       ProgressMark* progress = nullptr);

  // Removes the names of this user's /dev/shm/lockstep-* segments last
  // modified more than `older_than` ago (a link's name matters only until
  // both sides attached, seconds after it was made; mappings stay valid).
  // Returns how many it removed.
  static int RemoveStaleSegments(absl::Duration older_than);

  // Marks this side closed (the peer's waits end: a reader after consuming
  // what was written), wakes the peer, unlinks the name if the peer never
  // came, unmaps.
  ~ShmLink();
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  const std::string& name() const { return name_; }
  int64_t capacity() const { return capacity_; }
  bool peer_attached();  // and unlinks the name the first time it is true
  bool peer_closed() const;

  // Writer side. Copies as much of a then b as fits (a first), publishes it
  // and wakes a sleeping reader; returns the bytes written (0 when full).
  // UnavailableError once the reader closed.
  absl::StatusOr<size_t> Write(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b = {});
  // Waits until at least one byte is free. UnavailableError once the reader
  // closed, CancelledError after Cancel(), DeadlineExceededError.
  absl::Status WaitForSpace(absl::Time deadline);

  // Reader side. Bytes readable now (DataLossError if the indices are
  // corrupt).
  absl::StatusOr<size_t> Available();
  // Copies n bytes starting `offset` bytes past the read position (the
  // caller checked Available() >= offset + n).
  void Peek(size_t offset, uint8_t* out, size_t n) const;
  // Releases n bytes (n <= Available()) and wakes a writer waiting for
  // space.
  void Consume(size_t n);
  // Waits until Available() >= n (n <= capacity), spinning first for `spin`.
  // UnavailableError when the writer closed with fewer bytes left,
  // CancelledError after Cancel(), DeadlineExceededError, DataLossError.
  absl::Status WaitForData(size_t n, absl::Time deadline, absl::Duration spin);

  // Ends every current and future wait of this process on this link with
  // CancelledError. Any thread.
  void Cancel();

 private:
  struct Layout;
  ShmLink(std::string name, Side side, int64_t capacity, uint8_t* base, size_t map_bytes,
          ProgressMark* progress);
  Layout* layout() const;
  uint8_t* data() const { return base_ + kHeaderBytes; }
  absl::Status Corrupt(uint64_t head, uint64_t tail) const;
  void RemoveName();  // shm_unlink, once per segment

  const std::string name_;
  const Side side_;
  const int64_t capacity_;
  uint8_t* const base_;
  const size_t map_bytes_;
  ProgressMark* const progress_;  // nullable
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> unlinked_{false};
  uint64_t local_ = 0;  // head (writer) or tail (reader): only this side moves it
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_SHM_LINK_H_
