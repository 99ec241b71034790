// Non-finite gradients (issue 10): the check a rank runs on its local
// gradient sum before the combine, the policy a job applies when any rank's
// gradient has a NaN or an infinity, and the flag slots' reading.
//
// The flags travel in the combined buffer itself (Replica::flags(): K
// floats in front of the gradient; rank r writes 1 in slot r when its local
// gradient is not finite, 0 otherwise, and every other slot 0). The combine
// sums them, so after it every replica reads the same flags, in the same
// combine that carries the gradient, before any update is applied. 1 and 0
// are exact in float32, bf16 and fp16, so compression keeps them.
//
// A rank also flags a non-finite local LOSS sum (kFlagLoss, added to
// kFlagGradient: a slot reads 0, 1, 2 or 3, all exact on every wire). And
// since finite local values can still sum to an infinity (or overflow a
// 16-bit wire), every rank also checks the COMBINED gradient and loss after
// the combine (worker/step_combine.h): all replicas hold the same combined
// bytes, so they all reach the same verdict. A non-finite combined buffer
// with no rank flagged is a sum overflow.
#ifndef LOCKSTEP_COMMON_TRAIN_NONFINITE_H_
#define LOCKSTEP_COMMON_TRAIN_NONFINITE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep {

// True when every value of x is finite (no NaN, no +-infinity). One pass
// of multiply-adds (x * 0 is 0 for every finite x and NaN otherwise) in 16
// independent lanes, which the compiler vectorises without -ffast-math;
// AVX when the CPU has it. No allocation, no branch per element.
bool AllFinite(absl::Span<const float> x);

// What a rank writes in its slot: kFlagGradient when its local gradient
// is not finite, plus kFlagLoss when its local loss sum is not finite.
inline constexpr float kFlagGradient = 1.0f;
inline constexpr float kFlagLoss = 2.0f;
inline float LocalFlag(bool gradient_finite, bool loss_finite) {
  return (gradient_finite ? 0.0f : kFlagGradient) + (loss_finite ? 0.0f : kFlagLoss);
}

// JobSpec.on_nonfinite.
enum class NonFinitePolicy {
  kFail,  // the job ends FAILED naming the rank(s) and the step
  kSkip,  // the step's update is skipped on every replica and counted
};

// "" (the default) and "fail" -> kFail, "skip" -> kSkip; otherwise
// InvalidArgument "expected fail or skip, got \"x\"" (the caller prefixes
// the field or flag).
absl::StatusOr<NonFinitePolicy> ParseNonFinitePolicy(absl::string_view s);

// The ranks whose flag is set (> 0.5 after the sum; a NaN flag counts as
// set), appended to *ranks (cleared first; reserve K to avoid allocating).
// Returns whether any is set.
bool FlaggedRanks(absl::Span<const float> flags, std::vector<int>* ranks);

// "rank 1", "ranks 0 and 2", "ranks 0, 1 and 3".
std::string RankList(absl::Span<const int> ranks);

// What the summed flags say, for errors and logs: "non-finite gradient on
// rank 1", "non-finite loss on rank 2", "non-finite gradient on rank 1 and
// non-finite loss on ranks 0 and 2" (a rank with both counts as gradient);
// "" when no slot is set. Allocates: call only for a flagged step.
std::string DescribeFlags(absl::Span<const float> flags);

// The message of a step whose combined gradient or loss is not finite
// although no rank flagged its own: "non-finite sum at step 7: every rank's
// gradient and loss were finite, the sum overflowed".
std::string SumOverflowMessage(int64_t step);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_NONFINITE_H_
