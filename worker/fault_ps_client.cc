// Test-only pull hold. Contract: fault_ps_client.h.
#include "worker/fault_ps_client.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {

HoldPullPsClient::HoldPullPsClient(std::unique_ptr<PsClient> inner, int64_t step,
                                   std::string file)
    : inner_(std::move(inner)), step_(step), file_(std::move(file)) {}

absl::Status HoldPullPsClient::Hold(int64_t step, absl::Time deadline) {
  if (step != step_) return absl::OkStatus();
  while (access(file_.c_str(), F_OK) != 0) {
    if (cancelled_.load()) return absl::CancelledError("ps pull held by a fault: cancelled");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("ps pull of step ", step, " held by a fault until ", file_, " exists"));
    }
    absl::SleepFor(absl::Milliseconds(10));  // a test-only poll, bounded by the deadline
  }
  return absl::OkStatus();
}

absl::Status HoldPullPsClient::Push(uint64_t job, int64_t step, int worker,
                                    absl::Span<const float> grad, int64_t count,
                                    absl::Time deadline) {
  return inner_->Push(job, step, worker, grad, count, deadline);
}

absl::Status HoldPullPsClient::Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                                    int64_t* count, absl::Time deadline) {
  if (absl::Status s = Hold(step, deadline); !s.ok()) return s;
  return inner_->Pull(job, step, worker, out, count, deadline);
}

absl::Status HoldPullPsClient::StartRound(uint64_t job, int64_t step, int worker,
                                          absl::Span<const float> grad, int64_t count,
                                          absl::Time deadline, WireFormat wire) {
  return inner_->StartRound(job, step, worker, grad, count, deadline, wire);
}

absl::Status HoldPullPsClient::FinishRound(uint64_t job, int64_t step, int worker,
                                           absl::Span<float> out, int64_t* count,
                                           absl::Time deadline, WireFormat wire) {
  if (absl::Status s = Hold(step, deadline); !s.ok()) return s;
  return inner_->FinishRound(job, step, worker, out, count, deadline, wire);
}

void HoldPullPsClient::Cancel() {
  cancelled_.store(true);
  inner_->Cancel();
}

}  // namespace lockstep
