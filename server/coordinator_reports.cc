// Coordinator facade: what ranks report about their job — ReportStep (the
// sync check and progress), ReportEval, ReportDone and the final-weights
// upload. Contracts: coordinator.h ("Jobs"); the parts: sync_checker.h,
// rank_timing.h, weights_store.h.
#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/coordinator.h"
#include "server/membership.h"

namespace lockstep {
namespace {

bool IsHex32(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The answer to a report of a job that is no longer RUNNING.
v1::ReportStepReply StopReply(const JobRecord& job) {
  v1::ReportStepReply reply;
  reply.set_stop(true);
  reply.set_reason(absl::StrCat("job ", job.id, " is ", v1::JobState_Name(job.state),
                                job.reason.empty() ? "" : ": ", job.reason));
  return reply;
}

// How a report's generation relates to its job's (membership.h): the
// current one; a closed one whose late reports the job takes (only
// restarts since, so every rank is the same worker: SyncChecker::OpenLate);
// or stale, dropped (the job regrouped since; its sender's rank may be
// another now).
enum class Generation { kCurrent, kLate, kStale };

Generation GenerationOf(const JobRecord* job, int64_t generation) {
  if (job == nullptr || generation >= job->membership.generation) return Generation::kCurrent;
  if (generation == job->sync.late_generation() && OnlyRestartsSince(*job, generation)) {
    return Generation::kLate;
  }
  return Generation::kStale;
}

// What the sync checker keeps of a report (hashes in lower case).
StepReport StepReportOf(const v1::ReportStepRequest& request) {
  StepReport report;
  report.hash = absl::AsciiStrToLower(request.weights_hash());
  report.loss = request.loss();
  report.examples = request.examples();
  report.epoch = request.epoch();
  if (!request.optimizer_hash().empty()) {
    report.optimizer_hash = absl::AsciiStrToLower(request.optimizer_hash());
  }
  report.blocks.assign(request.block_hashes().begin(), request.block_hashes().end());
  if (request.repaired()) report.repaired_from = request.repaired_from();
  if (request.rolled_back()) {
    report.rolled_back_to = request.rolled_back_to();
    report.rolled_back_at = request.rolled_back_at();
  }
  return report;
}

}  // namespace

absl::StatusOr<v1::ReportStepReply> Coordinator::ReportStep(
    const v1::ReportStepRequest& request) {
  Locked lock(this);  // writes this call's log lines after unlocking
  return ReportStepLocked(request);
}

absl::StatusOr<v1::ReportStepReply> Coordinator::ReportSteps(const v1::StepReports& request) {
  if (request.reports_size() == 0 || request.reports_size() > kMaxStepReports) {
    return absl::InvalidArgumentError(absl::StrCat("reports: expected 1 to ", kMaxStepReports,
                                                   " step reports, got ",
                                                   request.reports_size()));
  }
  Locked lock(this);  // one lock for the batch; log lines after unlocking
  if (request.probe()) {
    if (request.reports_size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reports: a probe names its rank in exactly 1 report, got ", request.reports_size()));
    }
    return ProbeLocked(request.reports(0));
  }
  absl::StatusOr<v1::ReportStepReply> reply;
  for (const v1::ReportStepRequest& report : request.reports()) {
    reply = ReportStepLocked(report);
    if (!reply.ok()) {
      return absl::Status(reply.status().code(),
                          absl::StrCat("report of step ", report.step(), ": ",
                                       reply.status().message()));
    }
    if (reply->stop()) break;
  }
  return reply;
}

absl::StatusOr<v1::ReportStepReply> Coordinator::ProbeLocked(const v1::ReportStepRequest& request) {
  v1::ReportStepReply reply;
  // A stale generation's rank may be another now: the worker resends all
  // it kept, and the coordinator drops those reports as stale. A closed
  // generation whose late reports the job takes resumes at the rank's last
  // late step.
  const Generation g = GenerationOf(jobs_.Find(request.job_id()), request.generation());
  if (g == Generation::kStale) return reply;
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), request.rank());
  if (!found.ok()) return found.status();
  const Job* job = *found;
  if (job->state != v1::RUNNING) return g == Generation::kLate ? reply : StopReply(*job);
  reply.set_probe_answered(true);
  reply.set_resend_from_step(
      (g == Generation::kLate ? job->sync.late_last_step(request.rank())
                              : job->ranks[request.rank()].last_step) +
      1);
  return reply;
}

