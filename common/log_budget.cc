#include "common/log_budget.h"

#include <utility>
#include <vector>

namespace lockstep {

namespace {
constexpr size_t kMaxReasonBytes = 300;
}  // namespace

LogBudget::LogBudget(Clock* clock, int max_lines, absl::Duration window)
    : clock_(clock), max_lines_(max_lines), window_(window) {}

bool LogBudget::Admit(int64_t* left_out) {
  const absl::Time now = clock_->Now();
  absl::MutexLock l(&mu_);
  ++seen_;
  if (now - window_start_ >= window_) {
    window_start_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ >= max_lines_) {
    ++not_logged_;
    ++pending_not_logged_;
    return false;
  }
  ++lines_in_window_;
  *left_out = pending_not_logged_;
  pending_not_logged_ = 0;
  return true;
}

int64_t LogBudget::seen() const {
  absl::MutexLock l(&mu_);
  return seen_;
}

int64_t LogBudget::not_logged() const {
  absl::MutexLock l(&mu_);
  return not_logged_;
}

RefusedConnectionLog::RefusedConnectionLog(const Logger* logger, Clock* clock,
                                           std::string message, int max_lines,
                                           absl::Duration window)
    : logger_(logger), message_(std::move(message)), budget_(clock, max_lines, window) {}

void RefusedConnectionLog::Refused(absl::string_view reason) {
  int64_t left_out = 0;
  if (!budget_.Admit(&left_out)) return;
  // Logged with no lock held (the logger writes to a file descriptor).
  std::vector<LogField> fields = {{"reason", reason.substr(0, kMaxReasonBytes)}};
  if (left_out > 0) fields.push_back({"not_logged", left_out});
  logger_->Log(LogLevel::kWarn, message_, fields);
}

}  // namespace lockstep
