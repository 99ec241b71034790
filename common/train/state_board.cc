#include "common/train/state_board.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

void StateBoard::Publish(uint64_t group, int64_t step, std::string state) {
  auto shared = std::make_shared<const std::string>(std::move(state));
  absl::MutexLock l(&mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->group == group && it->step == step) {
      entries_.erase(it);
      break;
    }
  }
  entries_.push_back(Entry{group, step, std::move(shared)});
  while (static_cast<int>(entries_.size()) > capacity_) entries_.pop_front();
}

std::shared_ptr<const std::string> StateBoard::Find(uint64_t group, int64_t step) const {
  absl::MutexLock l(&mu_);
  for (const Entry& e : entries_) {
    if (e.group == group && e.step == step) return e.state;
  }
  return nullptr;
}

void StateBoard::Remove(uint64_t group) {
  absl::MutexLock l(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->group == group ? entries_.erase(it) : it + 1;
  }
}

std::string StateBoard::Describe(uint64_t group) const {
  absl::MutexLock l(&mu_);
  std::string steps;
  for (const Entry& e : entries_) {
    if (e.group == group) absl::StrAppend(&steps, steps.empty() ? "" : ", ", e.step);
  }
  return steps.empty() ? "no step" : absl::StrCat("steps ", steps);
}

}  // namespace lockstep
