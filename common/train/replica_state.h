// ReplicaState: a replica's complete training state at a step boundary, as
// bytes, so one rank can hand it to another (divergence repair, a late
// joiner) and the receiver continues the job exactly as the sender would.
//
// What "complete" means: the parameters, the optimizer state (its step count
// and slots: momentum, Adam moments) and the next step to run. Nothing else
// is needed: the sampler (GlobalBatchSampler) is a pure function of (seed,
// step), and the learning rate a pure function of the step, so the next step
// IS the sampler position. The dataset is not part of the state (every rank
// loads its own and the ranks agree on its contents before step 0).
//
// Format, version 1 (integers little-endian, 56-byte header then the body):
//   0  "LKRS"             magic
//   4  u32 version = 1
//   8  u64 next_step      the step the receiver runs next (>= 0)
//   16 u64 num_params     N
//   24 u64 opt_steps      Optimizer::steps()
//   32 u64 num_slots      S (0, N or 2N: Optimizer::num_slots())
//   40 u64 hash_hi, 48 u64 hash_lo  HashReplica(params, opt_steps, slots)
//   56 N float32 params, then S float32 slots (raw little-endian bytes)
// Total bytes = 56 + 4 (N + S). The hash doubles as the state's identity:
// two replicas are bit-identical (weights AND optimizer) iff it is equal.
//
// Sizes are checked against the receiving job BEFORE anything is allocated:
// ExpectedStateBytes(replica) is the only size a receiver accepts, so a
// header from the network cannot make it allocate more.
//
// Thread-safety: free functions are pure; a Replica passed in is used by the
// calling thread only.
#ifndef LOCKSTEP_COMMON_TRAIN_REPLICA_STATE_H_
#define LOCKSTEP_COMMON_TRAIN_REPLICA_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/optim/hash.h"
#include "common/train/replica.h"

namespace lockstep {

inline constexpr int64_t kReplicaStateHeaderBytes = 56;

struct ReplicaStateHeader {
  int64_t next_step = 0;
  int64_t num_params = 0;
  int64_t optimizer_steps = 0;
  int64_t num_slots = 0;
  WeightHash hash;  // HashReplica of the body
  int64_t total_bytes() const { return kReplicaStateHeaderBytes + 4 * (num_params + num_slots); }
};

// The bytes of `replica`'s state (header + body) for a receiver that runs
// `next_step` next.
std::string EncodeReplicaState(const Replica& replica, int64_t next_step);

// The exact size of a state that fits `replica` (its N and S).
int64_t ExpectedStateBytes(const Replica& replica);

// HashReplica of `replica` (parameters and optimizer state).
WeightHash ReplicaIdentity(const Replica& replica);

// Parses and checks the first kReplicaStateHeaderBytes of `bytes`:
// INVALID_ARGUMENT naming what is wrong (short input, magic, version,
// negative numbers), FAILED_PRECONDITION when N or S differ from
// `expected_params` / `expected_slots` ("state has 10 parameters, this job's
// model has 12"). Does not look at the body.
absl::StatusOr<ReplicaStateHeader> ParseReplicaStateHeader(absl::string_view bytes,
                                                           int64_t expected_params,
                                                           int64_t expected_slots);

// Checks `bytes` completely (header as above, length, hash of the body) and
// only then overwrites `replica`'s parameters and optimizer state. Returns
// the next step. On error `replica` is unchanged; DATA_LOSS when the length
// or the hash does not match the header.
absl::StatusOr<int64_t> RestoreReplicaState(absl::string_view bytes, Replica* replica);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_REPLICA_STATE_H_
