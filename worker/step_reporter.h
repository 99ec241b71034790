// Step reports, pipelined: the job thread does not wait for the
// coordinator's reply to step t's report before it starts step t+1, but it
// never runs more than `lag` steps ahead of the coordinator's replies.
//
//   job thread                          reporter thread
//   ----------                          ---------------
//   WaitForRoom()  (<= lag unanswered)
//   compute + combine of step t         sends step t-1's report, waits for
//   Apply (changes the weights)         the reply
//   Submit(report t, weights):
//     hashes the weights (in cache) ->  sends ReportStep(t), records the
//   ...                                 reply
//   Flush()        (every reply in)
//
// Lag L (kReportLag = 2): step s starts only when the replies to every
// report of a step < s - L have arrived, so while step s runs at most the
// reports of steps s-L .. s-1 are unanswered (L = 0 is the synchronous
// protocol: each step waits for the previous step's reply). A reply that
// says stop (the job was cancelled or failed, e.g. the coordinator found a
// hash mismatch) is seen at the next step boundary: WaitForRoom returns
// CANCELLED naming the step whose reply said so. Reports after it are not
// sent.
//
// Batches (issue 9): the reporter thread sends `batch` (kReportBatch = 2)
// queued reports per call (JobReporter::ReportStepsWithReply, one
// ReportSteps RPC), so a rank makes one control call per two steps; each
// call costs 150-300 us of CPU on the worker and about as much on the
// coordinator whatever it carries. A batch is at most lag + 1 reports (so
// with lag 0 every report goes alone): the job thread waits for room only
// when lag + 1 reports are unanswered, so it never waits for a report that
// was not sent. Flush, and a job that ended, send what is queued. The lag
// bound is unchanged: step s still starts only once every
// report of a step < s - lag is answered; with lag 2 the pair (t-1, t),
// sent once step t is submitted, has the whole of step t+1 to come back
// before step t+2 needs it. The coordinator processes a batch's reports in
// order under one lock (Coordinator::ReportSteps), so a mismatch still names
// its step and ranks; a reply that says stop names the batch's steps.
//
// Submit hashes the weights (XXH3-128 and the per-tensor block hashes in one
// pass, FusedWeightHasher) and the optimizer state on the calling thread,
// right after the update wrote them, while they are in that core's cache
// (measured on the 2-core host, 2026-12-01: the reporter thread used to
// spend 150-200 us of CPU per step hashing them from the other core, more
// than the job thread now spends; with K workers on K cores every such
// microsecond is taken from a job thread). The reporter thread only sends.
// Better still (2026-12-02), the update itself feeds the hashes chunk by
// chunk as it writes them (HashDuringUpdate, Optimizer::Step's
// UpdateObserver), so each 8 KiB chunk of weights and momentum is hashed
// from L1 right after it is written, and Submit only finishes the digests.
//
// Every wait ends by options.timeout (DEADLINE_EXCEEDED naming the step
// whose reply is missing) or soon (<= 20 ms) after *options.stop becomes
// true (CANCELLED). The job thread's calls do not allocate on success
// (reports are swapped into slots made once), so a step's hot path stays
// allocation-free.
//
// Threading: WaitForRoom/WaitHashed/Submit/Flush from one thread (the job
// thread); the JobReporter is called on the reporter thread (ReportStep)
// only. The destructor sends the reports still queued (an odd last report
// of a pair when the job thread ended without Flush, e.g. on an error: one
// call) unless the job ended (a reply said stop, or a report failed) or its
// stop flag is set, then stops the thread (JobReporter calls carry their own
// deadlines).
#ifndef LOCKSTEP_WORKER_STEP_REPORTER_H_
#define LOCKSTEP_WORKER_STEP_REPORTER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/optim/hash.h"
#include "common/optim/optimizer.h"
#include "common/train/replica.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

