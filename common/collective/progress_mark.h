// When bytes last moved on one job's data plane (PeerWait measures a wait
// from the later of its start and this, so a slow but live transfer is not
// taken for a stuck one; common/collective/peer_wait.h).
//
// The data plane's I/O loops call Touch() whenever a read or write moved at
// least one byte (psnet::ReadFully / WriteFully for the ps clients over raw
// TCP; the raw-TCP ring's Recv, direct Send and outbox writer thread; the
// shared-memory ring's copies into and out of its links), and the gRPC ring
// per message received or written (a segment, at most 2 MiB).
// Thread-safe: any thread may Touch or read; a steady-clock reading and a
// relaxed compare-and-swap (tens of nanoseconds), so the loops may call it
// per system call. One mark per job, not per link: bytes on any of the
// job's links restart every wait of that rank (bounded: those transfers
// end, and a stalled ring stalls every link within a segment).
#ifndef LOCKSTEP_COMMON_COLLECTIVE_PROGRESS_MARK_H_
#define LOCKSTEP_COMMON_COLLECTIVE_PROGRESS_MARK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace lockstep {

class ProgressMark {
 public:
  // A monotonic clock: a wall-clock step must not make a wait look longer.
  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void Touch() { TouchAt(SteadyNanos()); }
  // As Touch, at steady-clock time `ns` (tests). Never moves the mark back
  // (a thread preempted between its clock reading and its store must not
  // hide a newer touch): a compare-and-swap that keeps the larger time.
  void TouchAt(int64_t ns) {
    int64_t seen = last_ns_.load(std::memory_order_relaxed);
    while (seen < ns &&
           !last_ns_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
    }
  }
  // The last Touch's steady-clock time; 0 = never.
  int64_t last_ns() const { return last_ns_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> last_ns_{0};
};

// Touches `mark` if there is one (callers take an optional mark).
inline void TouchProgress(ProgressMark* mark) {
  if (mark != nullptr) mark->Touch();
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_PROGRESS_MARK_H_
