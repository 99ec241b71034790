// Clock: an injectable source of the current time, so logic that decides on
// elapsed time ("worker lost after 3 s without a heartbeat", throughput) can
// be tested with a FakeClock instead of sleeping.
//
// Waits that block a thread (absl::Mutex::AwaitWithDeadline,
// CondVar::WaitWithDeadline) keep using real time; only decisions read the
// injected Clock.
//
// Thread-safety: every implementation's methods may be called concurrently
// from any number of threads.
#ifndef LOCKSTEP_COMMON_CLOCK_H_
#define LOCKSTEP_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class Clock {
 public:
  virtual ~Clock() = default;
  // The current time. Thread-safe.
  virtual absl::Time Now() = 0;
};

// absl::Now(): wall-clock time.
class RealClock final : public Clock {
 public:
  absl::Time Now() override;
};

// A clock that only moves when told to. Starts at `start` (default: the Unix
// epoch + 1e9 s, an arbitrary fixed instant well after 1970 so Unix-second
// conversions are positive and readable).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1000000000));
  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  absl::Time Now() override;
  // Moves the clock by `d` (may be negative; the clock does not enforce
  // monotonicity, so tests can exercise clock steps).
  void Advance(absl::Duration d);
  // Sets the clock to `t`.
  void Set(absl::Time t);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_CLOCK_H_
