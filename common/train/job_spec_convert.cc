#include "common/train/job_spec_convert.h"

#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/collective/wire_format.h"
#include "common/model.h"
#include "common/train/nonfinite.h"

namespace lockstep {
namespace {

using lockstep::v1::JobSpec;

// Rewrites a TrainSpec validation message to the JobSpec field path:
// "lr_schedule.x: ..." -> "spec.lr.x: ...", "optimizer.x" -> "spec.optimizer.x",
// "global_batch: ..." -> "spec.global_batch: ...".
absl::Status ToSpecFieldError(const absl::Status& s) {
  if (s.ok()) return s;
  absl::string_view msg = s.message();
  std::string out;
  if (absl::ConsumePrefix(&msg, "lr_schedule.")) {
    out = absl::StrCat("spec.lr.", msg);
  } else {
    out = absl::StrCat("spec.", msg);
  }
  return absl::Status(s.code(), out);
}

constexpr char kDatasetForms[] =
    "expected \"fashion-mnist\", \"mnist-dir:<dir>\", "
    "\"idx:<images>,<labels>[;<test images>,<test labels>]\", "
    "\"csv:<train>[;<test>]\" or \"libsvm:<train>[;<test>]\"";

}  // namespace

int PsShards(const JobSpec& spec) { return spec.ps_shards() == 0 ? 1 : spec.ps_shards(); }

absl::StatusOr<TrainSpec> ToTrainSpec(const JobSpec& spec) {
  TrainSpec t;
  t.model = spec.model();
  t.global_batch = spec.global_batch();
  t.epochs = spec.epochs();
  t.steps = spec.steps();
  t.seed = spec.seed();

  const lockstep::v1::OptimizerSpec& o = spec.optimizer();
  t.optimizer.kind = o.kind().empty() ? "sgd" : o.kind();
  t.optimizer.momentum = o.momentum();
  t.optimizer.nesterov = o.nesterov();
  t.optimizer.weight_decay = o.weight_decay();
  t.optimizer.beta1 = o.beta1() == 0.0f ? 0.9f : o.beta1();
  t.optimizer.beta2 = o.beta2() == 0.0f ? 0.999f : o.beta2();
  t.optimizer.eps = o.eps() == 0.0f ? 1e-8f : o.eps();

  const lockstep::v1::LrScheduleSpec& l = spec.lr();
  t.lr.base_lr = l.base_lr();
  t.lr.linear_scaling = l.linear_scaling();
  t.lr.reference_batch = l.reference_batch() == 0 ? 256 : l.reference_batch();
  t.lr.warmup_steps = l.warmup_steps();
  t.lr.warmup_start_factor = l.warmup_start_factor();
  t.lr.decay = l.decay().empty() ? "constant" : l.decay();
  t.lr.step_size = l.step_size();
  t.lr.gamma = l.gamma() == 0.0f ? 0.1f : l.gamma();
  t.lr.min_lr = l.min_lr();
  const bool cosine = t.lr.decay == "cosine";
  t.lr.total_steps = cosine && t.steps > 0 ? t.steps : 0;

  // Epoch-based cosine: total_steps is filled in by the worker; validate
  // every other field with a placeholder that satisfies total > warmup.
  TrainSpec check = t;
  if (cosine && t.steps == 0) check.lr.total_steps = check.lr.warmup_steps + 1;
  if (absl::Status s = ValidateTrainSpec(check, spec.num_workers()); !s.ok()) {
    return ToSpecFieldError(s);
  }
  return t;
}

absl::Status CheckModelSyntax(absl::string_view model) {
  // Only the syntax matters here: a 1-feature input and a class count that
  // suits the model kind (logistic is binary).
  const int classes = model == "logistic" ? 2 : 10;
  absl::StatusOr<std::unique_ptr<Model>> m = CreateModel(model, 1, classes);
  if (m.ok()) return absl::OkStatus();
  // CreateModel's messages start with "model" ("model: unknown model ...",
  // "model \"mlp:x\": ..."); name the JobSpec field.
  absl::string_view msg = m.status().message();
  if (absl::StartsWith(msg, "model")) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", msg));
  }
  return absl::InvalidArgumentError(absl::StrCat("spec.model: ", msg));
}

absl::Status CheckDatasetSyntax(absl::string_view dataset) {
  if (dataset.empty() || dataset == "fashion-mnist") return absl::OkStatus();
  for (absl::string_view prefix : {"mnist-dir:", "idx:", "csv:", "libsvm:"}) {
    if (absl::StartsWith(dataset, prefix)) {
      if (dataset.size() == prefix.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec.data.dataset: \"", dataset, "\" has no path after \"", prefix,
            "\" (", kDatasetForms, ")"));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "spec.data.dataset: unknown dataset \"", dataset, "\" (", kDatasetForms, ")"));
}

absl::Status CheckWorkerLostPolicy(const JobSpec& spec) {
  const std::string& p = spec.on_worker_lost();
  if (spec.wait_timeout_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.wait_timeout_ms: expected >= 0 (0 = 10 minutes), got ", spec.wait_timeout_ms()));
  }
  if (spec.stall_timeout_ms() != 0 &&
      (spec.stall_timeout_ms() < kMinStallTimeoutMs || spec.stall_timeout_ms() > kMaxStallTimeoutMs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.stall_timeout_ms: expected 0 (the coordinator's --lost_after_ms) or ",
        kMinStallTimeoutMs, "..", kMaxStallTimeoutMs, ", got ", spec.stall_timeout_ms()));
  }
  if (p.empty() || p == "fail" || p == "shrink" || p == "wait") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("spec.on_worker_lost: expected fail, shrink or wait, got \"", p, "\""));
}

