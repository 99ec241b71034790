// JobRunner: one worker's part of one distributed job, with no gRPC in it.
//
// Every step t:
//   1. the global batch of t (GlobalBatchSampler, the same for every K)
//      and this rank's contiguous slice of it;
//   2. forward + backward on the slice: gradient SUM, loss sum, count;
//   3. Combine: (sum, loss, count) summed over all ranks, bit-identical;
//   4. Apply: mean = sum / total count, learning rate of t, optimizer step;
//      unless the combined non-finite flags (Replica::flags(), one slot per
//      rank, summed with the gradient) say some rank's gradient had a NaN
//      or an infinity: then spec.on_nonfinite decides, the same on every
//      rank: "skip" the update (counted in the report) or "fail" the job
//      ("non-finite gradient on rank 1 at step 7");
//   5. hash the weights and report (step, hash, loss, timing) to the
//      coordinator, which compares all ranks' hashes; stop when it says so.
//      Reports are pipelined (step_reporter.h): the next step starts
//      without waiting for the reply, but at most `report_lag` steps run
//      ahead of the replies, and the job ends (final weights, ReportDone)
//      only after every reply is in.
// At epoch ends (and at the end) rank 0 evaluates on the test split.
// When done, rank 0 uploads the final weights.
//
// Threading: Run() is called on one thread; RequestStop() may be called
// from any thread and makes Run() return CANCELLED at the next step
// boundary (the caller should also shut the transport down to interrupt a
// Combine that waits on a peer).
#ifndef LOCKSTEP_WORKER_JOB_RUNNER_H_
#define LOCKSTEP_WORKER_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/collective/ps_aggregator.h"
#include "common/data/fashion_mnist.h"
#include "common/log.h"
#include "common/train/job_checkpoint.h"
#include "common/train/replica.h"
#include "common/train/state_board.h"
#include "proto/coordinator.pb.h"
#include "worker/combiner.h"
#include "worker/step_observer.h"
#include "worker/step_reporter.h"

