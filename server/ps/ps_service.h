// The parameter-server gRPC service (lockstep.v1.ParameterServer): a thin
// adapter from Push/Pull RPCs to PsShard objects (common/collective), one
// per (job, shard), created on first use from the K and shard length the
// request carries. The server sums and returns; workers apply the update.
//
// Memory: at most `max_jobs` jobs (job keys: a job's group key, and its
// shape-agreement key) are held; a request for a new key beyond that drops
// the shards of the key created longest ago (not the lowest key: keys of a
// restarted coordinator's jobs may sort below old ones, and shape-agreement
// keys sort last). Each PsShard itself keeps only its two latest steps.
//
// Threading: gRPC's sync server calls Push/Pull from many threads; the
// shard map is guarded by a mutex, shards are thread-safe. A Pull waits for
// the step's K pushes up to the client's wait_micros / RPC deadline, but
// returns CANCELLED within kCancelCheckEvery once the client cancels.
#ifndef LOCKSTEP_SERVER_PS_PS_SERVICE_H_
#define LOCKSTEP_SERVER_PS_PS_SERVICE_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/collective/ps_aggregator.h"
#include "proto/ps.grpc.pb.h"

namespace lockstep {

class PsService final : public v1::ParameterServer::Service {
 public:
  explicit PsService(int max_jobs = 8) : max_jobs_(max_jobs) {}

  grpc::Status Push(grpc::ServerContext* ctx, const v1::PushRequest* req,
                    v1::PushReply* reply) override;
  grpc::Status Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                    v1::PullReply* reply) override;

  // Jobs currently held (for tests and status).
  int num_jobs() const;

  // Pull handlers currently waiting for pushes (for tests and status).
  int waiting_pulls() const { return waiting_pulls_.load(std::memory_order_relaxed); }

  // Successful calls since start and their payload bytes (gradient floats x
  // 4 + the 8-byte count), for the metrics.
  struct Stats {
    int64_t pushes = 0, pulls = 0;
    int64_t pushed_bytes = 0;  // received in pushes
    int64_t pulled_bytes = 0;  // sent in pull replies
  };
  Stats stats() const;

  // A waiting Pull checks this often whether its client has cancelled, and
  // then returns CANCELLED, freeing its server thread.
  static constexpr absl::Duration kCancelCheckEvery = absl::Milliseconds(50);

 private:
  // The shard for (job, shard), created with (num_workers, shard_len); an
  // existing shard with other dimensions is a FAILED_PRECONDITION naming
  // both.
  absl::StatusOr<std::shared_ptr<PsShard>> GetShard(uint64_t job, int shard, int num_workers,
                                                    int64_t shard_len);

  const int max_jobs_;
  std::atomic<int> waiting_pulls_{0};
  std::atomic<int64_t> pushes_{0}, pulls_{0}, pushed_bytes_{0}, pulled_bytes_{0};
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::map<int, std::shared_ptr<PsShard>>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> created_ ABSL_GUARDED_BY(mu_);  // jobs_'s keys, oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_PS_SERVICE_H_
