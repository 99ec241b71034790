#include "common/log_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, log_format, "text",
          "Log line format: text (one human-readable line per event: time, level, component, "
          "message, key=value fields) or json (one JSON object per line)");
ABSL_FLAG(std::string, log_level, "info",
          "Lowest level logged: debug, info, warn or error");

namespace lockstep {

absl::StatusOr<LogOptions> LogOptionsFromFlags() {
  LogOptions options;
  absl::StatusOr<LogFormat> format = ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!format.ok()) return format.status();
  absl::StatusOr<LogLevel> level = ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) return level.status();
  options.format = *format;
  options.min_level = *level;
  return options;
}

}  // namespace lockstep
