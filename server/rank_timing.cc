#include "server/rank_timing.h"

#include <algorithm>

namespace lockstep {

double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

void RankTiming::Add(const StepTimes& times) {
  if (times_.size() < static_cast<size_t>(kSize)) {
    times_.push_back(times);
  } else {
    times_[next_] = times;
  }
  next_ = (next_ + 1) % kSize;
}

StepTimes RankTiming::Medians() const {
  std::vector<double> v;
  v.reserve(times_.size());
  auto median = [&](double StepTimes::*part) {
    v.clear();
    for (const StepTimes& t : times_) v.push_back(t.*part);
    return Median(v);
  };
  StepTimes m;
  m.step = median(&StepTimes::step);
  m.compute = median(&StepTimes::compute);
  m.communication = median(&StepTimes::communication);
  m.exposed = median(&StepTimes::exposed);
  m.peer_wait = median(&StepTimes::peer_wait);
  return m;
}

}  // namespace lockstep
