// Test-only helpers: temp paths under $TEST_TMPDIR and file writers.
#ifndef LOCKSTEP_COMMON_DATA_TEST_UTIL_H_
#define LOCKSTEP_COMMON_DATA_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {
namespace testing_util {

// $TEST_TMPDIR/<name> (falls back to /tmp when unset).
std::string TempPath(std::string_view name);

// Writes `bytes` to `path`, replacing it; aborts on failure.
void WriteFile(const std::string& path, std::string_view bytes);

// Writes `bytes` gzip-compressed via zlib's gzopen/gzwrite; aborts on
// failure.
void WriteGzipFile(const std::string& path, std::string_view bytes);

// Serialises an IDX file: magic 0x0000<type><dims.size()>, big-endian dims,
// then `payload` verbatim (already big-endian element bytes).
std::string IdxBytes(uint8_t type, const std::vector<uint32_t>& dims,
                     std::string_view payload);

}  // namespace testing_util
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_TEST_UTIL_H_
