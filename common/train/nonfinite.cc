#include "common/train/nonfinite.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

constexpr int kLanes = 16;

// The portable pass: 16 independent accumulators (no reassociation needed,
// so -O2 vectorises it with SSE).
template <int Lanes>
inline bool AllFiniteLanes(const float* p, int64_t n) {
  float acc[Lanes] = {};
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes) {
    for (int j = 0; j < Lanes; ++j) acc[j] += p[i + j] * 0.0f;
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += p[i] * 0.0f;
  for (int j = 0; j < Lanes; ++j) tail += acc[j];
  return tail == tail;  // NaN iff some x was NaN or infinite
}

bool AllFinitePortable(const float* p, int64_t n) { return AllFiniteLanes<kLanes>(p, n); }

__attribute__((target("avx"))) bool AllFiniteAvx(const float* p, int64_t n) {
  return AllFiniteLanes<2 * kLanes>(p, n);
}

bool HasAvx() {
  static const bool has = __builtin_cpu_supports("avx");
  return has;
}

}  // namespace

bool AllFinite(absl::Span<const float> x) {
  const int64_t n = static_cast<int64_t>(x.size());
  return HasAvx() ? AllFiniteAvx(x.data(), n) : AllFinitePortable(x.data(), n);
}

absl::StatusOr<NonFinitePolicy> ParseNonFinitePolicy(absl::string_view s) {
  if (s.empty() || s == "fail") return NonFinitePolicy::kFail;
  if (s == "skip") return NonFinitePolicy::kSkip;
  return absl::InvalidArgumentError(absl::StrCat("expected fail or skip, got \"", s, "\""));
}

bool FlaggedRanks(absl::Span<const float> flags, std::vector<int>* ranks) {
  ranks->clear();
  for (int r = 0; r < static_cast<int>(flags.size()); ++r) {
    if (!(flags[r] <= 0.5f)) ranks->push_back(r);  // NaN counts as set
  }
  return !ranks->empty();
}

std::string RankList(absl::Span<const int> ranks) {
  if (ranks.size() == 1) return absl::StrCat("rank ", ranks[0]);
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == ranks.size() ? " and " : ", ");
    absl::StrAppend(&out, ranks[i]);
  }
  return out;
}

std::string DescribeFlags(absl::Span<const float> flags) {
  std::vector<int> gradient, loss;
  for (int r = 0; r < static_cast<int>(flags.size()); ++r) {
    const float f = flags[r];
    if (f <= 0.5f) continue;
    // 1 or 3 (or NaN, a flag that got mixed with a non-finite value):
    // the gradient; 2: the loss alone.
    if (f > 1.5f && f < 2.5f) {
      loss.push_back(r);
    } else {
      gradient.push_back(r);
    }
  }
  std::string out;
  if (!gradient.empty()) absl::StrAppend(&out, "non-finite gradient on ", RankList(gradient));
  if (!loss.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : " and ", "non-finite loss on ", RankList(loss));
  }
  return out;
}

std::string SumOverflowMessage(int64_t step) {
  return absl::StrCat("non-finite sum at step ", step,
                      ": every rank's gradient and loss were finite, the sum overflowed");
}

}  // namespace lockstep
