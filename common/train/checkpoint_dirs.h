// The checkpoint directories (JobSpec.checkpoint_dir roots) this worker
// process wrote checkpoints to: what its ReplicaState.FetchCheckpoint
// serves from, so a peer can name no other directory (a resumed job's new
// rank 0 fetches the file from the busy writer: worker/net/state_service.h).
// In memory only: a restarted worker serves nothing it wrote before.
// Bounded (the newest kMax directories). Thread-safe.
#ifndef LOCKSTEP_COMMON_TRAIN_CHECKPOINT_DIRS_H_
#define LOCKSTEP_COMMON_TRAIN_CHECKPOINT_DIRS_H_

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

class CheckpointDirs {
 public:
  static constexpr size_t kMax = 64;
  // Trailing slashes do not count ("/ck/" is "/ck", as JobCheckpointDir
  // joins them).
  static std::string Normal(std::string dir) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir;
  }
  void Add(std::string dir) {
    dir = Normal(std::move(dir));
    absl::MutexLock l(&mu_);
    auto it = std::find(dirs_.begin(), dirs_.end(), dir);
    if (it != dirs_.end()) dirs_.erase(it);
    dirs_.push_back(dir);
    if (dirs_.size() > kMax) dirs_.pop_front();
  }
  bool Contains(const std::string& dir) const {
    const std::string n = Normal(dir);
    absl::MutexLock l(&mu_);
    return std::find(dirs_.begin(), dirs_.end(), n) != dirs_.end();
  }

 private:
  mutable absl::Mutex mu_;
  std::deque<std::string> dirs_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_CHECKPOINT_DIRS_H_
