// StateBoard: the replica states a worker offers to its peers
// (replica_state.h), keyed by (group, step boundary). The job thread
// publishes a state; the FetchState service (worker/net/state_service.h)
// serves it to a peer that asks for exactly that (group, step).
//
// Bounded: at most `capacity` states (oldest published evicted first), so a
// worker never holds more than a few copies of its model. A state stays
// until evicted or its group is removed (the job ended and nobody can still
// ask for it), so a slow fetcher finds it after the publisher moved on.
//
// Thread-safety: every method is thread-safe.
#ifndef LOCKSTEP_COMMON_TRAIN_STATE_BOARD_H_
#define LOCKSTEP_COMMON_TRAIN_STATE_BOARD_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

class StateBoard {
 public:
  explicit StateBoard(int capacity = 4) : capacity_(capacity < 1 ? 1 : capacity) {}

  // Offers `state` (EncodeReplicaState bytes) of `group` at boundary `step`
  // (the state's next step). Replaces an entry with the same key.
  void Publish(uint64_t group, int64_t step, std::string state);
  // The state published for (group, step), or nullptr.
  std::shared_ptr<const std::string> Find(uint64_t group, int64_t step) const;
  // Forgets every state of `group`.
  void Remove(uint64_t group);
  // "steps 4, 9" / "no step" of `group`, for a NOT_FOUND message.
  std::string Describe(uint64_t group) const;

 private:
  struct Entry {
    uint64_t group;
    int64_t step;
    std::shared_ptr<const std::string> state;
  };
  const int capacity_;
  mutable absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_STATE_BOARD_H_
