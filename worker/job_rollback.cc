// Checkpoints restored by rank 0 and shared with the other ranks (only rank
// 0's host needs the checkpoint directory): JobRunner::RollBack, a
// divergence without a majority (K = 2, a tie) resolved from the job's last
// checkpoint before it, and JobRunner::ResumeFromRankZero, a job resumed
// from spec.resume_from. See job_runner.h.
//
// Both announce rank 0's (found, next step, weights hash) in a small combine
// under the shape-agreement key (ShapeAgreementJob), whose steps only ever
// increase: 0 the dataset agreement, 1 the resume, 1 + n the n-th rollback,
// kFinalStateRound the final state check (job_runner.h).
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/optim/hash.h"
#include "common/train/checkpoint.h"
#include "common/train/job_checkpoint.h"
#include "common/train/replica_state.h"
#include "worker/job_runner.h"

namespace lockstep {
namespace {

constexpr int64_t kResumeRound = 1;
constexpr int64_t kFirstRollbackRound = 2;

// As the dataset agreement (job_runner.cc): every number travels one byte
// per float, so the sums are exact whatever the wire format.
constexpr int kValues = 5;  // found, next step, hash hi, hash lo, reserved
constexpr int kFloatsPerRank = 8 * kValues;

void Put(uint64_t v, float* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<float>((v >> (8 * i)) & 0xff);
}
uint64_t Get(const float* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

// `spec` resuming from its own job's checkpoint of `step`.
v1::JobSpec AtCheckpoint(const v1::JobSpec& spec, uint64_t job_id, int64_t step) {
  v1::JobSpec s = spec;
  s.mutable_resume_from()->set_checkpoint_dir(spec.checkpoint_dir());
  s.mutable_resume_from()->set_job_id(job_id);
  s.mutable_resume_from()->set_step(step);
  return s;
}

}  // namespace

bool JobRunner::WaitForStop(absl::Time deadline) {
  auto stopped = [](std::atomic<bool>* stop) { return stop->load(); };
  const bool woke = stop_mu_.LockWhenWithDeadline(
      absl::Condition(+stopped, &stop_), deadline);
  stop_mu_.Unlock();
  return woke;
}

absl::Status JobRunner::AnnounceFromRankZero(int64_t round, Announcement* a,
                                             absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) timeout = options_.combine_timeout;
  uint64_t values[kValues] = {0, 0, 0, 0, 0};
  if (options_.rank == 0 && a->found) {
    values[0] = 1;
    values[1] = static_cast<uint64_t>(a->next_step);
    values[2] = a->hash.hi;
    values[3] = a->hash.lo;
  }
  // Only rank 0's slots are non-zero, so the sum is rank 0's values.
  std::vector<float> slots(static_cast<size_t>(kFloatsPerRank) * options_.world, 0.0f);
  if (options_.rank == 0) {
    for (int i = 0; i < kValues; ++i) Put(values[i], &slots[static_cast<size_t>(8 * i)]);
  }
  int64_t count = 1;
  if (absl::Status s = combiner_->Combine(ShapeAgreementJob(WireKey()), round,
                                          absl::MakeSpan(slots), &count, timeout);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < kValues; ++i) values[i] = Get(&slots[static_cast<size_t>(8 * i)]);
  a->found = values[0] == 1;
  a->next_step = static_cast<int64_t>(values[1]);
  a->hash = WeightHash{values[2], values[3]};
  return absl::OkStatus();
}

absl::Status JobRunner::FetchRankZeroState(const std::string& what, int64_t next_step,
                                            const WeightHash& hash, Replica* r) {
  // Rank 0's restored state, offered on its state board: no rank but rank 0
  // needs the checkpoint directory (hosts need not share one). (Callers
  // run only when fetch_state is set.)
  if (!options_.fetch_state) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot fetch a peer's state"));
  }
  const absl::Time t0 = absl::Now();
  auto bytes = options_.fetch_state(0, next_step, ExpectedStateBytes(*r),
                                    t0 + options_.combine_timeout);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat(what, ": fetching the checkpoint's state from ",
                                     PeerName(0), ": ", bytes.status().message()));
  }
  auto next = RestoreReplicaState(*bytes, r);
  if (!next.ok() || *next != next_step) {
    return absl::DataLossError(absl::StrCat(
        what, ": the state fetched from ", PeerName(0), " ",
        next.ok() ? absl::StrCat("is for step ", *next, ", rank 0 announced ", next_step)
                  : next.status().message()));
  }
  const WeightHash got = HashWeights(r->params());
  if (got != hash) {
    return absl::DataLossError(absl::StrCat(what, ": the state fetched from ", PeerName(0),
                                            " holds weights hash ", got.ToHex(),
                                            ", rank 0 loaded ", hash.ToHex()));
  }
  log_.Info("copied rank 0's restored checkpoint state",
            {{"next_step", next_step},
             {"seconds", absl::ToDoubleSeconds(absl::Now() - t0)}});
  return absl::OkStatus();
}

