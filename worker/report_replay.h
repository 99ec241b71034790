// The newest step reports a rank's coordinator has answered, kept so that
// they can be sent again to a coordinator that restarted before its state
// database committed their checks (issue 10, "nothing lost"). Private to the
// worker_daemon target.
//
// Why: the coordinator answers a report at once and its writer thread
// commits the checks to SQLite every 25 ms (server/state/state_db.h), so a
// SIGKILL loses the checks of the last moments; the restarted coordinator
// knows each rank's last committed step and drops reports at or below it as
// duplicates (Coordinator::ReportStep), so resending the kept reports fills
// exactly the lost checks, steps only some ranks had reported included.
//
// Contract:
//   * Holds at most `capacity` reports, the newest; Add() beyond that
//     overwrites the oldest and counts it in dropped().
//   * Add() copies the report into a slot made on first use and reused
//     after (no allocation once every slot exists and has grown).
//   * Not thread-safe: one thread at a time (the reporter's while the job
//     runs; the worker keeps its last job's log, GrpcReporter::TakeReplay,
//     for a coordinator that restarts as the job ends).
#ifndef LOCKSTEP_WORKER_REPORT_REPLAY_H_
#define LOCKSTEP_WORKER_REPORT_REPLAY_H_

#include <cstdint>
#include <vector>

#include "proto/coordinator.pb.h"

namespace lockstep {

// Reports a rank keeps for a restarted coordinator: at 0.5-1 ms a step
// about 2-4 s of training, far more than the writer's 25 ms flush interval.
inline constexpr int kReplayReports = 4096;

class ReportReplayLog {
 public:
  explicit ReportReplayLog(int capacity) : capacity_(capacity < 0 ? 0 : capacity) {}

  void Add(const v1::ReportStepRequest& report) {
    if (capacity_ == 0) {
      ++dropped_;
      return;
    }
    if (static_cast<int>(ring_.size()) < capacity_) {
      ring_.push_back(report);
    } else {
      ring_[static_cast<size_t>(head_)].CopyFrom(report);
      head_ = (head_ + 1) % capacity_;
      ++dropped_;
    }
  }
  int size() const { return static_cast<int>(ring_.size()); }
  // The i-th oldest kept report, 0 <= i < size().
  const v1::ReportStepRequest& at(int i) const {
    return ring_[static_cast<size_t>((head_ + i) % static_cast<int>(ring_.size()))];
  }
  // Reports overwritten because the log was full.
  int64_t dropped() const { return dropped_; }

 private:
  int capacity_;
  std::vector<v1::ReportStepRequest> ring_;
  int head_ = 0;  // the oldest slot once the ring is full
  int64_t dropped_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_REPORT_REPLAY_H_
