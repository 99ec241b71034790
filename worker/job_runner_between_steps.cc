// JobRunner, the parts between steps: the dataset agreement before step 0
// (shape and contents), the test-only bit flip, a divergence repair and the
// state copy it uses, and the step report (contracts: job_runner.h; the
// step loop is in job_runner.cc, rollback to a checkpoint in
// job_rollback.cc).
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/optim/hash.h"
#include "common/train/job_checkpoint.h"
#include "common/train/replica_state.h"
#include "common/train/nonfinite.h"
#include "worker/float_bytes.h"
#include "worker/job_runner.h"
#include "worker/step_combine.h"

namespace lockstep {

namespace {

// The dataset agreement's numbers travel as bytes, one float per byte
// (worker/float_bytes.h: exact however large the counts are).
constexpr int kAgreeU64s = 5;  // dim, classes, examples, hash hi, hash lo
constexpr int kAgreeFloats = 8 * kAgreeU64s;

}  // namespace

WeightHash TrainingSetHash(const Dataset& data) {
  WeightHasher h;
  h.UpdateU64(static_cast<uint64_t>(data.num_examples));
  h.UpdateU64(static_cast<uint64_t>(data.dim));
  h.UpdateU64(static_cast<uint64_t>(data.num_classes));
  h.Update(data.x);
  h.Update(data.y);
  return h.Finish();
}

absl::Status JobRunner::AgreeOnShape(const Dataset& train) {
  const int k = options_.world;
  const WeightHash mine = TrainingSetHash(train);
  std::vector<float> slots(static_cast<size_t>(kAgreeFloats) * k, 0.0f);
  const uint64_t values[kAgreeU64s] = {
      static_cast<uint64_t>(train.dim), static_cast<uint64_t>(train.num_classes),
      static_cast<uint64_t>(train.num_examples), mine.hi, mine.lo};
  for (int i = 0; i < kAgreeU64s; ++i) {
    PutBytes(values[i], &slots[static_cast<size_t>(kAgreeFloats * options_.rank + 8 * i)]);
  }
  int64_t count = 1;
  if (absl::Status s = combiner_->Combine(ShapeAgreementJob(WireKey()), 0,
                                          absl::MakeSpan(slots), &count,
                                          options_.combine_timeout);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("before step 0 (dataset agreement of job ",
                                               options_.job_id, "): ", UserFacing(s).message()));
  }
  if (count != k) {
    return absl::InternalError(
        absl::StrCat("dataset agreement: expected ", k, " contributions, got ", count));
  }
  struct Seen {
    int64_t dim, classes, examples;
    WeightHash hash;
    bool operator==(const Seen& o) const {
      return dim == o.dim && classes == o.classes && examples == o.examples && hash == o.hash;
    }
    bool SameShape(const Seen& o) const {
      return dim == o.dim && classes == o.classes && examples == o.examples;
    }
  };
  std::vector<Seen> seen(static_cast<size_t>(k));
  for (int r = 0; r < k; ++r) {
    const float* p = &slots[static_cast<size_t>(kAgreeFloats * r)];
    seen[r] = Seen{static_cast<int64_t>(GetBytes(p)), static_cast<int64_t>(GetBytes(p + 8)),
                   static_cast<int64_t>(GetBytes(p + 16)),
                   WeightHash{GetBytes(p + 24), GetBytes(p + 32)}};
  }
  // Compare with the most common (shape, contents) (the lowest rank's on a
  // tie).
  int majority = 0, best = 0;
  for (int r = 0; r < k; ++r) {
    int votes = 0;
    for (int q = 0; q < k; ++q) votes += seen[q] == seen[r];
    if (votes > best) best = votes, majority = r;
  }
  const Seen& m = seen[majority];
  std::string differ;
  bool shape_differs = false;
  for (int r = 0; r < k; ++r) {
    if (seen[r] == m) continue;
    if (!seen[r].SameShape(m)) {
      shape_differs = true;
      absl::StrAppend(&differ, differ.empty() ? "" : "; ", PeerName(r), " has dim ",
                      seen[r].dim, ", ", seen[r].classes, " classes, ", seen[r].examples,
                      " examples");
    } else {
      absl::StrAppend(&differ, differ.empty() ? "" : "; ", PeerName(r),
                      " has a different training set: hash ", seen[r].hash.ToHex(), " vs ",
                      m.hash.ToHex());
    }
  }
  if (differ.empty()) return absl::OkStatus();
  if (best == 1 && k == 2) {
    absl::StrAppend(&differ, " (no majority: either may be the stale one)");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "dataset ", train.name, " differs across workers: ", differ, "; ", PeerName(majority),
      best > 1 ? " and the others have " : " has ", "dim ", m.dim, ", ", m.classes,
      " classes, ", m.examples, " examples", shape_differs ? "" : " (same shape)",
      ", training set hash ", m.hash.ToHex()));
}

