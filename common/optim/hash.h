// Weight hashes for checking that replicas are bit-identical.
//
// Hashes are XXH3 (Debian's libxxhash, format frozen since xxHash 0.8.0, seed
// 0) over the RAW little-endian bytes of the float32 values in parameter
// order. No normalisation: -0.0 and 0.0 (or two NaN payloads) hash
// differently, because the claim being checked is bit identity. Equal bits
// give equal hashes on every machine; the build requires a little-endian
// IEEE-754 target (static_assert in hash.cc), so the in-memory bytes are the
// little-endian bytes.
//
// Thread-safety: free functions are pure and safe to call concurrently.
// A WeightHasher instance is not thread-safe; distinct instances are
// independent.
#ifndef LOCKSTEP_COMMON_OPTIM_HASH_H_
#define LOCKSTEP_COMMON_OPTIM_HASH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace lockstep {

// 128-bit XXH3 value; hi/lo are XXH128_hash_t::high64/low64.
struct WeightHash {
  uint64_t hi = 0;
  uint64_t lo = 0;

  // 32 lowercase hex digits, hi then lo (XXH128 canonical big-endian order).
  std::string ToHex() const;
  // The same 32 digits written to out[0, 32) (no terminating NUL) without
  // allocating: for a per-step report that reuses its string
  // (report.mutable_weights_hash()->assign(buf, kHexDigits)).
  static constexpr int kHexDigits = 32;
  void WriteHex(char* out) const;

  // The 128 bits folded into 64 (hi ^ lo * 2^64/phi): the replica identity
  // a combine carries (StepReporter::last_identity, the rollback's and the
  // final state's agreement). Equal hashes give equal folds.
  uint64_t Fold() const { return hi ^ (lo * 0x9e3779b97f4a7c15ull); }

  friend bool operator==(const WeightHash& a, const WeightHash& b) {
    return a.hi == b.hi && a.lo == b.lo;
  }
  friend bool operator!=(const WeightHash& a, const WeightHash& b) {
    return !(a == b);
  }
};

// Streaming XXH3-128 over several float tensors, equal to HashWeights of their
// concatenation: Update(a); Update(b); Finish() == HashWeights(a ++ b).
class WeightHasher {
 public:
  WeightHasher();  // aborts if libxxhash cannot allocate its state
  ~WeightHasher();
  WeightHasher(WeightHasher&&) noexcept;
  WeightHasher& operator=(WeightHasher&&) noexcept;
  WeightHasher(const WeightHasher&) = delete;
  WeightHasher& operator=(const WeightHasher&) = delete;

  // Appends the raw bytes of `values`. Empty spans are fine.
  void Update(absl::Span<const float> values);
  // Appends the 8 little-endian bytes of `value` (for framing / counters).
  void UpdateU64(uint64_t value);
  // Hash of everything appended since construction / Reset(). Does not
  // change the state: more Update() calls may follow.
  WeightHash Finish() const;
  // Back to the empty-input state.
  void Reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// XXH3_128bits(params bytes, seed 0). HashWeights({}) is XXH3-128 of "".
WeightHash HashWeights(absl::Span<const float> params);

// Per-block hashes to locate a mismatch: params split into consecutive blocks
// of `block_floats` floats (the last one may be shorter), each hashed with
// XXH3_64bits(seed 0). Returns ceil(size / block_floats) hashes (empty for
// empty params). Aborts if block_floats <= 0 (programming error).
inline constexpr int64_t kDefaultHashBlockFloats = int64_t{64} * 1024;
std::vector<uint64_t> BlockHashes(absl::Span<const float> params,
                                  int64_t block_floats);

// XXH3_64bits(seed 0) of one block's raw bytes: BlockHashes' hash of one
// block, for callers that choose their own blocks (a model's tensors) and
// must not allocate.
uint64_t HashBlock(absl::Span<const float> block);

// Indices i (ascending) where a[i] != b[i]. If the lengths differ, every index
// present in only the longer vector is also reported as differing.
std::vector<int64_t> DifferingBlocks(const std::vector<uint64_t>& a,
                                     const std::vector<uint64_t>& b);

// Identity of a whole replica: parameters AND optimizer state. XXH3-128 over
//   u64 num_params | params bytes | u64 steps | u64 num_slots | slots bytes
// (integers little-endian; the lengths frame the parts so bytes cannot shift
// between params and slots). Pass Optimizer::steps() and Optimizer::slots()
// (common/optim/optimizer.h). Not equal to HashWeights(params).
WeightHash HashReplica(absl::Span<const float> params, int64_t optimizer_steps,
                       absl::Span<const float> optimizer_slots);

// HashWeights(params) and HashBlock of each block in ONE pass over memory
// (a step report's weights hash and divergence-location hashes): each chunk
// of at most kChunkFloats floats is fed to the 128-bit hash and to its
// block's 64-bit hash while it is still in L1, so the weights are read from
// L2/L3/RAM once instead of twice. Results are bit-equal to the separate
// calls (XXH3 streaming equals one-shot). Block i is [starts[i],
// starts[i+1]) (the last one ends at params.size()); starts must ascend
// (values past params.size() are clamped); floats before starts[0] go into
// the 128-bit hash only. Holds two XXH3 states made once (no allocation per
// call). Not thread-safe; one per thread.
class FusedWeightHasher {
 public:
  static constexpr size_t kChunkFloats = 2048;  // 8 KiB
  FusedWeightHasher();  // aborts if libxxhash cannot allocate its states
  ~FusedWeightHasher();
  FusedWeightHasher(const FusedWeightHasher&) = delete;
  FusedWeightHasher& operator=(const FusedWeightHasher&) = delete;

  // Writes HashBlock of block i to block_hashes[i] (block_hashes.size() ==
  // starts.size()) and returns HashWeights(params).
  WeightHash Hash(absl::Span<const float> params, absl::Span<const int64_t> starts,
                  absl::Span<uint64_t> block_hashes);

  // The same, streamed, for a caller that produces the parameters chunk by
  // chunk (an optimizer step, UpdateObserver): Begin, then Update with
  // consecutive ranges [begin, end) of `params` covering [0, n), then Finish.
  // `starts` and `block_hashes` (not owned) must stay valid until Finish,
  // which writes the block hashes and returns the 128-bit hash: equal to
  // Hash(params, starts, block_hashes). Begin again to abandon a pass.
  void Begin(size_t n, absl::Span<const int64_t> starts, absl::Span<uint64_t> block_hashes);
  // Aborts unless begin == position() and end <= n (programming error).
  void Update(const float* params, size_t begin, size_t end);
  size_t position() const { return pos_; }  // floats fed since Begin
  // Aborts unless position() == n.
  WeightHash Finish();

 private:
  struct States;
  // The end of block i (the next start, or n).
  size_t BlockEnd(size_t i) const;
  size_t Clamp(int64_t v) const;
  // Digests the blocks that end at pos_ and moves to the next one.
  void AdvanceBlocks();

  std::unique_ptr<States> states_;
  size_t n_ = 0, pos_ = 0;
  absl::Span<const int64_t> starts_;
  absl::Span<uint64_t> blocks_;
  int64_t cur_ = -1;     // block being hashed (-1: the floats before the first)
  size_t cur_end_ = 0;   // where it ends
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_HASH_H_
