// Coordinator: event log lines, queued under mu_ and written after it is
// released (see "Event logging" in coordinator.h), so no lock is held while
// a line is written.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/coordinator.h"

namespace lockstep {

Coordinator::Locked::Locked(Coordinator* c) : c_(c) { c_->mu_.Lock(); }

Coordinator::Locked::~Locked() {
  std::vector<QueuedLog> logs;
  logs.swap(c_->queued_logs_);
  c_->mu_.Unlock();
  c_->WriteLogs(std::move(logs));
}

Coordinator::~Coordinator() {
  // Lines queued by a method that locked with a plain absl::MutexLock.
  std::vector<QueuedLog> logs;
  {
    absl::MutexLock lock(&mu_);
    logs.swap(queued_logs_);
  }
  WriteLogs(std::move(logs));
}

void Coordinator::LogLocked(LogLevel level, std::string msg, std::vector<LogField> fields) {
  if (!log_.Enabled(level)) return;
  queued_logs_.push_back(QueuedLog{level, std::move(msg), std::move(fields)});
}

void Coordinator::WriteLogs(std::vector<QueuedLog> logs) const {
  for (const QueuedLog& l : logs) log_.Log(l.level, l.msg, l.fields);
}

void Coordinator::LogMismatchLocked(const Job& job, absl::string_view what, int64_t step,
                                    const std::vector<int32_t>& ranks,
                                    const std::string& majority) {
  std::vector<std::string> workers;
  for (int32_t r : ranks) {
    workers.push_back(r >= 0 && r < static_cast<int32_t>(job.ranks.size())
                          ? job.ranks[r].worker_id
                          : std::string("?"));
  }
  LogLocked(LogLevel::kError, std::string(what),
            {{"job", job.id},
             {"step", step},
             {"ranks", absl::StrJoin(ranks, ",")},
             {"workers", absl::StrJoin(workers, ",")},
             {"majority_hash", majority}});
}

std::string Coordinator::ModeName(const v1::JobSpec& spec) {
  if (spec.sync_mode() == v1::PS) return "ps";
  if (spec.peer_transport() == v1::TCP) return "ring/tcp";
  return spec.peer_transport() == v1::SHM ? "ring/shm" : "ring/grpc";
}

}  // namespace lockstep
