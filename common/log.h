// Structured logging for the lockstep daemons: one line per event, each
// with a level, an RFC 3339 UTC timestamp with milliseconds, the component
// that logged it, a message and key-value fields (job, step, rank, worker,
// peer, ...).
//
// text (default; for people and grep):
//   2026-11-30T14:02:03.123Z INFO  worker: step done job=3 step=41 rank=1 loss=0.4123
//   The level is padded to 5 characters. A field value that is empty or
//   holds a space, '=', '"', '\' or a control character is written as a
//   JSON string literal (reason="cancelled by user"); control characters in
//   the message are escaped (\n), so an event is always one line.
// json (one object per line; for log collectors):
//   {"ts":"2026-11-30T14:02:03.123Z","level":"INFO","component":"worker",
//    "msg":"step done","job":3,"step":41,"rank":1,"loss":0.4123}
//   Keys in that order, then the fields in the order given. Integers and
//   finite floating-point fields are JSON numbers, booleans true/false,
//   everything else (and NaN/inf, as "nan"/"inf") a string. Strings are
//   escaped as JSON requires; bytes that are not valid UTF-8 become U+FFFD.
//   Field keys should not be "ts", "level", "component" or "msg".
//
// A Logger is a small immutable handle (copy it freely): a shared sink, a
// shared clock, the options, a component name and fields added to every
// line. There is no process-wide logger: a main creates one and passes a
// `const Logger*` down (options structs take `logger`, nullptr = a stderr
// text logger made with Logger::Stderr()).
//
// Thread-safety: Logger methods may be called from any number of threads.
// Every sink writes a whole line at once; FdLogSink issues one write(2) per
// line (and holds a mutex across it), so lines never interleave.
#ifndef LOCKSTEP_COMMON_LOG_H_
#define LOCKSTEP_COMMON_LOG_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace lockstep {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// "DEBUG", "INFO", "WARN", "ERROR".
absl::string_view LogLevelName(LogLevel level);
// "debug|info|warn|error" (any case) -> level; otherwise INVALID_ARGUMENT
// naming `flag` and the expected values:
//   --log_level: expected debug, info, warn or error, got "loud"
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text,
                                       absl::string_view flag = "--log_level");
// "text|json" (any case) -> format; otherwise INVALID_ARGUMENT:
//   --log_format: expected text or json, got "xml"
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text,
                                         absl::string_view flag = "--log_format");

struct LogOptions {
  LogFormat format = LogFormat::kText;
  LogLevel min_level = LogLevel::kInfo;  // lines below it are dropped
};

// One key-value field. Construct from a string, an integer, a floating-point
// number or a bool: LogField("job", 3), LogField("worker", id).
class LogField {
 public:
  enum class Kind { kString, kNumber, kBool };

  LogField(absl::string_view key, absl::string_view value);
  LogField(absl::string_view key, const char* value)
      : LogField(key, absl::string_view(value == nullptr ? "" : value)) {}
  LogField(absl::string_view key, const std::string& value)
      : LogField(key, absl::string_view(value)) {}
  LogField(absl::string_view key, bool value);
  template <typename T,
            typename std::enable_if<std::is_integral<T>::value && !std::is_same<T, bool>::value,
                                    int>::type = 0>
  LogField(absl::string_view key, T value)
      : key_(key), value_(IntText(value)), kind_(Kind::kNumber) {}
  // Six significant digits, as printf's %g ("0.4123", "1e-05", "22345.7");
  // NaN and infinities are strings ("nan", "inf", "-inf").
  LogField(absl::string_view key, double value);
  LogField(absl::string_view key, float value) : LogField(key, static_cast<double>(value)) {}

  const std::string& key() const { return key_; }
  const std::string& value() const { return value_; }
  Kind kind() const { return kind_; }

 private:
  template <typename T>
  static std::string IntText(T v) {
    return std::is_signed<T>::value ? std::to_string(static_cast<long long>(v))
                                    : std::to_string(static_cast<unsigned long long>(v));
  }

  std::string key_;
  std::string value_;
  Kind kind_;
};

// Where formatted lines go. Write() gets one whole line ending in '\n'.
class LogSink {
 public:
  virtual ~LogSink() = default;
  // Thread-safe. Errors are ignored (logging never fails the caller).
  virtual void Write(absl::string_view line) = 0;
};

// Writes each line to a file descriptor (not owned) with one write(2) call
// (repeated only for the rest of a partial write or after EINTR), under a
// mutex so lines from different threads never interleave.
class FdLogSink final : public LogSink {
 public:
  explicit FdLogSink(int fd) : fd_(fd) {}
  void Write(absl::string_view line) override;

 private:
  const int fd_;
  absl::Mutex mu_;
};

// Keeps every line in memory (tests).
class StringLogSink final : public LogSink {
 public:
  void Write(absl::string_view line) override;
  std::string contents() const;
  std::vector<std::string> lines() const;  // without the '\n'

 private:
  mutable absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

class Logger {
 public:
  Logger(std::shared_ptr<LogSink> sink, std::shared_ptr<Clock> clock, LogOptions options = {});
  // Text (or `options`) to stderr (fd 2) with real UTC time.
  static Logger Stderr(LogOptions options = {});

  // A logger writing to the same sink whose lines name `component`.
  Logger WithComponent(absl::string_view component) const;
  // A logger whose lines carry `fields` after the ones this one adds.
  Logger WithFields(std::initializer_list<LogField> fields) const;

  bool Enabled(LogLevel level) const { return level >= options_.min_level; }
  void Log(LogLevel level, absl::string_view msg,
           std::initializer_list<LogField> fields = {}) const;
  void Log(LogLevel level, absl::string_view msg, const std::vector<LogField>& fields) const;
  void Debug(absl::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kDebug, msg, fields);
  }
  void Info(absl::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kInfo, msg, fields);
  }
  void Warn(absl::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kWarn, msg, fields);
  }
  void Error(absl::string_view msg, std::initializer_list<LogField> fields = {}) const {
    Log(LogLevel::kError, msg, fields);
  }

  // The line Log() would write at `now` (with its '\n'); no level filter.
  std::string FormatLine(absl::Time now, LogLevel level, absl::string_view msg,
                         const LogField* fields, size_t num_fields) const;

  const LogOptions& options() const { return options_; }
  const std::string& component() const { return component_; }

 private:
  std::shared_ptr<LogSink> sink_;
  std::shared_ptr<Clock> clock_;
  LogOptions options_;
  std::string component_;
  std::vector<LogField> fields_;
};

// Lines collected while a lock is held and written when this object goes
// out of scope. Declare it before the lock guard, so the lock is released
// before the lines are written (no I/O under a lock). One scope, one thread.
class DeferredLog {
 public:
  explicit DeferredLog(const Logger* logger) : logger_(logger) {}
  DeferredLog(const DeferredLog&) = delete;
  DeferredLog& operator=(const DeferredLog&) = delete;
  ~DeferredLog();

  void Add(LogLevel level, std::string msg, std::vector<LogField> fields = {});

 private:
  struct Entry {
    LogLevel level;
    std::string msg;
    std::vector<LogField> fields;
  };
  const Logger* const logger_;
  std::vector<Entry> entries_;
};

// `logger` when not null, else Logger::Stderr(); with `component` set.
Logger LoggerOrStderr(const Logger* logger, absl::string_view component);

// "2026-11-30T14:02:03.123Z": RFC 3339, UTC, milliseconds (truncated).
std::string FormatLogTime(absl::Time t);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_LOG_H_
