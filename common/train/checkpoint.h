// Checkpoints: a training run's whole state in one file, written
// atomically, read back with every size bounded and a checksum verified.
//
// What a checkpoint holds (TrainingState): the weights, the optimizer state
// (step counter and slots: momentum, or Adam's two moments), the next step
// to run, the sampler position (the sampler is a pure function of
// (examples, batch, seed, drop_last, step), so these plus the next step
// continue the exact same example order), the seed, the total step count,
// the weights' XXH3-128 hash and the job spec (a serialised
// lockstep.v1.JobSpec, opaque here).
//
// File format, version 1, every integer little-endian:
//   offset  size  field
//        0     8  magic "LKSTCKPT"
//        8     4  version (1)
//       12     4  flags (bit 0: sampler drop_last)
//       16     8  job_id
//       24     8  seed
//       32     8  next_step         (>= 1: steps applied so far)
//       40     8  total_steps       (>= next_step)
//       48     8  sampler num_examples
//       56     8  sampler global_batch
//       64    16  weights hash (hi, lo)
//       80     8  num_params P
//       88     8  optimizer steps
//       96     8  num_slots Q       (0, P or 2P)
//      104     8  spec_bytes S
//      112     S  job spec (serialised lockstep.v1.JobSpec)
//                 P float32 weights, then Q float32 optimizer slots
//      end-8   8  XXH3-64 (seed 0) of every byte before it
//
// Files: <root>/job-<job id>/step-<next step, 12 digits>.ckpt. A write goes
// to "<name>.<16 random hex digits>.tmp" in the same directory (its own: two
// writers sharing the directory never share one), is written and fsync'd,
// renamed over the final name and the directory is fsync'd, so a crash
// leaves either the old set of files or the new one, never a partial .ckpt
// (a leftover .tmp is ignored, and removed by a later write once an hour
// old). After a write
// the oldest files beyond `keep` are removed.
//
// Loading checks magic, version, every size against CheckpointLimits (the
// caller's model says how many weights and slots to expect) BEFORE
// allocating, the checksum, and the weights hash. LoadCheckpoint takes the
// newest file that passes and reports every newer file it skipped and why
// (the caller logs them as warnings).
//
// Errors are absl::Status naming the file and the field
// ("/ck/job-3/step-000000000020.ckpt: num_params: expected 203530, got 7").
//
// Thread-safety: free functions, safe to call concurrently on different
// directories.
#ifndef LOCKSTEP_COMMON_TRAIN_CHECKPOINT_H_
#define LOCKSTEP_COMMON_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/optim/hash.h"
#include "common/optim/optimizer.h"

namespace lockstep {

inline constexpr char kCheckpointMagic[8] = {'L', 'K', 'S', 'T', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr int kDefaultCheckpointKeep = 3;

// Where the sampler stands: GlobalBatchSampler(num_examples, global_batch,
// seed, drop_last) at step next_step (TrainingState::next_step).
struct SamplerPosition {
  int64_t num_examples = 0;
  int64_t global_batch = 0;
  bool drop_last = false;
};

struct TrainingState {
  uint64_t job_id = 0;
  uint64_t seed = 0;
  int64_t next_step = 0;
  int64_t total_steps = 0;
  SamplerPosition sampler;
  WeightHash weights_hash;  // HashWeights(params)
  std::string job_spec;     // serialised lockstep.v1.JobSpec
  std::vector<float> params;
  OptimizerState optimizer;
};

// What the loader may accept; sizes are checked before allocating.
struct CheckpointLimits {
  int64_t num_params = -1;  // exact count expected; -1 = any (up to max_floats)
  int64_t num_slots = -1;   // exact count expected; -1 = any (up to max_floats)
  int64_t max_floats = int64_t{1} << 30;  // per array when not exact
  int64_t max_spec_bytes = int64_t{1} << 20;
};

// The file's bytes (format above).
std::string EncodeCheckpoint(const TrainingState& state);
// The inverse; `origin` (a path) starts every error message. DataLoss for a
// wrong magic, a truncated file or a checksum / hash mismatch;
// FailedPrecondition for another version or a size that does not fit
// `limits`.
absl::StatusOr<TrainingState> DecodeCheckpoint(absl::string_view bytes,
                                               const CheckpointLimits& limits,
                                               absl::string_view origin);

// <root>/job-<job>.
std::string JobCheckpointDir(absl::string_view root, uint64_t job);
// step-<next_step, 12 digits>.ckpt
std::string CheckpointFileName(int64_t next_step);

// Writes `bytes` to `path` atomically: a temporary file of this call's own
// in the same directory ("<path>.<16 random hex digits>.tmp", so writers in
// other processes or hosts sharing the directory never share one), write,
// fsync, rename, fsync the directory. Writers racing on one path each
// succeed; the path then holds one of their files whole. Errors name the
// path and the call that failed.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);

// Temporary files a crashed writer left are removed by WriteCheckpoint once
// they are this old (a younger one may be another writer's, in progress).
inline constexpr int64_t kStaleTempFileSeconds = 3600;

// Creates `dir` and its missing parents (mode 0755).
absl::Status MakeDirs(const std::string& dir);

// The checkpoint files in `dir` (names as CheckpointFileName), ascending by
// step: (next_step, path). NotFound naming the directory when it is missing.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(
    const std::string& dir);

// Writes `state` to <dir>/CheckpointFileName(state.next_step) atomically,
// then removes the oldest checkpoint files beyond `keep` (>= 1) and any
// leftover .tmp files. Returns the path written.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const TrainingState& state,
                                            int keep);

struct LoadedCheckpoint {
  std::string path;
  TrainingState state;
  // One line per newer file that was skipped: "<path>: <what was wrong>".
  std::vector<std::string> skipped;
};

// The largest file `limits` admits (header, spec, both arrays, trailer).
uint64_t MaxCheckpointFileBytes(const CheckpointLimits& limits);
// `path`'s bytes, refusing a file larger than MaxCheckpointFileBytes
// before allocating (NotFound when missing); not decoded.
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path,
                                               const CheckpointLimits& limits);

// The checkpoint of step `step` in `dir` (step > 0), or the newest file
// that loads (step == 0), newer broken ones listed in `skipped`. Each file
// is bounded by `limits` before it is read. NotFound when the directory or
// the step's file is missing or the directory holds no checkpoint; when
// every file is broken, the newest file's error with the others appended.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& dir, int64_t step,
                                                const CheckpointLimits& limits);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_CHECKPOINT_H_
