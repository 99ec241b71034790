// WeightsStore: the jobs' final weights — uploads in progress (chunks from
// rank 0) and the published weights of at most max_jobs jobs.
//
// Uploads: rank 0 sends the final weights (float32 little-endian) in chunks
// in offset order; a chunk at offset 0 starts (or restarts) the job's
// upload and carries `total` (floats, >= 1) and the block names / shapes.
// When `total` floats have arrived the weights are published (immutable
// from then on; readers keep their shared_ptr after eviction). The
// published weights of at most max_jobs jobs are kept: publishing one more
// evicts the job that published longest ago (a job that publishes again
// moves to the back).
// Who may upload (rank 0 of the job, while it is RUNNING or SUCCEEDED) is
// checked by the Coordinator before AddChunk; this class checks the chunks.
//
// Not thread-safe: the Coordinator owns one and calls it under its mutex.
// Bounded: one upload per job at most (an unfinished one is dropped when its
// job ends, or by FinishUpload), max_jobs published.
#ifndef LOCKSTEP_SERVER_WEIGHTS_STORE_H_
#define LOCKSTEP_SERVER_WEIGHTS_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

// Final weights of a job, as uploaded by rank 0. Immutable once published.
struct FinalWeights {
  uint64_t job_id = 0;
  int64_t total = 0;       // floats
  std::string data;        // total * 4 bytes, float32 little-endian
  std::vector<std::string> block_names;
  std::vector<int64_t> block_shapes;  // flattened dims, -1 separates blocks
};

// Chunk of `w` starting at float `offset` with at most `max_floats` floats
// (>= 1). The chunk at offset 0 also carries block_names / block_shapes.
// Precondition: 0 <= offset < w.total (or offset == 0 for an empty w).
lockstep::v1::WeightsChunk MakeWeightsChunk(const FinalWeights& w, int64_t offset,
                                            int64_t max_floats);

class WeightsStore {
 public:
  // max_jobs < 0 counts as 0 (nothing is kept).
  explicit WeightsStore(int max_jobs);

  // One chunk of chunk.job_id's upload by chunk.worker_id. Returns the ids
  // of the jobs whose published weights changed, in order: empty while the
  // upload is incomplete; on the last chunk the job itself, then every job
  // evicted to make room (possibly the job itself when max_jobs is 0).
  // Errors (the upload is left as it was unless said):
  //   INVALID_ARGUMENT: data not a multiple of 4 bytes; total < 1 on the
  //     first chunk; total differs from the first chunk's; the chunk runs
  //     past total (the upload is dropped).
  //   FAILED_PRECONDITION: offset != 0 with no upload in progress, or an
  //     offset other than the floats received so far (chunks out of order).
  absl::StatusOr<std::vector<uint64_t>> AddChunk(const lockstep::v1::WeightsChunk& chunk);
  // End of `worker_id`'s upload stream for `job_id`: FAILED_PRECONDITION
  // (and the partial upload is dropped) when that upload is incomplete; OK
  // when there is none (it completed, or never started).
  absl::Status FinishUpload(const std::string& worker_id, uint64_t job_id);
  // Drops the job's upload in progress, if any.
  void AbortUpload(uint64_t job_id);
  // Removes the job's published weights; true when it had some.
  bool Drop(uint64_t job_id);

  // nullptr when the job has no published weights (none, or evicted).
  std::shared_ptr<const FinalWeights> Get(uint64_t job_id) const;
  bool Has(uint64_t job_id) const { return published_.count(job_id) != 0; }
  int max_jobs() const { return max_jobs_; }
  size_t uploads_in_progress() const { return uploads_.size(); }

 private:
  struct Upload {
    std::string worker_id;
    int64_t total = 0, received = 0;
    std::shared_ptr<FinalWeights> weights;
  };
  void Publish(uint64_t job_id, std::shared_ptr<const FinalWeights> w,
               std::vector<uint64_t>* changed);

  const int max_jobs_;
  std::map<uint64_t, Upload> uploads_;  // by job id
  std::map<uint64_t, std::shared_ptr<const FinalWeights>> published_;
  std::deque<uint64_t> order_;  // published job ids, oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_WEIGHTS_STORE_H_
