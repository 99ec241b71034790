// A line budget for log lines an outsider can trigger at will (refused gRPC
// requests, refused raw-TCP data-plane connections): at most `max_lines`
// lines per `window` on `clock`; the others are counted, and the first line
// admitted in a later window carries not_logged=<how many were left out>, so
// a flood cannot fill the disk or slow a daemon with logging. gRPC-free:
// common/grpcutil/refusal_log.h (gRPC refusals) and the daemons' raw-TCP
// hubs (RefusedConnectionLog below) both use it.
//
// Thread-safety: every method may be called from any thread. `clock` and
// `logger` are not owned and must outlive the object.
#ifndef LOCKSTEP_COMMON_LOG_BUDGET_H_
#define LOCKSTEP_COMMON_LOG_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"

namespace lockstep {

class LogBudget {
 public:
  explicit LogBudget(Clock* clock, int max_lines = 20, absl::Duration window = absl::Seconds(10));

  // Counts one event. True when its line may be written now; then
  // *left_out = events not logged since the last admitted line (0 if none).
  bool Admit(int64_t* left_out);

  int64_t seen() const;        // events counted
  int64_t not_logged() const;  // of which over the budget

 private:
  Clock* const clock_;
  const int max_lines_;
  const absl::Duration window_;
  mutable absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int lines_in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t not_logged_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pending_not_logged_ ABSL_GUARDED_BY(mu_) = 0;  // since the last line
};

// One WARN line `message` reason="..." per refused raw-TCP connection (the
// hubs' on_reject), within a LogBudget:
//   WARN data plane connection refused reason="connection from 10.0.0.7:51234: ..."
//        [not_logged=N]
// The reason is cut at 300 bytes.
class RefusedConnectionLog {
 public:
  RefusedConnectionLog(const Logger* logger, Clock* clock, std::string message,
                       int max_lines = 20, absl::Duration window = absl::Seconds(10));

  void Refused(absl::string_view reason);

  int64_t refused() const { return budget_.seen(); }
  int64_t not_logged() const { return budget_.not_logged(); }

 private:
  const Logger* const logger_;
  const std::string message_;
  LogBudget budget_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_LOG_BUDGET_H_
