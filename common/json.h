// JsonQuote: a string as a JSON string literal (quotes, backslashes and
// control characters escaped). For the few hand-written JSON lines the
// binaries print; structured output uses protobuf's JSON printer.
#ifndef LOCKSTEP_COMMON_JSON_H_
#define LOCKSTEP_COMMON_JSON_H_

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {

inline std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_JSON_H_
