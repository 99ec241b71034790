#include "common/collective/chunking.h"

#include <algorithm>

#include "absl/base/internal/raw_logging.h"

namespace lockstep {

Range ChunkBounds(int64_t n, int parts, int i) {
  ABSL_RAW_CHECK(n >= 0, "ChunkBounds: n must be >= 0");
  ABSL_RAW_CHECK(parts >= 1, "ChunkBounds: parts must be >= 1");
  ABSL_RAW_CHECK(i >= 0 && i < parts, "ChunkBounds: i must be in [0, parts)");
  const int64_t q = n / parts;
  const int64_t rem = n % parts;
  Range r;
  r.begin = i * q + std::min<int64_t>(i, rem);
  r.end = r.begin + q + (i < rem ? 1 : 0);
  return r;
}

int ShardOf(int64_t n, int shards, int64_t index) {
  ABSL_RAW_CHECK(shards >= 1, "ShardOf: shards must be >= 1");
  ABSL_RAW_CHECK(index >= 0 && index < n, "ShardOf: index must be in [0, n)");
  const int64_t q = n / shards;
  const int64_t rem = n % shards;
  const int64_t big = rem * (q + 1);  // elements in the first rem (larger) parts
  if (index < big) return static_cast<int>(index / (q + 1));
  // index >= big implies q >= 1 (otherwise big == n > index).
  return static_cast<int>(rem + (index - big) / q);
}

}  // namespace lockstep
