// Test sizes for the ThreadSanitizer run.
//
// TSan runs instrumented code 5-15x slower, and memory-heavy cases (100 MiB
// messages, million-float buffers) far more. `--config=tsan` (.bazelrc) sets
// LOCKSTEP_TEST_SCALE=small for every test; a test whose full parameter set
// takes minutes under TSan asks SmallTestScale() and runs a smaller set that
// keeps its concurrency (same thread counts, same code paths), so races are
// still found. Every other build runs the full set.
#ifndef LOCKSTEP_TESTS_TSAN_TEST_SCALE_H_
#define LOCKSTEP_TESTS_TSAN_TEST_SCALE_H_

#include <cstdlib>
#include <cstring>

namespace lockstep {

inline bool SmallTestScale() {
  const char* scale = std::getenv("LOCKSTEP_TEST_SCALE");
  return scale != nullptr && std::strcmp(scale, "small") == 0;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_TSAN_TEST_SCALE_H_
