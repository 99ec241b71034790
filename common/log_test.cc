#include "common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// 2026-11-30T14:02:03.123Z (plus 0.9 ms, which the format truncates).
absl::Time TestTime() {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 30, 14, 2, 3), absl::UTCTimeZone()) +
         absl::Microseconds(123900);
}

struct Captured {
  std::shared_ptr<StringLogSink> sink = std::make_shared<StringLogSink>();
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>(TestTime());
  Logger Make(LogFormat format, LogLevel min = LogLevel::kInfo) const {
    return Logger(sink, clock, LogOptions{format, min});
  }
};

TEST(LogTest, TextLineExact) {
  Captured c;
  Logger log = c.Make(LogFormat::kText).WithComponent("worker");
  log.Info("step done", {{"job", 3}, {"step", 41}, {"rank", 1}, {"loss", 0.4123}});
  EXPECT_EQ(c.sink->contents(),
            "2026-11-30T14:02:03.123Z INFO  worker: step done job=3 step=41 rank=1 "
            "loss=0.4123\n");
}

TEST(LogTest, JsonLineExact) {
  Captured c;
  Logger log = c.Make(LogFormat::kJson).WithComponent("worker");
  log.Info("step done", {{"job", 3}, {"step", 41}, {"rank", 1}, {"loss", 0.4123}});
  EXPECT_EQ(c.sink->contents(),
            "{\"ts\":\"2026-11-30T14:02:03.123Z\",\"level\":\"INFO\",\"component\":\"worker\","
            "\"msg\":\"step done\",\"job\":3,\"step\":41,\"rank\":1,\"loss\":0.4123}\n");
}

TEST(LogTest, LevelsArePaddedAndNamed) {
  Captured c;
  Logger log = c.Make(LogFormat::kText, LogLevel::kDebug).WithComponent("c");
  log.Debug("d");
  log.Info("i");
  log.Warn("w");
  log.Error("e");
  EXPECT_EQ(c.sink->contents(),
            "2026-11-30T14:02:03.123Z DEBUG c: d\n"
            "2026-11-30T14:02:03.123Z INFO  c: i\n"
            "2026-11-30T14:02:03.123Z WARN  c: w\n"
            "2026-11-30T14:02:03.123Z ERROR c: e\n");
}

TEST(LogTest, MinLevelDropsLowerLevels) {
  Captured c;
  Logger log = c.Make(LogFormat::kText, LogLevel::kWarn);
  EXPECT_FALSE(log.Enabled(LogLevel::kInfo));
  EXPECT_TRUE(log.Enabled(LogLevel::kWarn));
  log.Debug("no");
  log.Info("no");
  log.Warn("yes");
  log.Error("yes");
  EXPECT_EQ(c.sink->lines(), (std::vector<std::string>{
                                 "2026-11-30T14:02:03.123Z WARN  yes",
                                 "2026-11-30T14:02:03.123Z ERROR yes",
                             }));
}

TEST(LogTest, TimestampFollowsTheClockInUtcWithMilliseconds) {
  Captured c;
  Logger log = c.Make(LogFormat::kText);
  c.clock->Set(absl::FromUnixMillis(0));
  log.Info("a");
  c.clock->Set(absl::FromUnixMillis(1000000000007));
  log.Info("b");
  c.clock->Advance(absl::Milliseconds(993));
  log.Info("c");
  EXPECT_EQ(c.sink->lines(), (std::vector<std::string>{
                                 "1970-01-01T00:00:00.000Z INFO  a",
                                 "2001-09-09T01:46:40.007Z INFO  b",
                                 "2001-09-09T01:46:41.000Z INFO  c",
                             }));
  EXPECT_EQ(FormatLogTime(TestTime()), "2026-11-30T14:02:03.123Z");
}