absl::StatusOr<v1::ReportStepReply> Coordinator::ReportStepLocked(
    const v1::ReportStepRequest& request) {
  // A report of an older generation (membership.h: the job regrouped since;
  // its sender's rank may have changed) is stale: dropped; unless the job
  // takes that generation's late reports (GenerationOf).
  const Generation g = GenerationOf(jobs_.Find(request.job_id()), request.generation());
  if (g == Generation::kStale) return v1::ReportStepReply();
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), request.rank());
  if (!found.ok()) return found.status();
  Job* job = *found;
  v1::ReportStepReply reply;
  if (job->state != v1::RUNNING) return g == Generation::kLate ? reply : StopReply(*job);
  if (request.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: expected >= 0, got ", request.step()));
  }
  if (!IsHex32(request.weights_hash())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights_hash: expected 32 hex digits, got \"", request.weights_hash(), "\""));
  }
  if (g == Generation::kLate) return ReportLateLocked(job, request);
  if (job->sync.late_generation() >= 0 && StartDecided(job->membership)) {
    // This rank's resent reports of the closed generation came before it.
    job->sync.EndLate(request.rank(), job->membership.start_step - 1);
  }
  Rank& rank = job->ranks[request.rank()];
  rank.acknowledged = true;
  // A pending repair goes with every answer, a duplicate's too: the worker
  // reads a reply without one as "no repair pending" (step_reporter.cc).
  auto with_repair = [&]() {
    if (const auto& repair = job->sync.pending_repair(); repair.has_value()) {
      reply.set_repair_step(repair->step);
      reply.set_repair_source(repair->source);
      for (int32_t r : repair->ranks) reply.add_repair_ranks(r);
    }
    return reply;
  };
  if (request.step() <= rank.last_step) return with_repair();  // duplicate or stale
  rank.last_step = request.step();
  rank.holds_replica = true;  // it trained a step of this generation (membership.h)
  if (request.update_skipped() && request.rank() == 0) {
    // A non-finite gradient's step, skipped on every replica (every rank
    // reports the same flags; counted once, from rank 0).
    ++job->skipped_steps;
    job->last_skipped_step = request.step();
    job->last_nonfinite_ranks.assign(request.nonfinite_ranks().begin(),
                                     request.nonfinite_ranks().end());
  }
  StepReport report = StepReportOf(request);
  rank.last_hash = report.hash;
  StepTimes times;
  times.step = request.step_seconds();
  times.compute = request.compute_seconds();
  times.communication = request.communication_seconds();
  times.exposed = request.exposed_seconds();
  times.peer_wait = request.peer_wait_seconds();
  rank.timing.Add(times);
  if (request.resident_bytes() > 0) rank.resident_bytes = request.resident_bytes();
  if (job->spec.steps() == 0 && request.total_steps() > job->total_steps) {
    job->total_steps = request.total_steps();
  }
  if (request.block_names_size() > 0) {
    job->sync.SetBlockNames({request.block_names().begin(), request.block_names().end()});
  }
  std::optional<CompletedStep> complete =
      job->sync.Add(request.rank(), request.step(), std::move(report));
  // Judged (its note set) before the change is recorded: the state database
  // gets each check once, with its note.
  if (complete.has_value()) ApplyCompletedStepLocked(job, *complete);
  BumpLocked(job);
  // A step at or below every rank's last step can no longer complete (each
  // rank's steps arrive in increasing order): drop it.
  int64_t min_last = job->ranks[0].last_step;
  for (const Rank& r : job->ranks) min_last = std::min(min_last, r.last_step);
  job->sync.DropSettled(min_last);
  if (job->state != v1::RUNNING) return StopReply(*job);
  return with_repair();
}

