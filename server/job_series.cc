#include "server/job_series.h"

#include <algorithm>

namespace lockstep {

JobSeries::JobSeries(int max_points)
    : max_points_(std::max(2, max_points)), loss_(max_points), eval_(max_points) {}

void JobSeries::AddCheck(int64_t step, bool all_match) {
  ++checks_offered_;
  if (sync_.empty() || sync_.back().checks >= checks_per_cell_) {
    sync_.push_back(SyncCell{step, step, 0, 0});
  }
  SyncCell& cell = sync_.back();
  cell.first_step = std::min(cell.first_step, step);
  cell.last_step = std::max(cell.last_step, step);
  ++cell.checks;
  if (!all_match) ++cell.mismatches;
  if (static_cast<int>(sync_.size()) <= max_points_) return;
  // Full: merge neighbours pairwise; every full cell now covers twice as
  // many checks.
  size_t out = 0;
  for (size_t i = 0; i < sync_.size(); i += 2) {
    SyncCell merged = sync_[i];
    if (i + 1 < sync_.size()) {
      const SyncCell& next = sync_[i + 1];
      merged.first_step = std::min(merged.first_step, next.first_step);
      merged.last_step = std::max(merged.last_step, next.last_step);
      merged.checks += next.checks;
      merged.mismatches += next.mismatches;
    }
    sync_[out++] = merged;
  }
  sync_.resize(out);
  checks_per_cell_ *= 2;
}

JobSeriesSnapshot JobSeries::Snapshot() const {
  JobSeriesSnapshot s;
  s.loss = loss_.Points();
  s.eval = eval_.Points();
  s.sync = sync_;
  s.loss_stride = loss_.stride();
  s.eval_stride = eval_.stride();
  s.checks_per_cell = checks_per_cell_;
  s.steps_offered = loss_.offered();
  s.evals_offered = eval_.offered();
  s.checks_offered = checks_offered_;
  return s;
}

void JobSeries::Restore(const JobSeriesSnapshot& s) {
  loss_.Restore(s.loss, s.loss_stride, s.steps_offered);
  eval_.Restore(s.eval, s.eval_stride, s.evals_offered);
  sync_ = s.sync;
  if (static_cast<int>(sync_.size()) > max_points_) sync_.resize(max_points_);
  checks_per_cell_ = std::max<int64_t>(1, s.checks_per_cell);
  checks_offered_ = std::max<int64_t>(0, s.checks_offered);
}

}  // namespace lockstep
