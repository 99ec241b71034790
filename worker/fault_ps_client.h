// Test-only fault (lockstep-worker --fault_hold_pull_step and
// --fault_hold_pull_file): a PsClient that holds this worker's pull of one
// step until a file exists. The push goes out as usual, so the other ranks
// complete that step (and, at the last step, finish) while this rank has
// not received the sum: the window in which a coordinator restart loses the
// sum of its own ps shard (tests/coordinator_restart_last_pull_test.sh).
// Everything else is forwarded unchanged. Thread-safe as the inner client.
#ifndef LOCKSTEP_WORKER_FAULT_PS_CLIENT_H_
#define LOCKSTEP_WORKER_FAULT_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/collective/ps_aggregator.h"

namespace lockstep {

class HoldPullPsClient : public PsClient {
 public:
  // Holds Pull / FinishRound of `step` until `file` exists (checked every
  // 10 ms), the call's deadline passes (DeadlineExceeded) or Cancel.
  HoldPullPsClient(std::unique_ptr<PsClient> inner, int64_t step, std::string file);

  absl::Status Push(uint64_t job, int64_t step, int worker, absl::Span<const float> grad,
                    int64_t count, absl::Time deadline) override;
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                    int64_t* count, absl::Time deadline) override;
  absl::Status StartRound(uint64_t job, int64_t step, int worker, absl::Span<const float> grad,
                          int64_t count, absl::Time deadline, WireFormat wire) override;
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t* count, absl::Time deadline, WireFormat wire) override;
  void Cancel() override;

 private:
  absl::Status Hold(int64_t step, absl::Time deadline);

  const std::unique_ptr<PsClient> inner_;
  const int64_t step_;
  const std::string file_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_FAULT_PS_CLIENT_H_