absl::StatusOr<JobRunner::Rollback> JobRunner::RollBack(int64_t step,
                                                        JobCheckpointer* checkpointer,
                                                        const SamplerPosition& position,
                                                        int64_t total, Replica* r) {
  const std::string what =
      absl::StrCat("replicas diverged after step ", step - 1,
                   " with no majority (found in the combine of step ", step, ")");
  if (rollbacks_ >= kMaxRollbacks) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, "; the job already rolled back to a checkpoint ", rollbacks_,
                     " times (at most ", kMaxRollbacks, ")"));
  }
  Announcement a;
  if (options_.rank == 0 && checkpointer->enabled()) {
    checkpointer->Wait();  // the write in flight, if any, is on disk
    auto files = ListCheckpoints(checkpointer->dir());
    if (files.ok()) {
      for (auto it = files->rbegin(); it != files->rend(); ++it) {
        if (it->first >= step) {
          // Written after the last verified boundary: may hold the drift.
          if (std::remove(it->second.c_str()) == 0) {
            log_.Info("checkpoint removed: written after the divergence",
                      {{"path", it->second}});
          }
          continue;
        }
        auto point =
            ResumeReplica(AtCheckpoint(options_.spec, options_.job_id, it->first), position,
                          total, r);
        if (!point.ok()) {
          log_.Warn("checkpoint skipped (corrupt or unreadable); trying an older one",
                    {{"problem", point.status().ToString()}});
          continue;
        }
        a = {true, point->next_step, point->weights_hash};
        // Offered before the agreement below, so a peer that fetches after
        // it finds this state, not an older one under the same key.
        // (RollBack runs only in the in-combine check: a board is set.)
        if (options_.state_board != nullptr) {
          options_.state_board->Publish(WireKey(), point->next_step,
                                        EncodeReplicaState(*r, point->next_step));
        }
        break;
      }
    }
  }
  // Rank 0 tells every rank which checkpoint.
  if (absl::Status s = AnnounceFromRankZero(kFirstRollbackRound + rollbacks_++, &a); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what, "; agreeing on a checkpoint: ",
                                               UserFacing(s).message()));
  }
  if (!a.found) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " and there is no checkpoint before step ", step,
        " to resolve it from (on_divergence=repair: write checkpoints more often with "
        "--checkpoint_every_steps)"));
  }
  Rollback back;
  back.next_step = a.next_step;
  back.hash = a.hash;
  if (options_.rank != 0) {
    if (absl::Status s = FetchRankZeroState(absl::StrCat(what, "; worker ", options_.worker_id),
                                            back.next_step, back.hash, r);
        !s.ok()) {
      return s;
    }
  }
  log_.Warn("divergence without a majority: rolled back to a checkpoint",
            {{"step", step}, {"next_step", back.next_step}, {"weights_hash", back.hash.ToHex()}});
  return back;
}

