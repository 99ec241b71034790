// RankTiming: the timing of one rank's recent step reports, for the
// RankStatus.median_* figures.
//
// Each recorded ReportStep's step / compute / communication / exposed /
// peer-wait seconds go into a window of the rank's last kSize (64) reports
// (a ring buffer: the oldest is overwritten). Medians() is the per-field
// median over the window (mean of the two middle values for an even count;
// 0 before any report).
//
// Not thread-safe: the Coordinator holds one per rank of a job and calls it
// under its mutex. Bounded: at most kSize entries.
#ifndef LOCKSTEP_SERVER_RANK_TIMING_H_
#define LOCKSTEP_SERVER_RANK_TIMING_H_

#include <cstddef>
#include <vector>

namespace lockstep {

// One step report's timing (ReportStepRequest fields 9, 13-16), seconds.
struct StepTimes {
  double step = 0, compute = 0, communication = 0, exposed = 0, peer_wait = 0;
};

class RankTiming {
 public:
  static constexpr int kSize = 64;  // reports kept

  void Add(const StepTimes& times);
  // The per-field medians over the kept reports (all 0 when none).
  StepTimes Medians() const;
  size_t size() const { return times_.size(); }

 private:
  std::vector<StepTimes> times_;  // at most kSize
  size_t next_ = 0;               // slot the next report overwrites once full
};

// Median of `v` (mean of the two middle values for an even count; 0 when
// empty). Reorders v.
double Median(std::vector<double>& v);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_RANK_TIMING_H_
