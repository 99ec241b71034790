#include "common/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace lockstep {

void TuneProcessForThroughput() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace lockstep
