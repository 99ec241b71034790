#include "worker/job_runner.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/data/sampler.h"
#include "common/process_stats.h"
#include "common/optim/lr_schedule.h"
#include "common/train/job_checkpoint.h"
#include "common/train/job_spec_convert.h"
#include "common/train/replica_state.h"
#include "common/train/nonfinite.h"
#include "worker/float_bytes.h"
#include "worker/step_combine.h"

namespace lockstep {
namespace {

// Steps between two reads of the resident memory (a system call).
constexpr int64_t kResidentEvery = 16;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

JobRunner::JobRunner(JobRunnerOptions options, const TrainTest* data,
                     GradientCombiner* combiner, JobReporter* reporter)
    : options_(std::move(options)),
      data_(data),
      combiner_(combiner),
      reporter_(reporter),
      clock_(options_.clock != nullptr ? options_.clock : &real_clock_),
      log_(LoggerOrStderr(options_.logger, "worker")
               .WithFields({{"job", options_.job_id},
                            {"rank", options_.rank},
                            {"worker", options_.worker_id}})) {}

uint64_t JobRunner::WireKey() const {
  return options_.group_key != 0 ? options_.group_key : options_.job_id;
}

absl::Status JobRunner::StoppedInCombine(uint64_t job, absl::string_view when,
                                         const absl::Status& s) {
  return absl::CancelledError(
      absl::StrCat("job ", job, " stopped", when, " (its combine: ", s.message(), ")"));
}

absl::Status JobRunner::UserFacing(const absl::Status& s) const {
  // Transports and ps shards name the keys they carry (the group key, the
  // shape round's key); users know the coordinator's job id.
  const std::string job = absl::StrCat("job ", options_.job_id);
  const std::string group = absl::StrCat("group ", options_.job_id);
  const std::string message = absl::StrReplaceAll(
      s.message(), {{absl::StrCat("job ", ShapeAgreementJob(WireKey())), job},
                    {absl::StrCat("job ", WireKey()), job},
                    {absl::StrCat("group ", ShapeAgreementJob(WireKey())), group},
                    {absl::StrCat("group ", WireKey()), group}});
  return absl::Status(s.code(), message);
}

std::string JobRunner::PeerName(int rank) const {
  if (rank < static_cast<int>(options_.peer_names.size())) {
    return absl::StrCat("rank ", rank, " (", options_.peer_names[rank], ")");
  }
  return absl::StrCat("rank ", rank);
}

absl::StatusOr<JobOutcome> JobRunner::Run() {
  // Named for per-thread CPU accounting (top -H, /proc/PID/task/TID/comm).
  pthread_setname_np(pthread_self(), "lk-job");
  const uint64_t job = options_.job_id;
  auto spec = ToTrainSpec(options_.spec);
  if (!spec.ok()) return spec.status();
  const Dataset& train = data_->train;
  if (spec->lr.decay == "cosine" && spec->lr.total_steps == 0) {
    spec->lr.total_steps = TotalSteps(*spec, train.num_examples);
  }
  if (absl::Status s = ValidateTrainSpec(*spec, options_.world); !s.ok()) return s;
  if (options_.world > 1 && !options_.initial_state_is_final) {
    if (absl::Status s = AgreeOnShape(train); !s.ok()) {
      if (stop_.load()) return StoppedInCombine(job, "", s);
      return s;
    }
  }
  if (train.num_examples == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", options_.worker_id, ": dataset ", train.name, " is empty"));
  }
  auto on_nonfinite = ParseNonFinitePolicy(options_.spec.on_nonfinite());
  if (!on_nonfinite.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.on_nonfinite: ", on_nonfinite.status().message()));
  }
  // One non-finite flag slot per rank in front of the gradient, and (repair,
  // K > 1) each rank's state identity as 8 byte-valued floats: every rank
  // compares the K identities in the combine of the next step, before any
  // update is applied (see the loop).
  // (Only a worker that can offer and fetch states takes part.)
  const bool inband = options_.check_in_combine && options_.world > 1 &&
                      options_.spec.on_divergence() != "halt" &&
                      options_.state_board != nullptr && options_.fetch_state != nullptr;
  // A job that writes checkpoints (K > 1) sends the identities too: rank 0
  // writes a checkpoint only once every rank was seen holding the same
  // state at its step, in the next step's combine (see the loop).
  const bool ids_in_combine =
      inband || (options_.world > 1 && !options_.spec.checkpoint_dir().empty());
  auto replica = Replica::Create(*spec, train.dim, train.num_classes, options_.world,
                                 ids_in_combine ? 8 * options_.world : 0);
  if (!replica.ok()) {
    return absl::Status(replica.status().code(),
                        absl::StrCat("worker ", options_.worker_id, " (dataset ", train.name,
                                     ": dim ", train.dim, ", ", train.num_classes,
                                     " classes): ", replica.status().message()));
  }
  replica_ = *std::move(replica);
  Replica& r = *replica_;

  auto combine_config = CombineConfigFromSpec(options_.spec);
  if (!combine_config.ok()) return combine_config.status();
  // Backward + combine, overlapped in buckets (step_combine.h).
  StepCombiner step_combiner(combiner_, *combine_config, options_.world, options_.rank);
  step_combiner.InjectNanAtStep(options_.nan_at_step);
  step_combiner.SetInjectedValue(options_.nan_value, options_.nan_in_loss);
  std::vector<int> nonfinite_ranks;  // flagged ranks of a step, reused
  nonfinite_ranks.reserve(options_.world);
  GlobalBatchSampler sampler(train.num_examples, spec->global_batch, spec->seed);
  const int64_t total = TotalSteps(*spec, train.num_examples);
  const int64_t per_epoch = sampler.steps_per_epoch();
  // Checkpoints (rank 0 writes them) and resume: with peers' states
  // fetchable (a worker daemon's job) rank 0 reads the checkpoint and the
  // others copy its restored state (ResumeFromRankZero); else every rank
  // reads the checkpoint itself. A regrouped generation takes its state
  // from its peers instead.
  const SamplerPosition position{train.num_examples, spec->global_batch, false};
  JobCheckpointer checkpointer(options_.spec, job);
  const bool writes_checkpoints = options_.rank == 0 && checkpointer.enabled();
  int64_t first_step = 0;
  const bool regroup_state = !options_.initial_state.empty() || options_.initial_state_source >= 0;
  const bool resume = !options_.spec.resume_from().checkpoint_dir().empty() && !regroup_state;
  if (resume && options_.world > 1 && options_.generation == 0 &&
      options_.state_board != nullptr && options_.fetch_state) {
    auto next = ResumeFromRankZero(position, total, &r);
    if (!next.ok()) {
      if (stop_.load()) return absl::CancelledError(absl::StrCat("job ", job, " stopped"));
      return next.status();
    }
    first_step = *next;
  } else if (resume) {
    auto point = ResumeHere(position, total, &r);
    if (!point.ok()) return point.status();
    first_step = point->next_step;
  }
  if (!options_.initial_state.empty()) {  // a regrouped job (membership)
    auto next = RestoreReplicaState(options_.initial_state, &r);
    if (!next.ok()) {
      return absl::Status(next.status().code(),
                          absl::StrCat("worker ", options_.worker_id,
                                       ": regroup state: ", next.status().message()));
    }
    first_step = *next;
    if (options_.initial_state_is_final && first_step < total) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", options_.worker_id, ": the final state copied from a finished rank is at "
          "step ", first_step, ", the job ends at step ", total));
    }
  } else if (options_.initial_state_source >= 0) {  // a joiner (membership)
    const int source = options_.initial_state_source;
    const int64_t at = options_.initial_state_step;
    const absl::Time t0 = absl::Now();
    absl::StatusOr<std::string> bytes =
        options_.fetch_state ? options_.fetch_state(source, at, ExpectedStateBytes(r),
                                                    t0 + options_.combine_timeout)
                             : absl::FailedPreconditionError("this worker cannot fetch a "
                                                             "peer's state");
    absl::StatusOr<int64_t> next =
        bytes.ok() ? RestoreReplicaState(*bytes, &r) : absl::StatusOr<int64_t>(bytes.status());
    if (!next.ok() || *next != at) {
      replica_.reset();  // holds nothing: a regroup must not offer it
      return absl::Status(
          next.ok() ? absl::StatusCode::kDataLoss : next.status().code(),
          absl::StrCat("worker ", options_.worker_id, ": joining at step ", at, ", state of ",
                       PeerName(source), ": ",
                       next.ok() ? absl::StrCat("it is for step ", *next)
                                 : std::string(next.status().message())));
    }
    log_.Info("joined: copied a peer's weights and optimizer state",
              {{"step", at}, {"source_rank", source},
               {"seconds", absl::ToDoubleSeconds(absl::Now() - t0)}});
    first_step = at;
  }
  next_step_ = first_step;
  if (writes_checkpoints) {
    if (absl::Status s = checkpointer.Start(clock_->Now()); !s.ok()) return s;
  }
  JobOutcome outcome;
  // Training lines: see JobRunnerOptions::log_interval.
  absl::Time last_line = clock_->Now();
  int64_t examples_since_line = 0;
  std::vector<int64_t> slice;  // this rank's slice of the step's batch, reused
  // Step reports, pipelined (step_reporter.h); `report` is refilled every
  // step (Submit swaps it with an older one: no allocation).
  StepReporterOptions report_options;
  report_options.lag = options_.report_lag;
  report_options.timeout = options_.report_timeout;
  report_options.stop = &stop_;
  report_options.job_id = job;
  report_options.worker_id = options_.worker_id;
  // Divergence location: one hash per parameter tensor, and the optimizer
  // state's hash, with every report. Both only tell replicas apart: with
  // one rank there is nothing to compare them with, so K = 1 reports the
  // weights hash alone (the momentum's pass and the block hashes inside the
  // weights' pass fewer per step, README "Step reports are pipelined"). A
  // job that grows or shrinks runs each generation with its own K.
  if (options_.world > 1) {
    for (const ParamBlock& b : r.model().layout()) {
      report_options.block_starts.push_back(b.offset);
    }
    report_options.optimizer = &r.optimizer();
  }
  StepReporter reporter(reporter_, report_options);
  v1::ReportStepRequest report;
  WarmReport(options_.worker_id, &report);
  reporter.Warm(&report);
  // Divergence repair in the combine (on_divergence=repair): with each
  // step's flags a rank writes the identity of its state at the step's
  // boundary (the weights and optimizer hashes of the previous step's
  // report). After the combine every rank reads all K; if a majority holds
  // one identity and some rank differs, that rank copies the lowest majority
  // rank's state (state transfer at this boundary) and every rank computes
  // the step again (under the next combine key, job_runner.h): the drifted
  // replica's gradient never reaches an update, so the job ends with the
  // weights of a run without the fault.
  std::vector<uint64_t> ids(static_cast<size_t>(options_.world), 0);
  // No majority (K = 2, a tie): every rank rolls back to the last
  // checkpoint before it (RollBack) when the job writes them at intervals;
  // else the coordinator's check fails the job.
  const bool can_roll_back =
      !options_.spec.checkpoint_dir().empty() &&
      (options_.spec.checkpoint_every_steps() > 0 || options_.spec.checkpoint_every_seconds() > 0);
  // The combine keys' offset (job_runner.h: keys only ever increase).
  int64_t wire_offset = 0;
  auto grow_offset = [&](int64_t by, int64_t step) {
    wire_offset += by;
    if (options_.nan_at_step > step) {
      step_combiner.InjectNanAtStep(options_.nan_at_step + wire_offset);
    }
  };
  uint64_t id_override = 0;
  bool use_override = false;
  absl::Status id_status;
  // A checkpoint's "written" / "failed" log line (on the writer thread).
  auto checkpoint_done = [this](int64_t step) -> JobCheckpointer::WriteDone {
    return [this, step](const absl::StatusOr<std::string>& path, double capture,
                        double seconds) {
      if (path.ok()) {
        log_.Info("checkpoint written", {{"step", step},
                                         {"path", *path},
                                         {"capture_seconds", capture},
                                         {"write_seconds", seconds}});
      } else {
        // Training goes on: a failed checkpoint loses no step. The
        // directory was checked before step 0.
        log_.Warn("checkpoint failed", {{"step", step}, {"error", path.status().ToString()}});
      }
    };
  };
  if (ids_in_combine) {
    step_combiner.SetIdWriter([&](absl::Span<float> slots) {
      uint64_t id = id_override;
      if (!use_override) {
        if (absl::Status s = reporter.WaitHashed(); !s.ok()) id_status = s;
        id = reporter.last_identity();
      }
      std::fill(slots.begin(), slots.end(), 0.0f);
      PutBytes(id, &slots[static_cast<size_t>(8 * options_.rank)]);
    });
  }
  int64_t resident_bytes = 0;
  for (int64_t step = first_step; step < total; ++step) {
    if (stop_.load()) {
      return absl::CancelledError(absl::StrCat("job ", job, " stopped at step ", step));
    }
    // StepTiming (step_observer.h): wait, then exposed and compute.
    const auto t_wait = std::chrono::steady_clock::now();
    if (absl::Status s = reporter.WaitForRoom(); !s.ok()) return s;
    // A divergence repair at this boundary (one atomic load per step; after
    // WaitForRoom, which is what guarantees the announcing reply is in).
    if (reporter.repair_step() == step && step > 0) {
      if (absl::Status s = RepairAtBoundary(step, &reporter, &r); !s.ok()) return s;
    }
    const auto t0 = std::chrono::steady_clock::now();
    double wait_seconds = std::chrono::duration<double>(t0 - t_wait).count();
    sampler.SliceInto(step, options_.rank, options_.world, &slice);  // no allocation
    BatchStats local;
    int64_t count = 0;
    // This step's compute / communication / exposed / peer-wait seconds.
    CombineTiming combine_timing;
    if (absl::Status s =
            step_combiner.ComputeAndCombine(r, train, slice, WireKey(), step + wire_offset,
                                            options_.combine_timeout, &local, &count,
                                            &combine_timing);
        !s.ok()) {
      if (stop_.load()) {
        return StoppedInCombine(job, absl::StrCat(" at step ", step), UserFacing(s));
      }
      return UserFacing(s);
    }
    use_override = false;  // (set for the first step after a rollback)
    if (ids_in_combine) {
      if (!id_status.ok()) return id_status;
      const absl::Span<float> slots = r.ids();
      bool same = true;
      for (int q = 0; q < options_.world; ++q) {
        ids[q] = GetBytes(&slots[static_cast<size_t>(8 * q)]);
        same = same && ids[q] == ids[0];
      }
      // The checkpoint captured at this boundary holds the state these
      // identities name: written only when every rank holds the same one.
      if (checkpointer.captured_step() == step) {
        if (same) {
          checkpointer.CommitCaptured(checkpoint_done(step - 1));
        } else {
          checkpointer.DropCaptured();
          log_.Warn("checkpoint not written: the replicas differed at its step",
                    {{"step", step - 1}});
        }
      }
      if (!same && inband) {
        int best = 0, source = 0;
        for (int q = 0; q < options_.world; ++q) {
          const int votes = static_cast<int>(std::count(ids.begin(), ids.end(), ids[q]));
          if (votes > best) best = votes, source = q;
        }
        // No majority (K = 2, a tie): nothing to copy from; the
        // coordinator's check decides (FAILED).
        if (2 * best > options_.world) {
          const uint64_t majority = ids[source];
          const bool target = ids[options_.rank] != majority;
          if (absl::Status s = CopyState(step, source, target, &r); !s.ok()) return s;
          use_override = true;  // identical to the majority's now
          id_override = majority;
          grow_offset(1, step);
          absl::Status s = step_combiner.ComputeAndCombine(r, train, slice, WireKey(),
                                                           step + wire_offset,
                                                           options_.combine_timeout, &local,
                                                           &count, &combine_timing);
          use_override = false;
          if (!s.ok()) {
            if (stop_.load()) {
              return StoppedInCombine(job, absl::StrCat(" at step ", step), UserFacing(s));
            }
            return UserFacing(s);
          }
          log_.Warn("divergence found in the combine: step recomputed",
                    {{"step", step}, {"source_rank", source}, {"copied", target}});
        } else if (can_roll_back) {
          auto back = RollBack(step, &checkpointer, position, total, &r);
          if (!back.ok()) {
            if (stop_.load()) {
              return absl::CancelledError(absl::StrCat("job ", job, " stopped at step ", step));
            }
            return back.status();
          }
          // Every rank restored the same checkpoint: the same identity.
          use_override = true;
          id_override = back->hash.Fold();
          grow_offset(step - back->next_step + 1, step);
          rolled_back_to_ = back->next_step;
          rolled_back_at_ = step;
          next_step_ = back->next_step;
          step = back->next_step - 1;  // the loop's ++step: the checkpoint's step
          continue;
        }
      }
    }
    const double global_loss = count > 0 ? r.loss_sum() / count : 0.0;
    // (Submit hashed the previous step's weights on this thread: this only
    // looks at the verdict so far.)
    const auto t_hash = std::chrono::steady_clock::now();
    if (absl::Status s = reporter.WaitHashed(); !s.ok()) return s;
    wait_seconds += SecondsSince(t_hash);
    // Non-finite gradients or losses: every rank reads the same summed
    // flags, and the same verdict on the same combined bytes (a finite
    // local sum can overflow in the combine or on a 16-bit wire).
    const bool flagged = FlaggedRanks(r.flags(), &nonfinite_ranks);
    const bool skip = flagged || !step_combiner.combined_finite();
    if (skip && *on_nonfinite == NonFinitePolicy::kFail) {
      return absl::AbortedError(absl::StrCat(
          flagged ? absl::StrCat(DescribeFlags(r.flags()), " at step ", step)
                  : SumOverflowMessage(step),
          " (spec.on_nonfinite: fail)"));
    }
    // The update hashes what it writes while it is in cache (Submit below
    // reports those hashes: StepReporter::HashDuringUpdate).
    const float lr = skip ? LearningRate(r.spec().lr, r.spec().global_batch, step)
                          : r.Apply(step, count, reporter.HashDuringUpdate(r.params()));
    next_step_ = step + 1;
    // Steps before the last rollback's combine step were computed, counted,
    // evaluated and reported before it: a replayed one counts once (the
    // coordinator drops its report as a duplicate, too).
    const bool replay = rolled_back_at_ >= 0 && step < rolled_back_at_;
    if (skip) {
      if (!replay) ++outcome.skipped_steps;
      log_.Warn("update skipped: non-finite gradient",
                {{"step", step},
                 {"ranks", flagged ? RankList(nonfinite_ranks) : "none"},
                 {"reason", flagged ? DescribeFlags(r.flags()) : SumOverflowMessage(step)},
                 {"skipped_steps", outcome.skipped_steps}});
    }
    if (step == options_.flip_at_step && !flipped_) {
      flipped_ = true;
      FlipOneBit(&r);
      reporter.DiscardUpdateHash();  // Submit hashes the flipped state
    }
    if (step == options_.perturb_at_step && r.num_params() > 0 && !perturbed_) {
      perturbed_ = true;
      reporter.DiscardUpdateHash();
      float& w0 = r.mutable_params()[0];
      w0 = std::nextafter(w0, std::numeric_limits<float>::infinity());
    }
    StepTiming timing;
    timing.job = job;
    timing.step = step;
    timing.examples = local.count;
    timing.wait_seconds = wait_seconds;
    timing.exposed_seconds = combine_timing.exposed_seconds;
    timing.communication_seconds = combine_timing.communication_seconds;
    timing.peer_wait_seconds = combine_timing.peer_wait_seconds;
    timing.compute_seconds =
        SecondsSince(t_wait) - timing.wait_seconds - timing.exposed_seconds;
    // Resident memory: /proc/self/statm is read every kResidentEvery steps.
    if (step % kResidentEvery == 0) resident_bytes = ResidentBytes();
    FillStepReport(step, step / per_epoch + 1, total, global_loss, local.count, lr, timing,
                   resident_bytes, &report);
    report.set_update_skipped(skip);
    report.clear_nonfinite_ranks();
    for (int q : nonfinite_ranks) report.add_nonfinite_ranks(q);
    report.set_repaired(repaired_from_ >= 0);
    report.set_repaired_from(std::max(repaired_from_, 0));
    repaired_from_ = -1;
    const bool rolled_back = rolled_back_at_ >= 0 && step <= rolled_back_at_;
    report.set_rolled_back(rolled_back);
    report.set_rolled_back_to(rolled_back ? rolled_back_to_ : 0);
    report.set_rolled_back_at(rolled_back ? rolled_back_at_ : 0);
    reporter.Submit(&report, r.params());
    if (options_.observer != nullptr) options_.observer->OnStep(timing);

    const bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    examples_since_line += count;
    const absl::Time now = clock_->Now();
    if (step == 0 || epoch_end || now - last_line >= options_.log_interval) {
      const double seconds = absl::ToDoubleSeconds(now - last_line);
      log_.Info(epoch_end ? "epoch done" : "training",
                {{"step", step},
                 {"steps", total},
                 {"epoch", step / per_epoch + 1},
                 {"ex_per_s", seconds > 0 ? static_cast<double>(examples_since_line) / seconds
                                          : 0.0},
                 {"lr", lr},
                 {"loss", global_loss}});
      last_line = now;
      examples_since_line = 0;
    }
    if (writes_checkpoints && checkpointer.Due(step + 1, total, now)) {
      // The weights' hash is the one this step reports (Submit computed it;
      // nothing changes the weights before the next Apply).
      // The state is copied here; the file is written, fsync'd and renamed
      // on a writer thread while training goes on (one write in flight).
      if (absl::Status s = reporter.WaitHashed(); !s.ok()) return s;
      checkpointer.Capture(r, step + 1, total, position, reporter.last_hash(), now);
      // Written once the next combine showed every rank with this state
      // (above); the final one once the final state check did (after the
      // loop); at once when there is no such combine (K = 1).
      if (!ids_in_combine) checkpointer.CommitCaptured(checkpoint_done(step));
    }
    // The final checkpoint holds a state every rank holds: one more small
    // combine after the last step (every rank takes part: the condition is
    // the same on all of them), before rank 0's final evaluation.
    if (step + 1 == total && ids_in_combine && !options_.spec.checkpoint_dir().empty()) {
      if (absl::Status s = reporter.WaitHashed(); !s.ok()) return s;
      absl::StatusOr<bool> same = AgreeOnFinalState(reporter.last_identity());
      if (!same.ok()) {
        if (stop_.load()) return StoppedInCombine(job, " after the last step", same.status());
        return same.status();
      }
      if (checkpointer.captured_step() == total) {
        if (*same) {
          checkpointer.CommitCaptured(checkpoint_done(step));
        } else {
          checkpointer.DropCaptured();
          log_.Warn("final checkpoint not written: the replicas differed after the last step",
                    {{"step", step}});
        }
      }
    }
    const bool evaluate = options_.rank == 0 && data_->has_test() && epoch_end && !replay &&
                          (options_.spec.eval_each_epoch() || step + 1 == total);
    if (evaluate) {
      EvalStats e = r.Evaluate(data_->test);
      outcome.has_test = true;
      outcome.test_accuracy = e.accuracy();
      outcome.test_loss = e.mean_loss();
      v1::ReportEvalRequest eval;
      eval.set_worker_id(options_.worker_id);
      eval.set_job_id(job);
      eval.set_rank(options_.rank);
      eval.set_step(step + 1);
      eval.set_epoch(step / per_epoch + 1);
      eval.set_test_accuracy(outcome.test_accuracy);
      eval.set_test_loss(outcome.test_loss);
      eval.set_test_examples(e.count);
      if (absl::Status s = reporter_->ReportEval(eval); !s.ok()) return s;
      log_.Info("eval", {{"step", step},
                         {"epoch", step / per_epoch + 1},
                         {"test_examples", e.count},
                         {"test_accuracy", outcome.test_accuracy},
                         {"test_loss", outcome.test_loss}});
    }
  }
  // A regrouped generation with no step left (its job lost a rank during
  // the final state check, or after it): the ranks check that they hold one
  // state and rank 0 writes the final checkpoint, which the generation that
  // lost the rank may not have written (written again, the same state, if it
  // had).
  // (Not for a copy of a finished rank's final state after a coordinator
  // restart: the finished ranks take no part, as in AgreeOnShape, and that
  // state was checked when they finished.)
  if (options_.generation > 0 && first_step == total && total > 0 &&
      !options_.initial_state_is_final && !options_.spec.checkpoint_dir().empty()) {
    if (absl::Status s = FinalCheckpointOfRegroup(total, position, &checkpointer,
                                                  checkpoint_done(total - 1), r);
        !s.ok()) {
      return s;
    }
  }
  // Every reply in before the job counts as done: a mismatch or a stop in
  // the last `report_lag` steps still fails or stops it.
  if (absl::Status s = reporter.Flush(); !s.ok()) return s;
  checkpointer.Wait();  // the final checkpoint is on disk before the job is done
  outcome.steps = total;
  // (A job resumed from its final checkpoint runs no step: hash the replica.)
  outcome.weights_hash = first_step < total ? reporter.last_hash().ToHex() : r.Hash().ToHex();
  if (options_.rank == 0) {
    if (absl::Status s = reporter_->UploadWeights(job, r); !s.ok()) return s;
  }
  return outcome;
}

}  // namespace lockstep