// What a running job tells the coordinator. Implemented over gRPC by the
// worker daemon and by in-memory fakes in tests.
class JobReporter {
 public:
  virtual ~JobReporter() = default;
  // Returns true when the job must stop (cancelled or failed elsewhere).
  // Called on the StepReporter's thread, one report at a time, in step
  // order.
  virtual absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& report) = 0;
  // The same, with the whole reply (a divergence repair it announces); the
  // default leaves *reply empty. The StepReporter calls this one.
  virtual absl::StatusOr<bool> ReportStepWithReply(const v1::ReportStepRequest& report,
                                                   v1::ReportStepReply* reply) {
    reply->Clear();
    return ReportStep(report);
  }
  // Several consecutive reports in one call (ReportSteps), in step order;
  // true when the job must stop. *reply is the last report's reply, or the
  // first one that said stop (the reports after it are not processed). The
  // default sends them one by one with ReportStepWithReply.
  virtual absl::StatusOr<bool> ReportStepsWithReply(
      absl::Span<const v1::ReportStepRequest* const> reports, v1::ReportStepReply* reply) {
    absl::StatusOr<bool> stop = false;
    for (const v1::ReportStepRequest* r : reports) {
      stop = ReportStepWithReply(*r, reply);
      if (!stop.ok() || *stop) break;
    }
    return stop;
  }
  virtual absl::Status ReportEval(const v1::ReportEvalRequest& report) = 0;
  // Final weights of rank 0, with the model's parameter layout.
  virtual absl::Status UploadWeights(uint64_t job, const Replica& replica) = 0;
};

// Steps a worker may run ahead of the coordinator's replies (see above).
inline constexpr int kReportLag = 2;
// Reports sent per call (see "Batches" above).
inline constexpr int kReportBatch = 2;

struct StepReporterOptions {
  int lag = kReportLag;  // >= 0
  // Reports per ReportSteps call (>= 1; at most lag + 1 are used).
  int batch = kReportBatch;
  // Longest wait for a reply (or a hash) in any call.
  absl::Duration timeout = absl::Seconds(30);
  // The job's stop flag (JobRunner::RequestStop); nullptr = none. Waits
  // return CANCELLED soon after it is set.
  const std::atomic<bool>* stop = nullptr;
  uint64_t job_id = 0;  // for messages
  // The reports' worker_id: the slots' strings are sized once, up front, so
  // no step allocates (see WarmReport).
  std::string worker_id;
  // Divergence location (issue 10): where each block of the weights starts
  // (the model's tensors, ascending from 0; empty = no block hashes). Each
  // report's block_hashes gets one HashBlock per block, hashed with the
  // weights on the same thread.
  std::vector<int64_t> block_starts;
  // The replica's optimizer: each report's optimizer_hash is HashReplica
  // of its state (no parameters), taken with the weights. Not owned;
  // nullptr = none. Nothing may change it until WaitHashed() returns (the
  // same rule as for the weights).
  const Optimizer* optimizer = nullptr;
};

// Sizes the strings of `report` (worker_id, weights_hash) so that filling
// it later reuses their storage.
void WarmReport(const std::string& worker_id, v1::ReportStepRequest* report);

class StepReporter {
 public:
  // `reporter` is not owned and must outlive this.
  StepReporter(JobReporter* reporter, StepReporterOptions options);
  ~StepReporter();
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  // Blocks until at most `lag` submitted reports are unanswered. OK, or
  // CANCELLED (a reply said stop, or *stop was set), the first failed
  // report's error, or DEADLINE_EXCEEDED.
  absl::Status WaitForRoom();
  // The weights passed with the last Submit are hashed (Submit hashes them
  // before it returns): returns the verdict so far, without waiting. Kept so
  // that callers state where they rely on the hash. Errors as WaitForRoom.
  absl::Status WaitHashed();
  // Hashes `weights` (and the optimizer state) on this thread into
  // `*report` (weights_hash, block_hashes, optimizer_hash), queues it for
  // the reporter thread and leaves an older report's message in *report
  // for reuse. Requires a preceding WaitForRoom() that returned OK.
  void Submit(v1::ReportStepRequest* report, absl::Span<const float> weights);
  // Blocks until every submitted report is answered. Errors as WaitForRoom.
  absl::Status Flush();

  // Fused hashing: an observer to pass to the update (Replica::Apply) of
  // `weights`, the weights the next Submit reports. As the optimizer writes
  // each chunk, it hashes the chunk (the weights hash and block hashes, and
  // the optimizer's slots when there is one per parameter, i.e. SGD with
  // momentum) while it is in this core's cache; Submit then uses these
  // hashes instead of reading 2 x 4 bytes per parameter again. Submit uses
  // them only if the update covered every weight of the same span and the
  // optimizer made exactly one step since; otherwise it hashes as without
  // (without an optimizer in the options, only the coverage is checked).
  // Whoever changes the weights or the optimizer state between the update
  // and Submit (fault injection) calls DiscardUpdateHash(). Job thread only.
  UpdateObserver* HashDuringUpdate(absl::Span<const float> weights);
  void DiscardUpdateHash() { update_hash_.armed = false; }

