// Replica state transfer over gRPC (proto/state.proto): the server side
// serves what this worker published on its StateBoard; the client side
// fetches a peer's state with a deadline and checks its size against the
// job before allocating.
//
// Usage (a rank that must copy rank s's state at step boundary b):
//   source rank s:  board.Publish(group, b, EncodeReplicaState(replica, b));
//   receiver:       auto bytes = FetchReplicaState(peer_address_of_s,
//                       {group, b, ExpectedStateBytes(replica), deadline, "rank 1"});
//                   auto next = RestoreReplicaState(*bytes, &replica);  // == b
// The receiver may ask before the source has published: NOT_FOUND replies
// are retried every 10 ms until the deadline.
//
// Threading: the service is gRPC-callback based and never blocks; the client
// call blocks the calling thread until the state arrived or the deadline.
#ifndef LOCKSTEP_WORKER_NET_STATE_SERVICE_H_
#define LOCKSTEP_WORKER_NET_STATE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/train/checkpoint_dirs.h"
#include "common/train/state_board.h"
#include "proto/state.grpc.pb.h"

namespace lockstep {

// Bytes per StateChunk (well under gRPC's 4 MiB message limit).
inline constexpr int64_t kStateChunkBytes = 1 << 20;

class StateServiceImpl final : public v1::ReplicaState::CallbackService {
 public:
  // `board` is not owned and must outlive the service. `logger`: where
  // transfers are logged (component "state"; nullptr = stderr).
  // `checkpoints` (not owned, may be null: none served): the checkpoint
  // directories this worker wrote to, the only ones FetchCheckpoint reads.
  explicit StateServiceImpl(const StateBoard* board, const Logger* logger = nullptr,
                            const CheckpointDirs* checkpoints = nullptr);

  grpc::ServerWriteReactor<v1::StateChunk>* FetchState(
      grpc::CallbackServerContext* context, const v1::FetchStateRequest* request) override;
  // Reads and validates the checkpoint (LoadCheckpoint) on a thread of its
  // own, then streams the file's bytes. NOT_FOUND naming the directory when
  // it is not one this worker wrote to or holds no valid checkpoint;
  // RESOURCE_EXHAUSTED when kMaxCheckpointFetches transfers are in progress
  // (each holds the file in memory, and its decoded state while checking
  // it: about twice the file at most).
  static constexpr int kMaxCheckpointFetches = 2;
  grpc::ServerWriteReactor<v1::StateChunk>* FetchCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::FetchCheckpointRequest* request) override;

  // Requests answered NOT_FOUND so far (for tests).
  int64_t misses() const { return misses_.load(); }
  // FetchCheckpoint calls refused RESOURCE_EXHAUSTED so far (for tests).
  int64_t busy_refusals() const { return busy_refusals_.load(); }
  // FetchCheckpoint transfers in progress (for tests; a transfer ends when
  // gRPC is done with its call, which may be after its client returned).
  int active_transfers() const { return active_fetches_.load(); }
  // Tests only: runs on each checkpoint transfer's loader thread before it
  // reads the file (a test holds transfers in progress with it). Any thread.
  void SetLoadHookForTest(std::function<void()> hook) {
    absl::MutexLock l(&hook_mu_);
    load_hook_ = std::move(hook);
  }

 private:
  const StateBoard* const board_;
  const CheckpointDirs* const checkpoints_;
  std::atomic<int> active_fetches_{0};  // FetchCheckpoint calls in progress
  std::atomic<int64_t> misses_{0};
  std::atomic<int64_t> busy_refusals_{0};
  absl::Mutex hook_mu_;
  std::function<void()> load_hook_ ABSL_GUARDED_BY(hook_mu_);
  const Logger log_;
};

struct FetchStateOptions {
  uint64_t group = 0;
  int64_t step = 0;
  // The only size accepted (ExpectedStateBytes of the receiving replica):
  // a peer announcing another size is refused before anything is allocated.
  int64_t expected_bytes = 0;
  absl::Time deadline = absl::InfinitePast();  // required
  std::string requester;  // for the peer's log
  // Channel credentials (common/grpcutil/tls.h); nullptr = plain text.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// Fetches the state `options` names from the peer at `address`. Errors name
// the peer: DEADLINE_EXCEEDED (not published in time, or the transfer
// stalled), FAILED_PRECONDITION (size differs from expected_bytes), DATA_LOSS
// (chunks out of order or short), or the RPC's error (UNAVAILABLE when the
// peer died).
absl::StatusOr<std::string> FetchReplicaState(const std::string& address,
                                              const FetchStateOptions& options);

struct FetchCheckpointOptions {
  std::string checkpoint_dir;  // the root both sides name (JobSpec.resume_from)
  uint64_t job_id = 0;
  int64_t step = 0;            // 0 = the newest valid one
  // The largest file accepted: a peer announcing more is refused before
  // anything is allocated (the caller: its replica state's size plus room
  // for the header and the spec).
  int64_t max_bytes = 0;
  absl::Time deadline = absl::InfinitePast();  // required
  std::string requester;
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr = plain text
};

struct FetchedCheckpoint {
  int64_t step = 0;   // its next step (file name)
  std::string bytes;  // the file (checked again by whoever loads it)
};

// Fetches a checkpoint file from the worker at `address` (one call, no
// retry). Errors name the peer: the RPC's (NOT_FOUND when it wrote none
// there), FAILED_PRECONDITION (larger than max_bytes), DATA_LOSS (chunks
// out of order or short), DEADLINE_EXCEEDED.
absl::StatusOr<FetchedCheckpoint> FetchCheckpointFile(const std::string& address,
                                                      const FetchCheckpointOptions& options);

// FetchCheckpointFile, asked again every `retry_every` while the peer
// answers RESOURCE_EXHAUSTED (it serves kMaxCheckpointFetches transfers at
// once) and another try fits before options.deadline; then its last answer.
absl::StatusOr<FetchedCheckpoint> FetchCheckpointFileInTurn(
    const std::string& address, const FetchCheckpointOptions& options,
    absl::Duration retry_every = absl::Milliseconds(200));

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_STATE_SERVICE_H_