namespace lockstep {

class JobCheckpointer;
struct SamplerPosition;

struct JobRunnerOptions {
  uint64_t job_id = 0;     // the coordinator's job id: reports, logs, errors
  // The key of the job's combines on the wire (Assignment.group_key);
  // 0 = job_id. Errors from the combiner name job_id, not this key.
  uint64_t group_key = 0;
  v1::JobSpec spec;
  int rank = 0;
  int world = 1;
  std::string worker_id;
  // How peers are named in errors (index = rank); may be empty.
  std::vector<std::string> peer_names;
  absl::Duration combine_timeout = absl::Seconds(30);
  // Fault injection for tests: after applying this step's update, nudge
  // this replica's first weight by one ulp, so its hash drifts (-1 = off).
  int64_t perturb_at_step = -1;
  // Fault injection for tests: at this step, put a NaN in this rank's local
  // gradient before the non-finite check (-1 = off).
  int64_t nan_at_step = -1;
  // ... and the value put there (a NaN unless a test wants a large finite
  // value whose SUM over ranks overflows).
  float nan_value = std::numeric_limits<float>::quiet_NaN();
  bool nan_in_loss = false;  // put it in the local loss sum instead
  // Replica state transfer (common/train/replica_state.h): where this rank
  // publishes its state when a peer must copy it (not owned; nullptr = it
  // never does), and how it fetches peer `rank`'s state published at step
  // boundary `step` (empty = it cannot). The daemon fetches over gRPC
  // (worker/net/state_service.h); tests fetch from another runner's board.
  StateBoard* state_board = nullptr;
  // Fault injection for tests: after applying this step's update, flip the
  // lowest bit of parameter `flip_index` (flip_optimizer: of optimizer slot
  // `flip_index`) of this replica (-1 = off).
  int64_t flip_at_step = -1;
  // Divergence repair in the combine (on_divergence=repair, K > 1; see
  // Run): off only in tests, to show what the coordinator's repair alone
  // gives.
  bool check_in_combine = true;
  bool flip_optimizer = false;
  int64_t flip_index = 0;
  std::function<absl::StatusOr<std::string>(int rank, int64_t step, int64_t expected_bytes,
                                            absl::Time deadline)>
      fetch_state;
  // A resumed job (spec.resume_from) whose rank finds no checkpoint in its
  // own directory fetches the file from the worker that wrote it
  // (Assignment.checkpoint_source): (largest file accepted, deadline) ->
  // (the checkpoint's next step, the file's bytes). It is stored in the
  // resume directory and loaded as any other (ResumeHere). Null: none.
  std::function<absl::StatusOr<std::pair<int64_t, std::string>>(uint64_t max_bytes,
                                                                absl::Time deadline)>
      fetch_checkpoint;
  // Membership (server/membership.h): the assignment's generation (sent
  // with every step report) and, for a regrouped job, the replica state to
  // start from (EncodeReplicaState bytes: weights, optimizer state, next
  // step; "" = start as usual: step 0 or spec.resume_from).
  int64_t generation = 0;
  std::string initial_state;
  // initial_state is a finished peer's final state (a coordinator restart
  // regrouped the job after that peer finished: server/membership.h
  // RegroupAfterRestart): the runner runs no step and skips the dataset
  // agreement, which the finished peers never join.
  bool initial_state_is_final = false;
  // A rank that joins a running job (membership: a replacement or a late
  // joiner) holds no state: with initial_state empty and this >= 0 it
  // fetches rank initial_state_source's state published at boundary
  // initial_state_step (fetch_state, sized for this job's model) before it
  // trains, and starts there.
  int initial_state_source = -1;
  int64_t initial_state_step = -1;
  // Steps the job may run ahead of the coordinator's replies to its step
  // reports (step_reporter.h; 0 = wait for each reply), and the longest
  // wait for one reply.
  int report_lag = kReportLag;
  absl::Duration report_timeout = absl::Seconds(30);
  // Told each step's timing (compute / communication / wait, see
  // step_observer.h). Not owned; nullptr = none.
  StepObserver* observer = nullptr;
  // Training log lines (component "worker", with job, rank and worker on
  // every line). Not owned; nullptr = stderr text lines. One line per step
  // is too many (a 10-epoch Fashion-MNIST job has 4690 steps), so a
  // "training" line is written after step 0 and then after the first step
  // that ends at least `log_interval` after the previous line; every epoch's
  // last step writes an "epoch done" line instead, and rank 0's test
  // evaluations an "eval" line. step = the 0-based step index t, as in
  // ReportStep and the coordinator's sync checks.
  const Logger* logger = nullptr;
  absl::Duration log_interval = absl::Seconds(10);
  // Time source of the log interval and the lines' examples/s (not owned;
  // nullptr = real time).
  Clock* clock = nullptr;
};

struct JobOutcome {
  int64_t steps = 0;
  bool has_test = false;
  double test_accuracy = 0;
  double test_loss = 0;
  std::string weights_hash;
  // Steps whose update was skipped for a non-finite gradient
  // (spec.on_nonfinite = "skip").
  int64_t skipped_steps = 0;
};

// XXH3-128 of a training set's contents (counts, features and labels, in
// order): what the ranks compare before step 0, so a host with stale data is
// named instead of training silently on other examples.
WeightHash TrainingSetHash(const Dataset& data);

// The job key of the shape-agreement round that precedes step 0 (a
// separate key so it never mixes with gradient steps, and ps shards for it
// are separate from the gradient shards).
inline uint64_t ShapeAgreementJob(uint64_t job) { return PsShapeAgreementKey(job); }

// Combine keys on the wire: step + an offset that starts at 0 and grows
// so that the keys of a job only ever increase (ps shards refuse an older
// step): a step computed again after a divergence repair in its combine
// takes the next key (offset + 1), and after a rollback to the checkpoint
// of step s found in the combine of step t the steps from s on continue
// after t's key (offset + t - s + 1). Every rank sees the same combines, so
// every rank keeps the same offset.

// How often a job rolls back to a checkpoint (divergence without a
// majority) before it fails instead: a fault that comes back every time is
// not resolved by replaying it.
inline constexpr int kMaxRollbacks = 3;

// The shape-agreement key's rounds only ever increase (a ps shard refuses
// an older step): 0 the dataset agreement, 1 a resume's announcement,
// 2 .. 1 + kMaxRollbacks the rollbacks' (job_rollback.cc), then the final
// state check (AgreeOnFinalState).
inline constexpr int64_t kFinalStateRound = 2 + kMaxRollbacks;

class JobRunner {
 public:
  // `data`, `combiner` and `reporter` are not owned and must outlive Run().
  JobRunner(JobRunnerOptions options, const TrainTest* data, GradientCombiner* combiner,
            JobReporter* reporter);

