// LogBudget and RefusedConnectionLog (log_budget.h) on a fake clock: exact
// lines, at most max_lines per window, then not_logged=N on the next line.
#include "common/log_budget.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(LogBudgetTest, AdmitsMaxLinesPerWindowAndCountsTheRest) {
  FakeClock clock;
  LogBudget budget(&clock, 3, absl::Seconds(10));
  int64_t left_out = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(budget.Admit(&left_out));
    EXPECT_EQ(left_out, 0);
  }
  EXPECT_FALSE(budget.Admit(&left_out));
  EXPECT_FALSE(budget.Admit(&left_out));
  clock.Advance(absl::Seconds(9));
  EXPECT_FALSE(budget.Admit(&left_out));  // same window
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(budget.Admit(&left_out));
  EXPECT_EQ(left_out, 3);
  ASSERT_TRUE(budget.Admit(&left_out));
  EXPECT_EQ(left_out, 0);
  EXPECT_EQ(budget.seen(), 8);
  EXPECT_EQ(budget.not_logged(), 3);
}

TEST(RefusedConnectionLogTest, AFloodOfRefusedConnectionsIsBounded) {
  auto sink = std::make_shared<StringLogSink>();
  auto clock = std::make_shared<FakeClock>();
  Logger logger(sink, clock);
  RefusedConnectionLog log(&logger, clock.get(), "data plane connection refused", 20,
                           absl::Seconds(10));
  for (int i = 0; i < 1000; ++i) {
    log.Refused(absl::StrCat("connection from 127.0.0.1:", 1000 + i, ": wrong mac"));
  }
  std::vector<std::string> lines = sink->lines();
  ASSERT_EQ(lines.size(), 20u);
  EXPECT_NE(lines[0].find("WARN"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("data plane connection refused "
                          "reason=\"connection from 127.0.0.1:1000: wrong mac\""),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(log.refused(), 1000);
  EXPECT_EQ(log.not_logged(), 980);
  clock->Advance(absl::Seconds(10));
  log.Refused("connection from 127.0.0.1:9: hello cut short");
  lines = sink->lines();
  ASSERT_EQ(lines.size(), 21u);
  EXPECT_NE(lines[20].find("not_logged=980"), std::string::npos) << lines[20];
}

TEST(RefusedConnectionLogTest, ReasonIsCut) {
  auto sink = std::make_shared<StringLogSink>();
  auto clock = std::make_shared<FakeClock>();
  Logger logger(sink, clock);
  RefusedConnectionLog log(&logger, clock.get(), "refused");
  log.Refused(std::string(5000, 'x'));
  ASSERT_EQ(sink->lines().size(), 1u);
  EXPECT_NE(sink->lines()[0].find(std::string(300, 'x')), std::string::npos);
  EXPECT_EQ(sink->lines()[0].find(std::string(301, 'x')), std::string::npos);
}

}  // namespace
}  // namespace lockstep