absl::Status CheckCheckpointFields(const JobSpec& spec) {
  if (spec.checkpoint_every_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.checkpoint_every_steps: expected >= 0, got ", spec.checkpoint_every_steps()));
  }
  if (spec.checkpoint_every_seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.checkpoint_every_seconds: expected >= 0, got ", spec.checkpoint_every_seconds()));
  }
  if (spec.checkpoint_keep() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.checkpoint_keep: expected >= 0, got ", spec.checkpoint_keep()));
  }
  const lockstep::v1::CheckpointRef& r = spec.resume_from();
  if (!r.checkpoint_dir().empty() || r.job_id() != 0 || r.step() != 0) {
    if (r.checkpoint_dir().empty()) {
      return absl::InvalidArgumentError(
          "spec.resume_from.checkpoint_dir: expected the directory the checkpoints were "
          "written under, got \"\"");
    }
    if (r.job_id() == 0) {
      return absl::InvalidArgumentError(
          "spec.resume_from.job_id: expected the id of the job that wrote the checkpoints, "
          "got 0");
    }
    if (r.step() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.resume_from.step: expected >= 0 (0 = newest valid), got ", r.step()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.sync_mode() != lockstep::v1::RING && spec.sync_mode() != lockstep::v1::PS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.sync_mode: expected RING or PS, got ",
        lockstep::v1::SyncMode_Name(spec.sync_mode()).empty()
            ? absl::StrCat(static_cast<int>(spec.sync_mode()))
            : lockstep::v1::SyncMode_Name(spec.sync_mode())));
  }
  if (!lockstep::v1::PeerTransport_IsValid(spec.peer_transport())) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.peer_transport: expected GRPC, TCP or SHM, got ",
                     static_cast<int>(spec.peer_transport())));
  }
  if (!lockstep::v1::PeerTransport_IsValid(spec.ps_transport()) ||
      spec.ps_transport() == lockstep::v1::SHM) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.ps_transport: expected GRPC or TCP, got ",
                     static_cast<int>(spec.ps_transport())));
  }
  if (spec.num_workers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.num_workers: expected >= 1, got ", spec.num_workers()));
  }
  if (spec.global_batch() < spec.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.global_batch: expected >= spec.num_workers (", spec.num_workers(),
        "), got ", spec.global_batch()));
  }
  const float lr = spec.lr().base_lr();
  if (!(std::isfinite(lr) && lr > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.lr.base_lr: expected finite and > 0, got ", lr));
  }
  if (absl::Status s = CheckModelSyntax(spec.model()); !s.ok()) return s;
  if (absl::Status s = CheckDatasetSyntax(spec.data().dataset()); !s.ok()) return s;
  const std::string& norm = spec.data().normalize();
  if (!norm.empty() && norm != "scale255" && norm != "none" && norm != "minmax" &&
      norm != "standardize") {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.data.normalize: expected \"scale255\", \"none\", \"minmax\" or "
        "\"standardize\", got \"",
        norm, "\""));
  }
  if (spec.data().num_classes() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.data.num_classes: expected >= -1 (0 = infer, -1 = regression), got ",
        spec.data().num_classes()));
  }
  if (spec.data().dim() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.data.dim: expected >= 0 (0 = max index seen), got ", spec.data().dim()));
  }
  if (spec.ps_shards() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.ps_shards: expected >= 0 (0 = 1 shard), got ", spec.ps_shards()));
  }
  if (spec.bucket_bytes() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.bucket_bytes: expected -1 (no overlap), 0 (default) or > 0, got ",
        spec.bucket_bytes()));
  }
  // Ring and ps jobs alike (ps shards decode 16-bit pushes and sum float32).
  if (auto wire = ParseWireFormat(spec.compression()); !wire.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.compression: ", wire.status().message()));
  }
  const std::string& algorithm = spec.ring_algorithm();
  if (!algorithm.empty() && algorithm != "auto" && algorithm != "ring" && algorithm != "direct") {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.ring_algorithm: expected auto, ring or direct, got \"", algorithm, "\""));
  }
  if (!algorithm.empty() && algorithm != "auto" && spec.sync_mode() == lockstep::v1::PS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.ring_algorithm: ", algorithm, " is for ring jobs only (ps mode has no all-reduce)"));
  }
  if (!spec.on_divergence().empty() && spec.on_divergence() != "repair" &&
      spec.on_divergence() != "halt") {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.on_divergence: expected repair or halt, got \"", spec.on_divergence(), "\""));
  }
  if (auto policy = ParseNonFinitePolicy(spec.on_nonfinite()); !policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.on_nonfinite: ", policy.status().message()));
  }
  if (absl::Status s = CheckWorkerLostPolicy(spec); !s.ok()) return s;
  if (absl::Status s = CheckCheckpointFields(spec); !s.ok()) return s;
  return ToTrainSpec(spec).status();
}

}  // namespace lockstep