  // Hash of the last submitted weights; requires a successful WaitHashed()
  // or Flush() after the last Submit.
  WeightHash last_hash();
  // A 64-bit fold of the last submitted state's weights and optimizer
  // hashes (0 before the first Submit); same preconditions as last_hash().
  uint64_t last_identity();
  // Reports answered so far (for tests).
  int64_t answered();
  // Submits that used the hashes taken during the update (for tests; job
  // thread only).
  int64_t update_hashes_used() const { return update_hashes_used_; }

  // Sizes `report`'s block hashes and optimizer hash as the slots' (call
  // once on the job thread's own message: swapping it in never allocates).
  void Warm(v1::ReportStepRequest* report) const;

  // The divergence repair the latest reply announced (ReportStepReply
  // fields 140-142): the step boundary (0 = none) is read without a lock,
  // so the job thread may look at every boundary.
  int64_t repair_step() const { return repair_step_.load(std::memory_order_acquire); }
  struct Repair {
    int64_t step = 0;
    int source = -1;
    std::vector<int> ranks;
  };
  Repair repair();

 private:
  struct Slot {
    v1::ReportStepRequest report;
    absl::Span<const float> weights;
    WeightHash hash;
    uint64_t identity = 0;  // weights and optimizer hashes folded
  };

  // HashDuringUpdate's observer: feeds the job thread's hash states.
  class UpdateHash : public UpdateObserver {
   public:
    explicit UpdateHash(StepReporter* r) : r_(r) {}
    void Updated(int64_t begin, int64_t end) override;

    bool armed = false;
    bool slots_streamed = false;  // job_hasher_ holds the optimizer hash's prefix
    int64_t steps_after = 0;      // the optimizer's steps() once the update is done
    absl::Span<const float> weights;
    std::vector<uint64_t> blocks;  // sized once (block_starts)

   private:
    StepReporter* const r_;
  };

  void Loop();
  // Starts the optimizer hash (HashReplica of no parameters) in job_hasher_:
  // its header, for `steps` optimizer steps.
  void BeginOptimizerHash(int64_t steps);
  // The optimizer hash into the slot (and its identity).
  void FinishOptimizerHash(Slot* slot, const WeightHash& oh);
  // Hashes the slot's weights (and blocks, optimizer state) into it; the
  // caller owns the slot (the job thread, in Submit).
  void HashSlot(Slot* slot);
  // Waits until `ready` (with mu_ held) or the timeout / stop; `what`
  // names the missing thing in the DEADLINE_EXCEEDED message.
  absl::Status Await(bool (StepReporter::*ready)() const, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The verdict so far: stop / error, or OK.
  absl::Status StateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllAnswered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the reporter thread may send now, starting at `next`.
  int64_t Sendable(int64_t next) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Slot& SlotOf(int64_t i) { return slots_[static_cast<size_t>(i) % slots_.size()]; }

  JobReporter* const reporter_;
  const StepReporterOptions options_;

  absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);  // lag + 1, ring
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;  // reports queued
  int64_t answered_ ABSL_GUARDED_BY(mu_) = 0;   // replies in (or skipped after an end)
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  // Flush was called: send what is queued without waiting for a full batch.
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  // The batch being sent (the reporter thread's; sized once).
  std::vector<const v1::ReportStepRequest*> batch_;
  // The end the coordinator (or the network) decided: a reply said stop at
  // stop_step_ (the first step of that call's batch: stop_first_), or a
  // report failed.
  int64_t stop_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t stop_first_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> repair_step_{0};
  Repair repair_ ABSL_GUARDED_BY(mu_);
  v1::ReportStepReply reply_;  // the reporter thread's, reused
  // The job thread's hash states (made once: no allocation per step).
  WeightHasher job_hasher_;
  FusedWeightHasher fused_;
  UpdateHash update_hash_{this};
  int64_t update_hashes_used_ = 0;  // job thread only
  std::thread thread_;  // last: started after everything above
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_STEP_REPORTER_H_