absl::StatusOr<ResumePoint> JobRunner::ResumeHere(const SamplerPosition& position,
                                                  int64_t total, Replica* r) {
  auto point = ResumeReplica(options_.spec, position, total, r);
  if (!point.ok() && point.status().code() == absl::StatusCode::kNotFound &&
      options_.fetch_checkpoint) {
    // Not in this host's directory: the writer (busy with another job, or
    // on another host) still has it.
    log_.Info("no checkpoint here; fetching it from the worker that wrote it",
              {{"checkpoint_dir", options_.spec.resume_from().checkpoint_dir()},
               {"from_job", options_.spec.resume_from().job_id()}});
    auto got = options_.fetch_checkpoint(MaxResumeFileBytes(*r),
                                         absl::Now() + options_.combine_timeout);
    const int64_t pinned = options_.spec.resume_from().step();
    absl::StatusOr<std::string> stored =
        !got.ok() ? absl::StatusOr<std::string>(got.status())
        : pinned > 0 && got->first != pinned
            ? absl::StatusOr<std::string>(absl::DataLossError(absl::StrCat(
                  "the writer sent the checkpoint of step ", got->first, ", not ", pinned)))
            : StoreFetchedCheckpoint(options_.spec, got->first, got->second);
    if (stored.ok()) {
      log_.Info("fetched checkpoint", {{"checkpoint", *stored},
                                       {"bytes", static_cast<int64_t>(got->second.size())}});
      point = ResumeReplica(options_.spec, position, total, r);
    } else {
      point = absl::Status(point.status().code(),
                           absl::StrCat(point.status().message(),
                                        "; fetching it from the worker that wrote it: ",
                                        stored.status().message()));
    }
  }
  if (!point.ok()) {
    return absl::Status(point.status().code(), absl::StrCat("worker ", options_.worker_id, ": ",
                                                            point.status().message()));
  }
  for (const std::string& why : point->skipped) {
    log_.Warn("checkpoint skipped (corrupt or unreadable); using an older one",
              {{"problem", why}});
  }
  log_.Info("resumed from checkpoint", {{"checkpoint", point->path},
                                        {"next_step", point->next_step},
                                        {"weights_hash", point->weights_hash.ToHex()}});
  return point;
}

absl::StatusOr<int64_t> JobRunner::ResumeFromRankZero(const SamplerPosition& position,
                                                      int64_t total, Replica* r) {
  const std::string what = absl::StrCat("worker ", options_.worker_id, ": resuming from ",
                                        options_.spec.resume_from().checkpoint_dir());
  Announcement a;
  absl::Status mine;
  if (options_.rank == 0) {
    auto point = ResumeHere(position, total, r);
    if (point.ok()) {
      a = {true, point->next_step, point->weights_hash};
      // Offered before the announcement, as in RollBack.
      options_.state_board->Publish(WireKey(), point->next_step,
                                    EncodeReplicaState(*r, point->next_step));
    } else {
      mine = point.status();
    }
  }
  // When rank 0 may first fetch the file from its writer (at most one
  // combine timeout, ResumeHere), the others wait that much longer.
  const absl::Duration wait =
      options_.combine_timeout * (options_.fetch_checkpoint ? 2 : 1);
  if (absl::Status s = AnnounceFromRankZero(kResumeRound, &a, wait); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what, ": agreeing on the checkpoint: ",
                                               UserFacing(s).message()));
  }
  if (!mine.ok()) return mine;
  if (!a.found) {
    // Rank 0's report names the file and the problem: the job should fail
    // with that one, not this. Wait (up to the combine timeout) for the
    // coordinator to stop the job on rank 0's report.
    if (WaitForStop(absl::Now() + options_.combine_timeout)) {
      return absl::CancelledError(absl::StrCat("job ", options_.job_id, " stopped"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", PeerName(0), ", which reads the checkpoint for every rank, "
                     "could not load it (its own error names the file)"));
  }
  if (options_.rank != 0) {
    if (absl::Status s = FetchRankZeroState(what, a.next_step, a.hash, r); !s.ok()) return s;
  }
  return a.next_step;
}

}  // namespace lockstep
