#include "common/train/job_checkpoint.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status CheckResumeCompatible(const v1::JobSpec& job, const v1::JobSpec& saved,
                                   absl::string_view origin) {
  auto differ = [&](const char* field, const std::string& was, const std::string& now) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin, ": spec.", field, ": the checkpoint's run used ", was,
                     ", this job ", now, " (a resumed job must train the same run)"));
  };
  if (job.model() != saved.model()) {
    return differ("model", absl::StrCat("\"", saved.model(), "\""),
                  absl::StrCat("\"", job.model(), "\""));
  }
  if (job.data().SerializeAsString() != saved.data().SerializeAsString()) {
    return differ("data", absl::StrCat("{", saved.data().ShortDebugString(), "}"),
                  absl::StrCat("{", job.data().ShortDebugString(), "}"));
  }
  if (job.global_batch() != saved.global_batch()) {
    return differ("global_batch", absl::StrCat(saved.global_batch()),
                  absl::StrCat(job.global_batch()));
  }
  if (job.seed() != saved.seed()) {
    return differ("seed", absl::StrCat(saved.seed()), absl::StrCat(job.seed()));
  }
  if (job.steps() != saved.steps()) {
    return differ("steps", absl::StrCat(saved.steps()), absl::StrCat(job.steps()));
  }
  if (job.steps() == 0 && job.epochs() != saved.epochs()) {
    return differ("epochs", absl::StrCat(saved.epochs()), absl::StrCat(job.epochs()));
  }
  if (job.optimizer().SerializeAsString() != saved.optimizer().SerializeAsString()) {
    return differ("optimizer", absl::StrCat("{", saved.optimizer().ShortDebugString(), "}"),
                  absl::StrCat("{", job.optimizer().ShortDebugString(), "}"));
  }
  if (job.lr().SerializeAsString() != saved.lr().SerializeAsString()) {
    return differ("lr", absl::StrCat("{", saved.lr().ShortDebugString(), "}"),
                  absl::StrCat("{", job.lr().ShortDebugString(), "}"));
  }
  return absl::OkStatus();
}

JobCheckpointer::JobCheckpointer(const v1::JobSpec& spec, uint64_t job_id)
    : enabled_(!spec.checkpoint_dir().empty()),
      dir_(enabled_ ? JobCheckpointDir(spec.checkpoint_dir(), job_id) : std::string()),
      spec_(spec),
      job_id_(job_id),
      every_steps_(spec.checkpoint_every_steps()),
      every_(spec.checkpoint_every_seconds() > 0 ? absl::Seconds(spec.checkpoint_every_seconds())
                                                 : absl::InfiniteDuration()),
      keep_(spec.checkpoint_keep() > 0 ? spec.checkpoint_keep() : kDefaultCheckpointKeep) {}

absl::Status JobCheckpointer::Start(absl::Time now) {
  last_ = now;
  if (!enabled_) return absl::OkStatus();
  if (absl::Status s = MakeDirs(dir_); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("spec.checkpoint_dir: ", s.message()));
  }
  return absl::OkStatus();
}

bool JobCheckpointer::Due(int64_t next_step, int64_t total_steps, absl::Time now) const {
  if (!enabled_) return false;
  if (next_step == total_steps) return true;
  if (every_steps_ > 0 && next_step % every_steps_ == 0) return true;
  return every_ != absl::InfiniteDuration() && now - last_ >= every_;
}

TrainingState JobCheckpointer::CaptureState(const Replica& replica, int64_t next_step,
                                       int64_t total_steps, const SamplerPosition& sampler,
                                       const WeightHash& hash) const {
  TrainingState state;
  state.job_id = job_id_;
  state.seed = spec_.seed();
  state.next_step = next_step;
  state.total_steps = total_steps;
  state.sampler = sampler;
  state.weights_hash = hash;
  state.job_spec = spec_.SerializeAsString();
  state.params.assign(replica.params().begin(), replica.params().end());
  state.optimizer = replica.optimizer().State();
  return state;
}

absl::StatusOr<std::string> JobCheckpointer::Write(const Replica& replica, int64_t next_step,
                                                   int64_t total_steps,
                                                   const SamplerPosition& sampler,
                                                   const WeightHash& hash, absl::Time now) {
  Wait();
  last_ = now;
  return WriteCheckpoint(dir_, CaptureState(replica, next_step, total_steps, sampler, hash),
                         keep_);
}

