// The one definition of how a vector of n elements is cut into contiguous
// parts: ring all-reduce chunks and parameter-server shards both use it, so
// every component agrees on the layout.
//
// Part i of `parts` covers [begin, end); the first n % parts parts have
// n / parts + 1 elements, the rest n / parts (sizes differ by at most one;
// parts are empty when n < parts). Parts are in order and tile [0, n).
//
// Preconditions (programming errors, checked with an abort): n >= 0,
// parts >= 1, 0 <= i < parts, 0 <= index < n. Pure functions, thread-safe.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_CHUNKING_H_
#define LOCKSTEP_COMMON_COLLECTIVE_CHUNKING_H_

#include <cstdint>

namespace lockstep {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

inline bool operator==(const Range& a, const Range& b) {
  return a.begin == b.begin && a.end == b.end;
}

// Bounds of part i of n elements cut into `parts` parts.
Range ChunkBounds(int64_t n, int parts, int i);

// Parameter-server layout: shard s of a parameter vector of n elements held
// by `shards` servers. Identical to ChunkBounds.
inline Range ShardBounds(int64_t n, int shards, int s) {
  return ChunkBounds(n, shards, s);
}

// The shard (equivalently chunk) that holds element `index`:
// ShardBounds(n, shards, ShardOf(n, shards, index)) contains index.
int ShardOf(int64_t n, int shards, int64_t index);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_CHUNKING_H_
