#include "common/data/text_util.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace text_internal {

bool LineReader::Next(std::string_view* line, int64_t* line_no) {
  if (pos_ >= text_.size()) return false;
  size_t end = text_.find('\n', pos_);
  if (end == std::string_view::npos) end = text_.size();
  std::string_view l = text_.substr(pos_, end - pos_);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  pos_ = end + 1;
  *line = l;
  *line_no = ++line_no_;
  return true;
}

std::string_view Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

bool ParseFiniteFloat(std::string_view s, float* out) {
  // SimpleAtof tolerates surrounding whitespace; callers pass trimmed text
  // and we insist the first and last characters are not spaces anyway.
  if (s.empty() || s.front() == ' ' || s.back() == ' ') return false;
  float v;
  if (!absl::SimpleAtof(absl::string_view(s.data(), s.size()), &v)) {
    return false;
  }
  if (!std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool ParseInt64(std::string_view s, int64_t* out) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ') return false;
  return absl::SimpleAtoi(absl::string_view(s.data(), s.size()), out);
}

std::string_view Excerpt(std::string_view s) {
  return s.size() <= 40 ? s : s.substr(0, 40);
}

}  // namespace text_internal
}  // namespace lockstep
