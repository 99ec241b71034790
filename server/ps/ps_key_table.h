// The job keys a parameter server's coordinator started on it, with their
// shape (K workers, S shards): what a lockstep-server shard's registry asks
// before it creates a key (PsRegistryLimits::key_shape), so that K and S
// come from the job, not from the first request. The coordinator sends
// them in its Control messages (server/ps_control.h StartKeys) when a ps
// job starts or regroups on --ps_addresses shards, and forgets them with
// the keys.
//
// Bounded: at most `capacity` keys; one more drops the oldest (a held
// shard is not affected: only keys not created yet are looked up).
// Thread-safe; Wait may block until its deadline, Set and Forget never
// block.
#ifndef LOCKSTEP_SERVER_PS_PS_KEY_TABLE_H_
#define LOCKSTEP_SERVER_PS_PS_KEY_TABLE_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/collective/ps_aggregator.h"

namespace lockstep {

class PsKeyTable {
 public:
  static constexpr int kDefaultCapacity = 4096;
  explicit PsKeyTable(int capacity = kDefaultCapacity);

  // Records (or replaces) `job`'s shape. InvalidArgument (nothing changes)
  // for K outside [1, PsShardRegistry::kMaxWorkers] or S outside
  // [1, PsShardRegistry::kMaxShards].
  absl::Status Set(uint64_t job, PsKeyShape shape);
  void Forget(uint64_t job);

  // `job`'s shape, waiting for it until `deadline` (capped at kMaxWait from
  // now). NotFound naming the key when it is not known by then;
  // ResourceExhausted at once when kMaxWaiters calls already wait (a flood
  // of requests for unknown keys holds no more than that many threads).
  absl::StatusOr<PsKeyShape> Wait(uint64_t job, absl::Time deadline) const;
  // The longest Wait waits (as a DataAddress waits for a secret).
  static constexpr absl::Duration kMaxWait = absl::Seconds(10);
  static constexpr int kMaxWaiters = 64;

  int size() const;
  int waiting() const;  // calls in Wait now

 private:
  const int capacity_;
  struct Entry {
    PsKeyShape shape;
    uint64_t seq = 0;  // when it was set
  };
  mutable absl::Mutex mu_;
  std::map<uint64_t, Entry> keys_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> order_ ABSL_GUARDED_BY(mu_);  // seq -> key, oldest first
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int waiters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_PS_KEY_TABLE_H_