absl::StatusOr<v1::ReportStepReply> Coordinator::ReportLateLocked(
    Job* job, const v1::ReportStepRequest& request) {
  v1::ReportStepReply reply;  // the closed generation's runner is gone: no repair, no stop
  // Once the new generation's start is decided, the closed one's steps are
  // below it (every rank held at most that step).
  const MembershipState& m = job->membership;
  if (StartDecided(m) && request.step() >= m.start_step) return reply;
  v1::SyncCheck check;
  std::optional<CompletedStep> c =
      job->sync.AddLate(request.rank(), request.step(), StepReportOf(request), &check);
  if (!c.has_value()) return reply;
  // Stored here, not by PersistJobLocked (which stores the history's newest
  // checks): counted as stored.
  if (state_db_ != nullptr) {
    state_db_->AddSyncCheck(job->id, check);
    ++persisted_[job->id].checked;
  }
  // A past step's mismatch: counted and logged; the ranks' state now is the
  // new generation's (its checks say whether they match).
  if (!c->differing.empty()) {
    LogMismatchLocked(*job, "hash mismatch (reported again after a coordinator restart)",
                      c->step, c->differing, c->majority);
  }
  BumpLocked(job);
  return reply;
}

void Coordinator::ApplyCompletedStepLocked(Job* job, const CompletedStep& c) {
  for (int r = 0; r < job->k; ++r) {
    job->ranks[r].in_sync =
        std::find(c.differing.begin(), c.differing.end(), r) == c.differing.end();
  }
  const int64_t step = c.step;
  if (step + 1 > job->steps_done) {
    job->steps_done = step + 1;
    job->epoch = c.epoch;
    job->loss = c.loss;
  }
  job->examples += c.examples;
  const absl::Time now = clock_->Now();
  if (job->first_step_time == absl::InfinitePast()) {
    job->first_step_time = now;
    job->first_step_examples = job->examples;
  }
  const double since_first = absl::ToDoubleSeconds(now - job->first_step_time);
  const double since_start = absl::ToDoubleSeconds(now - job->started);
  if (since_first > 0 && job->examples > job->first_step_examples) {
    job->examples_per_second =
        static_cast<double>(job->examples - job->first_step_examples) / since_first;
  } else {
    job->examples_per_second =
        since_start > 0 ? static_cast<double>(job->examples) / since_start : 0.0;
  }
  job->series.AddCheck(step, c.differing.empty());
  job->series.AddStep(
      LossPoint{step, c.loss, job->examples_per_second, since_start, job->examples});

  // Divergence: detect, locate, repair (sync_checker.h, Judge). The
  // policy was validated at submit.
  const DivergencePolicy policy =
      ParseDivergencePolicy(job->spec.on_divergence()).value_or(DivergencePolicy::kRepair);
  const int64_t total = job->spec.steps() > 0 ? job->spec.steps() : job->total_steps;
  // No majority: the ranks resolve it from the last checkpoint when the job
  // writes them at intervals (worker/job_runner.h).
  job->sync.set_checkpoint_rollback(
      job->k > 1 && !job->spec.checkpoint_dir().empty() &&
      (job->spec.checkpoint_every_steps() > 0 || job->spec.checkpoint_every_seconds() > 0));
  const DivergenceVerdict verdict = job->sync.Judge(c, policy, total);
  if (!c.differing.empty()) {
    job->out_of_sync = true;
    if (verdict.action != DivergenceVerdict::kAwaitingRepair) {
      LogMismatchLocked(*job, "hash mismatch", step, c.differing, c.majority);
    }
  }
  switch (verdict.action) {
    case DivergenceVerdict::kFail:
      FailJobLocked(job, verdict.reason);
      return;
    case DivergenceVerdict::kRepaired:
      job->out_of_sync = false;
      break;
    default:
      break;
  }
  BumpLocked(job);
}

absl::Status Coordinator::ReportEval(const v1::ReportEvalRequest& request) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), request.rank());
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->state != v1::RUNNING) return absl::OkStatus();
  job->test_accuracy = request.test_accuracy();
  job->test_loss = request.test_loss();
  job->series.AddEval(EvalPoint{request.step(), request.test_accuracy(), request.test_loss()});
  BumpLocked(job);
  return absl::OkStatus();
}

