#include "common/log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lockstep {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are
// not one (stray continuation byte, truncated or overlong sequence,
// surrogate, beyond U+10FFFF).
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t len = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return len;
}

void AppendControlEscape(std::string* out, unsigned char c) {
  switch (c) {
    case '\n': *out += "\\n"; return;
    case '\t': *out += "\\t"; return;
    case '\r': *out += "\\r"; return;
    case '\b': *out += "\\b"; return;
    case '\f': *out += "\\f"; return;
    default: {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    }
  }
}

// `s` as a JSON string literal (with the quotes).
void AppendJsonString(std::string* out, absl::string_view s) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"') {
        *out += "\\\"";
      } else if (c == '\\') {
        *out += "\\\\";
      } else if (c < 0x20) {
        AppendControlEscape(out, c);
      } else {
        *out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      *out += "\\ufffd";
      ++i;
    } else {
      out->append(s.data() + i, len);
      i += len;
    }
  }
  *out += '"';
}

// A text-format message: control characters escaped, the rest kept.
void AppendTextMessage(std::string* out, absl::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      AppendControlEscape(out, c);
    } else {
      *out += static_cast<char>(c);
    }
  }
}

bool NeedsQuotes(absl::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= 0x20 || c == '"' || c == '=' || c == '\\' || c == 0x7F) return true;
  }
  return false;
}

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
  }
  return "INFO";
}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text, absl::string_view flag) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "debug") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warn") return LogLevel::kWarn;
  if (t == "error") return LogLevel::kError;
  std::string got;
  AppendJsonString(&got, text);
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": expected debug, info, warn or error, got ", got));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text, absl::string_view flag) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "text") return LogFormat::kText;
  if (t == "json") return LogFormat::kJson;
  std::string got;
  AppendJsonString(&got, text);
  return absl::InvalidArgumentError(absl::StrCat(flag, ": expected text or json, got ", got));
}

LogField::LogField(absl::string_view key, absl::string_view value)
    : key_(key), value_(value), kind_(Kind::kString) {}

LogField::LogField(absl::string_view key, bool value)
    : key_(key), value_(value ? "true" : "false"), kind_(Kind::kBool) {}

LogField::LogField(absl::string_view key, double value) : key_(key) {
  if (std::isnan(value)) {
    value_ = "nan";
    kind_ = Kind::kString;
  } else if (std::isinf(value)) {
    value_ = value > 0 ? "inf" : "-inf";
    kind_ = Kind::kString;
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", value);
    value_ = buf;
    kind_ = Kind::kNumber;
  }
}

void FdLogSink::Write(absl::string_view line) {
  absl::MutexLock lock(&mu_);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere to report a failing log stream
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void StringLogSink::Write(absl::string_view line) {
  absl::MutexLock lock(&mu_);
  text_.append(line.data(), line.size());
}

std::string StringLogSink::contents() const {
  absl::MutexLock lock(&mu_);
  return text_;
}

std::vector<std::string> StringLogSink::lines() const {
  const std::string text = contents();
  std::vector<std::string> out = absl::StrSplit(text, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string FormatLogTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

Logger::Logger(std::shared_ptr<LogSink> sink, std::shared_ptr<Clock> clock, LogOptions options)
    : sink_(std::move(sink)),
      clock_(clock != nullptr ? std::move(clock) : std::make_shared<RealClock>()),
      options_(options) {}

Logger Logger::Stderr(LogOptions options) {
  return Logger(std::make_shared<FdLogSink>(STDERR_FILENO), std::make_shared<RealClock>(),
                options);
}

Logger Logger::WithComponent(absl::string_view component) const {
  Logger copy = *this;
  copy.component_ = std::string(component);
  return copy;
}

Logger Logger::WithFields(std::initializer_list<LogField> fields) const {
  Logger copy = *this;
  copy.fields_.insert(copy.fields_.end(), fields.begin(), fields.end());
  return copy;
}

std::string Logger::FormatLine(absl::Time now, LogLevel level, absl::string_view msg,
                               const LogField* fields, size_t num_fields) const {
  std::string line;
  line.reserve(96 + msg.size());
  const absl::string_view level_name = LogLevelName(level);
  if (options_.format == LogFormat::kJson) {
    line += "{\"ts\":\"";
    line += FormatLogTime(now);
    line += "\",\"level\":\"";
    line.append(level_name.data(), level_name.size());
    line += "\",\"component\":";
    AppendJsonString(&line, component_);
    line += ",\"msg\":";
    AppendJsonString(&line, msg);
    const auto append = [&line](const LogField& f) {
      line += ',';
      AppendJsonString(&line, f.key());
      line += ':';
      if (f.kind() == LogField::Kind::kString) {
        AppendJsonString(&line, f.value());
      } else {
        line += f.value();
      }
    };
    for (const LogField& f : fields_) append(f);
    for (size_t i = 0; i < num_fields; ++i) append(fields[i]);
    line += "}\n";
    return line;
  }
  line += FormatLogTime(now);
  line += ' ';
  line.append(level_name.data(), level_name.size());
  line.append(6 - level_name.size(), ' ');  // "INFO  ", "ERROR "
  if (!component_.empty()) {
    AppendTextMessage(&line, component_);
    line += ": ";
  }
  AppendTextMessage(&line, msg);
  const auto append = [&line](const LogField& f) {
    line += ' ';
    AppendTextMessage(&line, f.key());
    line += '=';
    if (NeedsQuotes(f.value())) {
      AppendJsonString(&line, f.value());
    } else {
      line += f.value();
    }
  };
  for (const LogField& f : fields_) append(f);
  for (size_t i = 0; i < num_fields; ++i) append(fields[i]);
  line += '\n';
  return line;
}

void Logger::Log(LogLevel level, absl::string_view msg,
                 std::initializer_list<LogField> fields) const {
  if (!Enabled(level) || sink_ == nullptr) return;
  sink_->Write(FormatLine(clock_->Now(), level, msg, fields.begin(), fields.size()));
}

void Logger::Log(LogLevel level, absl::string_view msg,
                 const std::vector<LogField>& fields) const {
  if (!Enabled(level) || sink_ == nullptr) return;
  sink_->Write(FormatLine(clock_->Now(), level, msg, fields.data(), fields.size()));
}

DeferredLog::~DeferredLog() {
  for (const Entry& e : entries_) logger_->Log(e.level, e.msg, e.fields);
}

void DeferredLog::Add(LogLevel level, std::string msg, std::vector<LogField> fields) {
  if (logger_ == nullptr || !logger_->Enabled(level)) return;
  entries_.push_back(Entry{level, std::move(msg), std::move(fields)});
}

Logger LoggerOrStderr(const Logger* logger, absl::string_view component) {
  return (logger != nullptr ? *logger : Logger::Stderr()).WithComponent(component);
}

}  // namespace lockstep
