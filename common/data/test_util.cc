#include "common/data/test_util.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>

#include "absl/base/internal/raw_logging.h"

namespace lockstep {
namespace testing_util {

std::string TempPath(std::string_view name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string out = (dir != nullptr && *dir != '\0') ? dir : "/tmp";
  out += "/";
  out.append(name.data(), name.size());
  return out;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ABSL_RAW_CHECK(f != nullptr, "WriteFile: fopen failed");
  const size_t put = std::fwrite(bytes.data(), 1, bytes.size(), f);
  ABSL_RAW_CHECK(put == bytes.size(), "WriteFile: short write");
  ABSL_RAW_CHECK(std::fclose(f) == 0, "WriteFile: fclose failed");
}

void WriteGzipFile(const std::string& path, std::string_view bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ABSL_RAW_CHECK(f != nullptr, "WriteGzipFile: gzopen failed");
  if (!bytes.empty()) {
    const int put =
        gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    ABSL_RAW_CHECK(put == static_cast<int>(bytes.size()),
                   "WriteGzipFile: short gzwrite");
  }
  ABSL_RAW_CHECK(gzclose(f) == Z_OK, "WriteGzipFile: gzclose failed");
}

std::string IdxBytes(uint8_t type, const std::vector<uint32_t>& dims,
                     std::string_view payload) {
  std::string out;
  out.push_back(0);
  out.push_back(0);
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(dims.size()));
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((d >> shift) & 0xff));
    }
  }
  out.append(payload.data(), payload.size());
  return out;
}

}  // namespace testing_util
}  // namespace lockstep