void JobCheckpointer::WriteInBackground(const Replica& replica, int64_t next_step,
                                        int64_t total_steps, const SamplerPosition& sampler,
                                        const WeightHash& hash, absl::Time now,
                                        WriteDone done) {
  Capture(replica, next_step, total_steps, sampler, hash, now);
  CommitCaptured(std::move(done));
}

void JobCheckpointer::Capture(const Replica& replica, int64_t next_step, int64_t total_steps,
                              const SamplerPosition& sampler, const WeightHash& hash,
                              absl::Time now) {
  last_ = now;
  const auto t0 = std::chrono::steady_clock::now();
  captured_state_ = CaptureState(replica, next_step, total_steps, sampler, hash);
  captured_ = true;
  capture_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void JobCheckpointer::CommitCaptured(WriteDone done) {
  if (!captured_) return;
  Wait();
  captured_ = false;
  writer_ = std::thread([this, state = std::move(captured_state_), done = std::move(done),
                         capture = capture_seconds_]() {
    const auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> path = WriteCheckpoint(dir_, state, keep_);
    done(path, capture,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  });
}

void JobCheckpointer::Wait() {
  if (writer_.joinable()) writer_.join();
}

JobCheckpointer::~JobCheckpointer() { Wait(); }

uint64_t MaxResumeFileBytes(const Replica& replica) {
  CheckpointLimits limits;
  limits.num_params = replica.num_params();
  limits.num_slots = replica.optimizer().num_slots();
  return MaxCheckpointFileBytes(limits);
}

absl::StatusOr<std::string> StoreFetchedCheckpoint(const v1::JobSpec& spec, int64_t step,
                                                   absl::string_view bytes) {
  const v1::CheckpointRef& ref = spec.resume_from();
  if (ref.checkpoint_dir().empty() || step <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("fetched checkpoint: no resume_from directory "
                                                   "or step ", step));
  }
  const std::string dir = JobCheckpointDir(ref.checkpoint_dir(), ref.job_id());
  if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  const std::string path = absl::StrCat(dir, "/", CheckpointFileName(step));
  if (absl::Status s = WriteFileAtomically(path, bytes); !s.ok()) return s;
  return path;
}

absl::StatusOr<ResumePoint> ResumeReplica(const v1::JobSpec& spec,
                                          const SamplerPosition& sampler, int64_t total_steps,
                                          Replica* replica) {
  const v1::CheckpointRef& ref = spec.resume_from();
  const std::string dir = JobCheckpointDir(ref.checkpoint_dir(), ref.job_id());
  CheckpointLimits limits;
  limits.num_params = replica->num_params();
  limits.num_slots = replica->optimizer().num_slots();
  auto loaded = LoadCheckpoint(dir, ref.step(), limits);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("spec.resume_from: ", loaded.status().message()));
  }
  const TrainingState& s = loaded->state;
  const std::string& path = loaded->path;
  v1::JobSpec saved;
  if (!saved.ParseFromString(s.job_spec)) {
    return absl::DataLossError(
        absl::StrCat(path, ": job_spec: not a serialised lockstep.v1.JobSpec"));
  }
  if (absl::Status st = CheckResumeCompatible(spec, saved, path); !st.ok()) return st;
  if (s.seed != spec.seed()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": seed: the checkpoint's run used ", s.seed, ", this job ", spec.seed()));
  }
  if (s.sampler.num_examples != sampler.num_examples ||
      s.sampler.global_batch != sampler.global_batch ||
      s.sampler.drop_last != sampler.drop_last) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": sampler: the checkpoint's run sampled ", s.sampler.num_examples,
        " examples in batches of ", s.sampler.global_batch, ", this job ",
        sampler.num_examples, " in batches of ", sampler.global_batch,
        " (another training set?)"));
  }
  if (s.total_steps != total_steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": total_steps: the checkpoint's run takes ", s.total_steps, " steps, this job ",
        total_steps));
  }
  if (absl::Status st = replica->Restore(s.params, s.optimizer); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(path, ": ", st.message()));
  }
  ResumePoint point;
  point.path = path;
  point.next_step = s.next_step;
  point.weights_hash = s.weights_hash;
  point.skipped = std::move(loaded->skipped);
  return point;
}

}  // namespace lockstep