TEST(LogTest, FieldKinds) {
  Captured c;
  Logger text = c.Make(LogFormat::kText);
  Logger json = c.Make(LogFormat::kJson);
  const uint64_t big = std::numeric_limits<uint64_t>::max();
  const int64_t neg = std::numeric_limits<int64_t>::min();
  for (const Logger& log : {text, json}) {
    log.Info("m", {{"u", big},
                   {"i", neg},
                   {"b", true},
                   {"f", 0.05f},
                   {"small", 1e-5},
                   {"big", 22345.678},
                   {"nan", std::nan("")},
                   {"inf", -std::numeric_limits<double>::infinity()},
                   {"s", "w-1"}});
  }
  EXPECT_EQ(c.sink->lines(),
            (std::vector<std::string>{
                "2026-11-30T14:02:03.123Z INFO  m u=18446744073709551615 "
                "i=-9223372036854775808 b=true f=0.05 small=1e-05 big=22345.7 nan=nan inf=-inf "
                "s=w-1",
                "{\"ts\":\"2026-11-30T14:02:03.123Z\",\"level\":\"INFO\",\"component\":\"\","
                "\"msg\":\"m\",\"u\":18446744073709551615,\"i\":-9223372036854775808,"
                "\"b\":true,\"f\":0.05,\"small\":1e-05,\"big\":22345.7,\"nan\":\"nan\","
                "\"inf\":\"-inf\",\"s\":\"w-1\"}",
            }));
}

TEST(LogTest, TextQuotesValuesThatWouldBreakKeyValueParsing) {
  Captured c;
  Logger log = c.Make(LogFormat::kText);
  log.Warn("job failed", {{"reason", "worker w-3 lost"},
                          {"empty", ""},
                          {"eq", "a=b"},
                          {"quote", "say \"hi\""},
                          {"path", "C:\\x"},
                          {"nl", "a\nb"},
                          {"plain", "ring/tcp"},
                          {"utf8", "caf\xc3\xa9"}});
  EXPECT_EQ(c.sink->contents(),
            "2026-11-30T14:02:03.123Z WARN  job failed reason=\"worker w-3 lost\" empty=\"\" "
            "eq=\"a=b\" quote=\"say \\\"hi\\\"\" path=\"C:\\\\x\" nl=\"a\\nb\" plain=ring/tcp "
            "utf8=caf\xc3\xa9\n");
}

TEST(LogTest, MessagesStayOnOneLine) {
  Captured c;
  c.Make(LogFormat::kText).WithComponent("coordinator").Error("bad\nthing\there\x01");
  EXPECT_EQ(c.sink->contents(),
            "2026-11-30T14:02:03.123Z ERROR coordinator: bad\\nthing\\there\\u0001\n");
}

