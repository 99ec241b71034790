// A uint64 as 8 floats of one byte each (0..255), for values that travel
// through a combine (the dataset agreement, the replica identities): exact
// in float32 and in the 16-bit wire formats, and when each slot has one
// non-zero contributor the sums are the values themselves however large
// they are (a float32 count is inexact beyond 2^24). Internal to
// //worker:job_runner.
#ifndef LOCKSTEP_WORKER_FLOAT_BYTES_H_
#define LOCKSTEP_WORKER_FLOAT_BYTES_H_

#include <cstdint>

namespace lockstep {

// Writes out[0..8).
inline void PutBytes(uint64_t v, float* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<float>((v >> (8 * i)) & 0xff);
}
// Reads in[0..8).
inline uint64_t GetBytes(const float* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_FLOAT_BYTES_H_
