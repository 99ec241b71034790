// Deterministic global-batch sampler for data-parallel training.
//
// Every worker constructs the same GlobalBatchSampler(n, B, seed) and so
// sees the same global batches without communicating: the permutation of
// epoch e is a pure function of (n, seed, e), computed with a self-contained
// PRNG (splitmix64 seeding xoshiro256**, Fisher-Yates with Lemire's unbiased
// bounded draw), so it is identical across compilers, standard libraries
// and platforms (std::shuffle / std::uniform_int_distribution are not).
//
// Steps and epochs: step t belongs to epoch t / steps_per_epoch() and is
// batch number t % steps_per_epoch() of that epoch's permutation.
//   drop_last = false (default): steps_per_epoch = ceil(n / B); the last
//     batch of each epoch is short (n mod B examples) when B does not divide
//     n. Every example is used exactly once per epoch.
//   drop_last = true: steps_per_epoch = floor(n / B); the n mod B examples
//     at the tail of each epoch's permutation are skipped (different ones
//     each epoch). Requires B <= n.
#ifndef LOCKSTEP_COMMON_DATA_SAMPLER_H_
#define LOCKSTEP_COMMON_DATA_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

// Contiguous share of a length-`len` range for `rank` of `world`:
// the first (len mod world) ranks get one extra element, so sizes differ by
// at most one, and a rank gets 0 elements when len < world. Concatenating
// the ranges for rank = 0..world-1 gives [0, len). Pure.
// Requires len >= 0 and 0 <= rank < world (checked: aborts otherwise).
std::pair<int64_t, int64_t> SliceBounds(int64_t len, int rank, int world);

// splitmix64 step: advances *state and returns the next output. Exposed for
// tests and for other deterministic consumers.
uint64_t SplitMix64Next(uint64_t* state);

// xoshiro256** (Blackman & Vigna), seeded from a 64-bit value via
// splitmix64. Deterministic and platform-independent. Not thread-safe.
class Xoshiro256StarStar {
 public:
  explicit Xoshiro256StarStar(uint64_t seed);
  uint64_t Next();
  // Uniform integer in [0, bound) without modulo bias (Lemire 2019).
  // Requires bound > 0.
  uint64_t Bounded(uint64_t bound);

 private:
  uint64_t s_[4];
};

// The permutation of [0, n) used for `epoch`: a pure function of
// (n, seed, epoch).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);
// The same permutation written into *perm (resized to n; no allocation when
// its capacity suffices).
void EpochPermutationInto(int64_t n, uint64_t seed, int64_t epoch,
                          std::vector<int64_t>* perm);

// Thread-safe (internally locked): the cached permutation of the current
// epoch is recomputed only when a step from another epoch is requested.
class GlobalBatchSampler {
 public:
  // InvalidArgumentError if n <= 0, global_batch <= 0, or drop_last with
  // global_batch > n (no full batch).
  static absl::StatusOr<GlobalBatchSampler> Create(int64_t num_examples,
                                                   int64_t global_batch,
                                                   uint64_t seed,
                                                   bool drop_last = false);
  // Same contract as Create, but invalid arguments are a programming error
  // (aborts).
  GlobalBatchSampler(int64_t num_examples, int64_t global_batch, uint64_t seed,
                     bool drop_last = false);

  GlobalBatchSampler(const GlobalBatchSampler& other);
  GlobalBatchSampler& operator=(const GlobalBatchSampler&) = delete;

  int64_t num_examples() const { return n_; }
  int64_t global_batch() const { return batch_; }
  uint64_t seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t EpochOf(int64_t step) const { return step / steps_per_epoch_; }

  // Number of examples in the global batch of `step` (B, or the short tail
  // with drop_last = false).
  int64_t BatchSize(int64_t step) const;

  // The global batch of `step` (>= 0): example indices in permutation order.
  // Independent of the number of workers.
  std::vector<int64_t> Batch(int64_t step);

  // Rank `rank`'s contiguous slice of Batch(step), per SliceBounds.
  // Requires 0 <= rank < world.
  std::vector<int64_t> Slice(int64_t step, int rank, int world);
  // Slice(step, rank, world) written into *out, reusing its capacity: after
  // the first call of a job (and the first epoch's permutation) a training
  // step's slice allocates nothing, also when an epoch ends (the next
  // permutation is computed into the cached one's buffer).
  void SliceInto(int64_t step, int rank, int world, std::vector<int64_t>* out);

 private:
  // Ensures perm_ holds epoch `epoch`'s permutation.
  void LoadEpoch(int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t n_;
  const int64_t batch_;
  const uint64_t seed_;
  const bool drop_last_;
  const int64_t steps_per_epoch_;

  mutable absl::Mutex mu_;
  int64_t cached_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int64_t> perm_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_SAMPLER_H_