TEST(LogTest, JsonEscaping) {
  Captured c;
  Logger log = c.Make(LogFormat::kJson).WithComponent("a\"b");
  log.Info("q\"\\/\n\r\t\b\f\x1f\x7f", {{"k\n", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
                                       {"bad", "x\xff" "y\xc3" "z\xed\xa0\x80" "w\xc0\xaf"}});
  EXPECT_EQ(c.sink->contents(),
            "{\"ts\":\"2026-11-30T14:02:03.123Z\",\"level\":\"INFO\",\"component\":\"a\\\"b\","
            "\"msg\":\"q\\\"\\\\/\\n\\r\\t\\b\\f\\u001f\x7f\","
            "\"k\\n\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
            // Invalid UTF-8 (stray byte, truncated sequence, surrogate,
            // overlong) becomes U+FFFD per bad byte.
            "\"bad\":\"x\\ufffdy\\ufffdz\\ufffd\\ufffd\\ufffdw\\ufffd\\ufffd\"}\n");
}

TEST(LogTest, WithFieldsAddsToEveryLineAndChildrenShareTheSink) {
  Captured c;
  Logger base = c.Make(LogFormat::kText).WithComponent("worker");
  Logger job = base.WithFields({{"worker", "w-2"}}).WithFields({{"job", 7}});
  job.Info("job started", {{"rank", 1}});
  base.Info("idle");
  EXPECT_EQ(c.sink->lines(), (std::vector<std::string>{
                                 "2026-11-30T14:02:03.123Z INFO  worker: job started worker=w-2 "
                                 "job=7 rank=1",
                                 "2026-11-30T14:02:03.123Z INFO  worker: idle",
                             }));
  std::vector<LogField> fields = {{"a", 1}, {"b", "x y"}};
  job.Log(LogLevel::kError, "v", fields);
  EXPECT_EQ(c.sink->lines().back(),
            "2026-11-30T14:02:03.123Z ERROR worker: v worker=w-2 job=7 a=1 b=\"x y\"");
}

TEST(LogTest, ParseFlagsValues) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("JSON"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("xml").status().message(),
            "--log_format: expected text or json, got \"xml\"");
  EXPECT_EQ(ParseLogFormat("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("Info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("ERROR"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("loud").status().message(),
            "--log_level: expected debug, info, warn or error, got \"loud\"");
  EXPECT_EQ(ParseLogLevel("x", "-v").status().message(),
            "-v: expected debug, info, warn or error, got \"x\"");
}

TEST(LogTest, NullLoggerMeansStderrText) {
  Logger log = LoggerOrStderr(nullptr, "ps");
  EXPECT_EQ(log.component(), "ps");
  EXPECT_EQ(log.options().format, LogFormat::kText);
  EXPECT_EQ(log.options().min_level, LogLevel::kInfo);
  Captured c;
  Logger given = c.Make(LogFormat::kJson);
  Logger from = LoggerOrStderr(&given, "worker");
  from.Info("x");
  EXPECT_EQ(c.sink->contents(),
            "{\"ts\":\"2026-11-30T14:02:03.123Z\",\"level\":\"INFO\",\"component\":\"worker\","
            "\"msg\":\"x\"}\n");
}

TEST(LogTest, DeferredLogWritesWhenItGoesOutOfScope) {
  Captured c;
  Logger log = c.Make(LogFormat::kText);
  {
    DeferredLog later(&log);
    later.Add(LogLevel::kInfo, "first", {{"a", 1}});
    later.Add(LogLevel::kDebug, "dropped");
    later.Add(LogLevel::kWarn, "second");
    EXPECT_EQ(c.sink->contents(), "");
  }
  EXPECT_EQ(c.sink->lines(), (std::vector<std::string>{
                                 "2026-11-30T14:02:03.123Z INFO  first a=1",
                                 "2026-11-30T14:02:03.123Z WARN  second",
                             }));
}

// Many threads logging long lines through one FdLogSink into one file: every line arrives whole (one write(2) per line, under a mutex).
TEST(LogTest, FdSinkLinesNeverInterleave) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/log_test.",
                                        getpid(), ".log");
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << path;
  {
    Logger log(std::make_shared<FdLogSink>(fd), std::make_shared<FakeClock>(TestTime()),
               LogOptions{LogFormat::kText, LogLevel::kInfo});
    constexpr int kThreads = 8, kLines = 500;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&log, t] {
        const std::string pad(6000, static_cast<char>('a' + t));  // > PIPE_BUF
        for (int i = 0; i < kLines; ++i) log.Info("line", {{"t", t}, {"i", i}, {"pad", pad}});
      });
    }
    for (std::thread& th : threads) th.join();
  }
  ::close(fd);
  std::ifstream in(path);
  std::string line;
  int count = 0;
  while (std::getline(in, line)) {
    ++count;
    // "...INFO  line t=T i=I pad=<6000 x the letter of T>"
    const size_t t_at = line.find(" t=");
    ASSERT_NE(t_at, std::string::npos) << line.substr(0, 80);
    const int t = line[t_at + 3] - '0';
    const size_t pad_at = line.find(" pad=");
    ASSERT_NE(pad_at, std::string::npos);
    EXPECT_EQ(line.substr(pad_at + 5), std::string(6000, static_cast<char>('a' + t)));
  }
  EXPECT_EQ(count, 8 * 500);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace lockstep