  // Trains every step of the job. Before step 0 the ranks agree on the
  // dataset's shape AND contents with one tiny combine (rank r contributes
  // its dim, class count, example count and TrainingSetHash at slot r, as
  // bytes, so counts are exact at any size), so a worker whose dataset
  // differs is named on every rank (FAILED_PRECONDITION "rank 2 (addr) has
  // dim 4, ..." or "rank 1 (addr) has a different training set: hash ...
  // vs ...") instead of a confusing length mismatch or silent training on
  // other examples.
  // Errors: the spec does not fit the data (InvalidArgument naming the
  // field and this worker), a peer or shard failed (its status, naming it),
  // CANCELLED when stopped.
  absl::StatusOr<JobOutcome> Run();

  void RequestStop() {
    absl::MutexLock lock(&stop_mu_);
    stop_.store(true);
  }

  // The replica after Run() (null before).
  const Replica* replica() const { return replica_.get(); }
  // After Run(): the step the replica is at (the next step it would run:
  // every step before it applied, none after). Read on Run()'s thread.
  int64_t next_step() const { return next_step_; }

 private:
  JobRunnerOptions options_;
  const TrainTest* data_;
  GradientCombiner* combiner_;
  JobReporter* reporter_;
  RealClock real_clock_;
  Clock* const clock_;
  const Logger log_;
  std::atomic<bool> stop_{false};
  // Held only to set stop_, so a waiter can wake on it (WaitForStop).
  absl::Mutex stop_mu_;
  // Until RequestStop() or `deadline`; true when stopped.
  bool WaitForStop(absl::Time deadline);
  absl::Status AgreeOnShape(const Dataset& train);
  // After the last step of a K > 1 job that writes checkpoints: every rank
  // sends its final state's identity (StepReporter::last_identity) in one
  // more small combine, on the dataset agreement's key and layout at round
  // kFinalStateRound, so that rank 0 writes the final checkpoint only when every
  // rank holds the same state (as every other checkpoint is verified in
  // the next step's combine). True when all K agree.
  absl::StatusOr<bool> AgreeOnFinalState(uint64_t identity);
  // A regrouped generation (generation > 0) that starts at the job's last
  // step runs no step: its ranks agree on their state (AgreeOnFinalState,
  // K > 1) and rank 0 writes the final checkpoint of `r` at `total`.
  absl::Status FinalCheckpointOfRegroup(int64_t total, const SamplerPosition& position,
                                        JobCheckpointer* checkpointer,
                                        JobCheckpointer::WriteDone done, const Replica& r);
  void FlipOneBit(Replica* r);
  // The divergence repair the coordinator scheduled at boundary `step`
  // (StepReporter::repair): the source rank publishes its state, the drifted
  // ranks fetch and restore it; other ranks do nothing.
  absl::Status RepairAtBoundary(int64_t step, StepReporter* reporter, Replica* r);
  // At boundary `step`: rank source_rank publishes its state; a `target`
  // fetches it and restores it. Requires the last report's hash done.
  absl::Status CopyState(int64_t step, int source_rank, bool target, Replica* r);
  // The rank this replica last copied its state from (-1 = none): the next
  // step report says so (ReportStepRequest.repaired_from).
  int repaired_from_ = -1;
  // Divergence without a majority (K = 2, a tie) found in the combine of
  // `step` under repair, in a job that writes checkpoints at intervals
  // (worker/job_rollback.cc): rank 0 waits for its checkpoint write in
  // flight, takes the newest checkpoint of a step before `step` that loads
  // (checksum and weights hash verified; the checkpoints of `step` and
  // later hold unverified state and are removed), restores it, offers it on
  // its state board and announces (step, weights hash) in a small combine
  // keyed like the dataset agreement; every other rank fetches that state
  // from rank 0 (only rank 0 reads the checkpoint directory) and checks its
  // hash. Returns the step to continue from and the restored weights' hash.
  // FailedPrecondition (the same on every rank) when there is none, or
  // after kMaxRollbacks.
  struct Rollback {
    int64_t next_step = 0;
    WeightHash hash;
  };
  // Rank 0's (found, next step, weights hash), told to every rank in a
  // small combine under the shape-agreement key at `round` (rank 0's
  // `*a` is sent; every rank's `*a` is set to it). Returns the combine's
  // error as it is.
  struct Announcement {
    bool found = false;
    int64_t next_step = 0;
    WeightHash hash;
  };
  // `timeout`: the combine's (options_.combine_timeout when zero).
  absl::Status AnnounceFromRankZero(int64_t round, Announcement* a,
                                    absl::Duration timeout = absl::ZeroDuration());
  absl::StatusOr<Rollback> RollBack(int64_t step, JobCheckpointer* checkpointer,
                                    const SamplerPosition& position, int64_t total, Replica* r);
  // A rank other than 0 takes the state rank 0 restored from a checkpoint,
  // fetched from rank 0's state board (published before the announcing
  // combine), and checks it is for `next_step` with weights hash `hash`.
  // Errors start with `what`.
  absl::Status FetchRankZeroState(const std::string& what, int64_t next_step,
                                  const WeightHash& hash, Replica* r);
  // A job resumed from spec.resume_from (K > 1, first generation, peers'
  // states fetchable; worker/job_rollback.cc): rank 0 alone reads the
  // checkpoint (ResumeReplica), offers the restored state and announces
  // (next step, weights hash) in a small combine; the other ranks fetch it
  // (FetchRankZeroState). Returns the step to start at. When rank 0 cannot
  // load one, rank 0 returns its error; the others wait up to the combine
  // timeout for the job to be stopped (CANCELLED; the coordinator fails the
  // job with rank 0's reason), else FailedPrecondition naming rank 0.
  absl::StatusOr<int64_t> ResumeFromRankZero(const SamplerPosition& position, int64_t total,
                                             Replica* r);
  // This rank loads the checkpoint spec.resume_from names (ResumeReplica)
  // and logs it (and the newer files it skipped); errors name the worker.
  absl::StatusOr<ResumePoint> ResumeHere(const SamplerPosition& position, int64_t total,
                                         Replica* r);
  int rollbacks_ = 0;
  // The last rollback (-1 = none): reported with every step up to `at`.
  int64_t rolled_back_to_ = -1, rolled_back_at_ = -1;
  // The test-only faults fire once per job (not again when steps are
  // computed again after a rollback).
  bool flipped_ = false, perturbed_ = false;
  std::string PeerName(int rank) const;
  // Fills every field of step `step`'s report but the weights hash (the
  // StepReporter adds it); reuses the message's storage.
  void FillStepReport(int64_t step, int64_t epoch, int64_t total, double loss, int64_t examples,
                      float lr, const StepTiming& timing, int64_t resident_bytes,
                      v1::ReportStepRequest* report) const;
  // options_.group_key, or job_id when it is 0.
  uint64_t WireKey() const;
  // `s` with the wire keys in its message replaced by "job <job_id>".
  absl::Status UserFacing(const absl::Status& s) const;
  // A job stopped while its combine ran: CANCELLED, with what the combine
  // was waiting for when the stop came (a shard it could not connect to
  // says why, grpc_ps_client.h), since the coordinator may have stopped the
  // job because every rank waited ("job 4 stopped at step 7 (its combine:
  // ...)"). `s`: the combine's status as users see it (UserFacing).
  static absl::Status StoppedInCombine(uint64_t job, absl::string_view when,
                                       const absl::Status& s);

  std::unique_ptr<Replica> replica_;
  int64_t next_step_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_JOB_RUNNER_H_