absl::StatusOr<bool> JobRunner::AgreeOnFinalState(uint64_t identity) {
  const int k = options_.world;
  // The dataset agreement's layout (so a ps shard of the key keeps one
  // length): the identity in the first 8 floats of this rank's slot.
  std::vector<float> slots(static_cast<size_t>(kAgreeFloats) * k, 0.0f);
  PutBytes(identity, &slots[static_cast<size_t>(kAgreeFloats * options_.rank)]);
  int64_t count = 1;
  if (absl::Status s = combiner_->Combine(ShapeAgreementJob(WireKey()), kFinalStateRound,
                                          absl::MakeSpan(slots),
                                          &count, options_.combine_timeout);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("after the last step (final state check of job ",
                                               options_.job_id, "): ", UserFacing(s).message()));
  }
  if (count != k) {
    return absl::InternalError(
        absl::StrCat("final state check: expected ", k, " contributions, got ", count));
  }
  for (int r = 0; r < k; ++r) {
    const uint64_t other = GetBytes(&slots[static_cast<size_t>(kAgreeFloats * r)]);
    if (other != identity) {
      log_.Warn("final state check: a rank's state differs from this one's",
                {{"other_rank", r}});
      return false;
    }
  }
  return true;
}

absl::Status JobRunner::FinalCheckpointOfRegroup(int64_t total, const SamplerPosition& position,
                                                  JobCheckpointer* checkpointer,
                                                  JobCheckpointer::WriteDone done,
                                                  const Replica& r) {
  bool same = true;
  if (options_.world > 1) {
    const WeightHash whole =
        HashReplica(r.params(), r.optimizer().steps(), r.optimizer().slots());
    absl::StatusOr<bool> agreed = AgreeOnFinalState(whole.Fold());
    if (!agreed.ok()) {
      if (stop_.load()) {
        return StoppedInCombine(options_.job_id, " after the last step", agreed.status());
      }
      return agreed.status();
    }
    same = *agreed;
  }
  if (options_.rank != 0 || !checkpointer->enabled()) return absl::OkStatus();
  if (!same) {
    log_.Warn("final checkpoint not written: the replicas differed after the last step",
              {{"step", total - 1}});
    return absl::OkStatus();
  }
  checkpointer->Capture(r, total, total, position, r.Hash(), clock_->Now());
  checkpointer->CommitCaptured(std::move(done));
  return absl::OkStatus();
}

void JobRunner::FlipOneBit(Replica* r) {
  const int64_t i = options_.flip_index;
  if (options_.flip_optimizer) {
    OptimizerState state = r->optimizer().State();
    if (i < 0 || i >= static_cast<int64_t>(state.slots.size())) {
      log_.Warn("fault flip: no such optimizer slot", {{"index", i},
                                                       {"slots", static_cast<int64_t>(state.slots.size())}});
      return;
    }
    uint32_t bits;
    std::memcpy(&bits, &state.slots[i], 4);
    bits ^= 1u;
    std::memcpy(&state.slots[i], &bits, 4);
    (void)r->mutable_optimizer().SetState(state);
  } else {
    if (i < 0 || i >= r->num_params()) {
      log_.Warn("fault flip: no such parameter", {{"index", i}, {"params", r->num_params()}});
      return;
    }
    float& w = r->mutable_params()[i];
    uint32_t bits;
    std::memcpy(&bits, &w, 4);
    bits ^= 1u;
    std::memcpy(&w, &bits, 4);
  }
  log_.Warn("fault injected: flipped one bit", {{"target", options_.flip_optimizer ? "optimizer" : "weights"},
                                                {"index", i}});
}

