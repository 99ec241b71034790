#include "common/token_file.h"

#include <cstdint>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace lockstep {
namespace {

constexpr size_t kMaxTokenBytes = 4096;

}  // namespace

absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag, const std::string& path,
                                          size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path, " (missing or not readable)"));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string data = buf.str();
  if (data.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is ", data.size(), " bytes, expected at most ", limit));
  }
  return data;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  uint32_t diff = static_cast<uint32_t>(a.size() ^ b.size());
  if (b.empty()) return a.empty();
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<uint8_t>(a[i]) ^ static_cast<uint8_t>(b[i % b.size()]);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> data = ReadSmallFile(flag, path, kMaxTokenBytes);
  if (!data.ok()) return data.status();
  const absl::string_view token = absl::StripAsciiWhitespace(*data);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": ", path, " must hold one token of printable ASCII without spaces"));
    }
  }
  return std::string(token);
}

}  // namespace lockstep
