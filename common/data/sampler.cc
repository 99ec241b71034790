#include "common/data/sampler.h"

#include <algorithm>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace lockstep {

std::pair<int64_t, int64_t> SliceBounds(int64_t len, int rank, int world) {
  ABSL_RAW_CHECK(len >= 0, "SliceBounds: negative length");
  ABSL_RAW_CHECK(world > 0 && rank >= 0 && rank < world,
                 "SliceBounds: rank out of [0, world)");
  const int64_t base = len / world;
  const int64_t extra = len % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  const int64_t end = begin + base + (rank < extra ? 1 : 0);
  return {begin, end};
}

uint64_t SplitMix64Next(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Xoshiro256StarStar::Xoshiro256StarStar(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t& s : s_) s = SplitMix64Next(&sm);
  // splitmix64 never yields four zero words in a row from any seed, so the
  // all-zero (absorbing) state cannot occur.
}

uint64_t Xoshiro256StarStar::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Xoshiro256StarStar::Bounded(uint64_t bound) {
  ABSL_RAW_CHECK(bound > 0, "Bounded: bound must be positive");
  // Lemire, "Fast Random Integer Generation in an Interval" (2019).
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) *
                        static_cast<unsigned __int128>(bound);
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) *
          static_cast<unsigned __int128>(bound);
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

void EpochPermutationInto(int64_t n, uint64_t seed, int64_t epoch,
                          std::vector<int64_t>* perm) {
  // Derive the stream seed from (seed, epoch) through two splitmix64
  // finalisations so nearby seeds/epochs give unrelated streams.
  uint64_t a = seed;
  uint64_t b = static_cast<uint64_t>(epoch) ^ 0xD1B54A32D192ED03ull;
  const uint64_t stream = SplitMix64Next(&a) ^ Rotl(SplitMix64Next(&b), 17);
  Xoshiro256StarStar rng(stream);
  perm->resize(n);
  int64_t* p = perm->data();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j =
        static_cast<int64_t>(rng.Bounded(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
}

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm;
  EpochPermutationInto(n, seed, epoch, &perm);
  return perm;
}

namespace {

absl::Status CheckArgs(int64_t n, int64_t batch, bool drop_last) {
  if (n <= 0 || batch <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GlobalBatchSampler: num_examples (%d) and global_batch (%d) must be "
        "positive",
        n, batch));
  }
  if (drop_last && batch > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GlobalBatchSampler: drop_last with global_batch %d > num_examples "
        "%d leaves no full batch",
        batch, n));
  }
  return absl::OkStatus();
}

int64_t StepsPerEpoch(int64_t n, int64_t batch, bool drop_last) {
  if (n <= 0 || batch <= 0) return 1;  // only reached before the abort
  return drop_last ? n / batch : (n + batch - 1) / batch;
}

}  // namespace

absl::StatusOr<GlobalBatchSampler> GlobalBatchSampler::Create(
    int64_t num_examples, int64_t global_batch, uint64_t seed, bool drop_last) {
  if (absl::Status s = CheckArgs(num_examples, global_batch, drop_last);
      !s.ok()) {
    return s;
  }
  return GlobalBatchSampler(num_examples, global_batch, seed, drop_last);
}

GlobalBatchSampler::GlobalBatchSampler(int64_t num_examples,
                                       int64_t global_batch, uint64_t seed,
                                       bool drop_last)
    : n_(num_examples),
      batch_(global_batch),
      seed_(seed),
      drop_last_(drop_last),
      steps_per_epoch_(StepsPerEpoch(num_examples, global_batch, drop_last)) {
  ABSL_RAW_CHECK(CheckArgs(num_examples, global_batch, drop_last).ok(),
                 "GlobalBatchSampler: invalid arguments (use Create() to get "
                 "a Status)");
}

GlobalBatchSampler::GlobalBatchSampler(const GlobalBatchSampler& other)
    : n_(other.n_),
      batch_(other.batch_),
      seed_(other.seed_),
      drop_last_(other.drop_last_),
      steps_per_epoch_(other.steps_per_epoch_) {
  absl::MutexLock lock(&other.mu_);
  cached_epoch_ = other.cached_epoch_;
  perm_ = other.perm_;
}

int64_t GlobalBatchSampler::BatchSize(int64_t step) const {
  ABSL_RAW_CHECK(step >= 0, "BatchSize: negative step");
  const int64_t pos = step % steps_per_epoch_;
  return std::min(batch_, n_ - pos * batch_);
}

void GlobalBatchSampler::LoadEpoch(int64_t epoch) {
  if (cached_epoch_ == epoch) return;
  EpochPermutationInto(n_, seed_, epoch, &perm_);  // reuses perm_'s buffer
  cached_epoch_ = epoch;
}

std::vector<int64_t> GlobalBatchSampler::Batch(int64_t step) {
  ABSL_RAW_CHECK(step >= 0, "Batch: negative step");
  const int64_t pos = step % steps_per_epoch_;
  const int64_t begin = pos * batch_;
  const int64_t end = begin + BatchSize(step);
  absl::MutexLock lock(&mu_);
  LoadEpoch(EpochOf(step));
  return std::vector<int64_t>(perm_.begin() + begin, perm_.begin() + end);
}

std::vector<int64_t> GlobalBatchSampler::Slice(int64_t step, int rank,
                                               int world) {
  std::vector<int64_t> out;
  SliceInto(step, rank, world, &out);
  return out;
}

void GlobalBatchSampler::SliceInto(int64_t step, int rank, int world,
                                   std::vector<int64_t>* out) {
  ABSL_RAW_CHECK(step >= 0, "Slice: negative step");
  const std::pair<int64_t, int64_t> s =
      SliceBounds(BatchSize(step), rank, world);
  const int64_t begin = (step % steps_per_epoch_) * batch_ + s.first;
  const int64_t end = begin + (s.second - s.first);
  absl::MutexLock lock(&mu_);
  LoadEpoch(EpochOf(step));
  out->assign(perm_.begin() + begin, perm_.begin() + end);
}

}  // namespace lockstep