absl::Status JobRunner::RepairAtBoundary(int64_t step, StepReporter* reporter, Replica* r) {
  const StepReporter::Repair repair = reporter->repair();
  if (repair.step != step) return absl::OkStatus();
  const bool target =
      std::find(repair.ranks.begin(), repair.ranks.end(), options_.rank) != repair.ranks.end();
  if (!target && repair.source != options_.rank) return absl::OkStatus();
  // (Submit hashed the weights of step - 1 on this thread.)
  if (absl::Status s = reporter->WaitHashed(); !s.ok()) return s;
  return CopyState(step, repair.source, target, r);
}

absl::Status JobRunner::CopyState(int64_t step, int source_rank, bool target, Replica* r) {
  const bool source = source_rank == options_.rank;
  if (!target && !source) return absl::OkStatus();
  StepReporter::Repair repair;
  repair.source = source_rank;
  if (source) {
    if (options_.state_board == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "divergence repair at step ", step, ": this worker cannot offer its state to ",
          "its peers (no state board)"));
    }
    options_.state_board->Publish(WireKey(), step, EncodeReplicaState(*r, step));
    log_.Info("divergence repair: state offered", {{"step", step}});
    return absl::OkStatus();
  }
  if (!options_.fetch_state) {
    return absl::FailedPreconditionError(absl::StrCat(
        "divergence repair at step ", step, ": this worker cannot fetch a peer's state"));
  }
  const absl::Time t0 = absl::Now();
  auto bytes = options_.fetch_state(repair.source, step, ExpectedStateBytes(*r),
                                    t0 + options_.combine_timeout);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("divergence repair at step ", step, " from ",
                                     PeerName(repair.source), ": ", bytes.status().message()));
  }
  auto next = RestoreReplicaState(*bytes, r);
  if (!next.ok() || *next != step) {
    return absl::DataLossError(absl::StrCat(
        "divergence repair at step ", step, " from ", PeerName(repair.source), ": ",
        next.ok() ? absl::StrCat("its state is for step ", *next) : next.status().message()));
  }
  repaired_from_ = repair.source;
  log_.Warn("divergence repair: copied a peer's state",
            {{"step", step},
             {"source_rank", repair.source},
             {"seconds", absl::ToDoubleSeconds(absl::Now() - t0)}});
  return absl::OkStatus();
}

void JobRunner::FillStepReport(int64_t step, int64_t epoch, int64_t total, double loss,
                               int64_t examples, float lr, const StepTiming& timing,
                               int64_t resident_bytes, v1::ReportStepRequest* report) const {
  report->set_worker_id(options_.worker_id);
  report->set_job_id(options_.job_id);
  report->set_rank(options_.rank);
  report->set_step(step);
  report->set_epoch(epoch);  // 1-based, like the trainer's lines
  report->set_total_steps(total);
  report->clear_weights_hash();  // Submit fills it in
  // The block names go with step 0's report only (clearing keeps the
  // strings: later steps do not allocate).
  report->mutable_block_names()->Clear();
  if (step == 0) {
    for (const ParamBlock& b : replica_->model().layout()) report->add_block_names(b.name);
  }
  report->set_loss(loss);
  report->set_examples(examples);
  report->set_step_seconds(timing.step_seconds());
  report->set_lr(lr);
  report->set_compute_seconds(timing.compute_seconds);
  report->set_communication_seconds(timing.communication_seconds);
  report->set_exposed_seconds(timing.exposed_seconds);
  report->set_peer_wait_seconds(timing.peer_wait_seconds);
  report->set_resident_bytes(resident_bytes);
  report->set_generation(options_.generation);
}

}  // namespace lockstep