absl::Status Coordinator::ReportDone(const v1::ReportDoneRequest& request) {
  Locked lock(this);  // writes this call's log lines after unlocking
  // A worker asked to resend a done report it has no record of knows
  // neither its rank nor the generation: it sends rank -1 and ok = false,
  // for the rank its worker id holds now (never stale).
  const bool no_record = !request.ok() && request.rank() < 0;
  int rank_index = request.rank();
  if (const Job* j = jobs_.Find(request.job_id()); j != nullptr) {
    if (!no_record && request.generation() < j->membership.generation &&
        !(request.ok() && OnlyRestartsSince(*j, request.generation()))) {
      return absl::OkStatus();  // stale: an older generation's runner
    }
    for (size_t r = 0; no_record && rank_index < 0 && r < j->ranks.size(); ++r) {
      if (j->ranks[r].worker_id == request.worker_id()) rank_index = static_cast<int>(r);
    }
  }
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), rank_index);
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->state != v1::RUNNING) return absl::OkStatus();
  Rank& rank = job->ranks[rank_index];
  rank.acknowledged = true;
  if (!request.ok()) {
    FailJobLocked(job, absl::StrCat("rank ", rank_index, " (", request.worker_id(), "): ",
                                    request.error().empty() ? "failed without an error message"
                                                            : request.error()));
    return absl::OkStatus();
  }
  rank.done = true;
  rank.done_generation = request.generation();
  rank.done_hash = absl::AsciiStrToLower(request.weights_hash());
  rank.done_test_accuracy = request.test_accuracy();
  rank.done_test_loss = request.test_loss();
  if (job->spec.steps() == 0 && request.steps() > job->total_steps) {
    job->total_steps = request.steps();
  }
  bool all_done = true;
  std::vector<std::string> hashes;
  for (const Rank& r : job->ranks) {
    all_done = all_done && r.done;
    hashes.push_back(r.done_hash);
  }
  if (!all_done) {
    // A done report sent again while a restart regroup waits: this rank
    // holds the final state the others may copy (membership.h).
    if (job->membership.regrouping && RecordFinishedRank(job, rank_index)) {
      JobRegroupedLocked(job);
      return absl::OkStatus();
    }
    BumpLocked(job);
    return absl::OkStatus();
  }
  const MajorityResult m = MajorityHash(hashes);
  if (!m.differing.empty()) {
    job->out_of_sync = true;
    LogMismatchLocked(*job, "final hash mismatch", job->steps_done, m.differing, m.majority);
    FailJobLocked(job, absl::StrCat("replicas finished with different weights: rank(s) ",
                                    absl::StrJoin(m.differing, ", "),
                                    " differ from the majority hash ", m.majority));
    return absl::OkStatus();
  }
  job->final_hash = m.majority;
  job->test_accuracy = job->ranks[0].done_test_accuracy;
  job->test_loss = job->ranks[0].done_test_loss;
  EndJobLocked(job, v1::SUCCEEDED, "");
  return absl::OkStatus();
}

absl::Status Coordinator::UploadWeightsChunk(const v1::WeightsChunk& chunk) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = jobs_.FindOrNotFound(chunk.job_id());
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->ranks.empty() || job->ranks[0].worker_id != chunk.worker_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", chunk.worker_id(), " is not rank 0 of job ", job->id,
                     "; only rank 0 uploads the final weights"));
  }
  if (job->state != v1::RUNNING && job->state != v1::SUCCEEDED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job->id, " is ", v1::JobState_Name(job->state), ": weights not accepted"));
  }
  absl::StatusOr<std::vector<uint64_t>> changed = weights_.AddChunk(chunk);
  if (!changed.ok()) return changed.status();
  for (uint64_t id : *changed) {
    if (Job* j = jobs_.Find(id); j != nullptr) {
      BumpLocked(j);
    } else if (state_db_ != nullptr && !weights_.Has(id)) {
      state_db_->DeleteWeights(id);  // an evicted job's weights left the store (queued, no I/O)
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::FinishWeightsUpload(const std::string& worker_id, uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
  if (!found.ok()) return found.status();
  return weights_.FinishUpload(worker_id, job_id);
}

}  // namespace lockstep
