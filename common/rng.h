// Deterministic, platform-independent pseudo-random numbers.
//
// SplitMix64 (Steele, Lea, Flood 2014): the same seed gives the same
// sequence on every machine and compiler, unlike std:: distributions whose
// outputs are implementation-defined. Used for weight initialisation.
#ifndef LOCKSTEP_COMMON_RNG_H_
#define LOCKSTEP_COMMON_RNG_H_

#include <cstdint>

namespace lockstep {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits: exactly representable in float,
  // so the result has the same bits everywhere.
  float NextFloat() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }

 private:
  uint64_t state_;
};

// Mixes two values into a seed (e.g. a job seed and a layer index).
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  SplitMix64 r(a ^ (b * 0xD1B54A32D192ED03ULL));
  return r.Next();
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RNG_H_
