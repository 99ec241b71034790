// Internal helpers shared by the CSV and LIBSVM parsers. Not part of the
// public API of //common/data (visibility is package-private).
#ifndef LOCKSTEP_COMMON_DATA_TEXT_UTIL_H_
#define LOCKSTEP_COMMON_DATA_TEXT_UTIL_H_

#include <cstdint>
#include <string_view>

namespace lockstep {
namespace text_internal {

// Iterates the lines of a text buffer. Line numbers are 1-based; a trailing
// '\r' (CRLF files) is removed; a final line without '\n' is still a line.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  // Sets *line and *line_no to the next line; false at end of text.
  bool Next(std::string_view* line, int64_t* line_no);

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int64_t line_no_ = 0;
};

// Strips spaces and tabs at both ends.
std::string_view Trim(std::string_view s);

// Parses the whole of `s` (no surrounding spaces) as a finite float.
// Rejects empty text, trailing junk, nan, inf and out-of-range values.
bool ParseFiniteFloat(std::string_view s, float* out);

// Parses the whole of `s` as a decimal int64 (optional sign).
bool ParseInt64(std::string_view s, int64_t* out);

// `s` truncated to its first 40 characters, for error messages.
std::string_view Excerpt(std::string_view s);

}  // namespace text_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_TEXT_UTIL_H_
