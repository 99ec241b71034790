// JobSeries: a job's bounded history for the status page's curves — the
// training loss and throughput per completed step, the test accuracy / loss
// per evaluation, and the sync checks as a strip of step ranges.
//
// Bounded for any job length: each of the three series holds at most
// `max_points` entries (default 1024). When the loss or eval series is full
// it keeps every other point and from then on records every 2nd offered
// point (then every 4th, ...), so the kept points stay evenly spaced over
// the whole run and the first point is never dropped; the latest offered
// point is kept aside and returned as well, so a curve always ends at the
// current value. The sync strip merges neighbouring cells pairwise when
// full: a cell then covers twice as many checks, and it counts a mismatch if
// any of its checks mismatched, so a mismatch is never averaged away.
//
// Not thread-safe: the Coordinator holds one per job under its mutex and
// hands out copies (Snapshot).
#ifndef LOCKSTEP_SERVER_JOB_SERIES_H_
#define LOCKSTEP_SERVER_JOB_SERIES_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace lockstep {

struct LossPoint {
  int64_t step = 0;                  // 0-based step just completed
  double loss = 0;                   // global-batch mean training loss
  double examples_per_second = 0;    // the job's running figure at that step
  double seconds = 0;                // since the job started (the Clock's)
  int64_t examples = 0;              // examples trained up to and including it
};

struct EvalPoint {
  int64_t step = 0;                  // steps trained when evaluated
  double test_accuracy = 0;
  double test_loss = 0;
};

// One cell of the sync strip: `checks` consecutive checked steps
// first_step..last_step, `mismatches` of which had a differing rank.
struct SyncCell {
  int64_t first_step = 0;
  int64_t last_step = 0;
  int64_t checks = 0;
  int64_t mismatches = 0;
};

struct JobSeriesSnapshot {
  std::vector<LossPoint> loss;       // ascending step; ends at the latest
  std::vector<EvalPoint> eval;       // ascending step; ends at the latest
  std::vector<SyncCell> sync;        // ascending steps
  int64_t loss_stride = 1;           // every loss_stride-th step is kept
  int64_t eval_stride = 1;
  int64_t checks_per_cell = 1;       // checks a full sync cell covers
  int64_t steps_offered = 0;         // AddStep calls (exact)
  int64_t evals_offered = 0;
  int64_t checks_offered = 0;
};

// A series of T that keeps at most max_points evenly spaced entries plus the
// latest one.
template <typename T>
class DownsampledSeries {
 public:
  explicit DownsampledSeries(int max_points) : max_points_(max_points < 2 ? 2 : max_points) {}

  void Add(const T& point) {
    if (offered_ % stride_ == 0) {
      kept_.push_back(point);
      if (static_cast<int>(kept_.size()) > max_points_) {
        size_t out = 0;
        for (size_t i = 0; i < kept_.size(); i += 2) kept_[out++] = kept_[i];
        kept_.resize(out);
        stride_ *= 2;
      }
    }
    latest_ = point;
    ++offered_;
  }

  // The kept points, followed by the latest one when it was not kept.
  std::vector<T> Points() const {
    std::vector<T> out = kept_;
    if (latest_.has_value() && (offered_ - 1) % stride_ != 0) out.push_back(*latest_);
    return out;
  }
  int64_t stride() const { return stride_; }
  int64_t offered() const { return offered_; }

  // Back to the state whose Points() were `points` (a stored snapshot):
  // the same points, stride and count, so later Adds continue the spacing.
  // Keeps at most max_points + 1 of them (a damaged store stays bounded).
  void Restore(std::vector<T> points, int64_t stride, int64_t offered) {
    if (static_cast<int>(points.size()) > max_points_ + 1) points.resize(max_points_ + 1);
    stride_ = stride < 1 ? 1 : stride;
    offered_ = offered < static_cast<int64_t>(points.size())
                   ? static_cast<int64_t>(points.size())
                   : offered;
    latest_.reset();
    if (!points.empty()) latest_ = points.back();
    // Points() appended the latest one when it was not kept.
    if (!points.empty() && (offered_ - 1) % stride_ != 0) points.pop_back();
    kept_ = std::move(points);
  }

 private:
  int max_points_;
  int64_t stride_ = 1;
  int64_t offered_ = 0;
  std::vector<T> kept_;
  std::optional<T> latest_;
};

class JobSeries {
 public:
  static constexpr int kDefaultMaxPoints = 1024;

  explicit JobSeries(int max_points = kDefaultMaxPoints);

  void AddStep(const LossPoint& point) { loss_.Add(point); }
  void AddEval(const EvalPoint& point) { eval_.Add(point); }
  // One checked step (steps arrive in increasing order).
  void AddCheck(int64_t step, bool all_match);

  JobSeriesSnapshot Snapshot() const;
  // Back to the state `s` was taken of (a coordinator restart; bounded as
  // ever: at most max_points + 1 entries per series are taken).
  void Restore(const JobSeriesSnapshot& s);
  // Evaluations added so far (kept or not).
  int64_t evals_offered() const { return eval_.offered(); }

 private:
  int max_points_;
  DownsampledSeries<LossPoint> loss_;
  DownsampledSeries<EvalPoint> eval_;
  std::vector<SyncCell> sync_;
  int64_t checks_per_cell_ = 1;
  int64_t checks_offered_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_JOB_SERIES_H_
