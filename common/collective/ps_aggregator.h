// Parameter-server aggregation, as plain classes (no RPC). The parameter
// (and gradient) vector of n floats is split into S contiguous shards by
// ShardBounds(n, S, s) (chunking.h). Server s runs one PsShard; each of the K
// workers pushes its gradient SUM over shard s plus its example COUNT, and
// pulls back the reduced shard (sum of sums, total count) once all K pushed.
//
// Design decision: the server only SUMS and returns the reduced shard; it
// does not apply the optimizer. Every worker divides by the total count and
// applies the update itself, so the optimizer state lives on the workers and
// all replicas stay bit-identical (they all receive the same reduced bits).
//
// Determinism: shard s is summed in worker-rank order,
//   ((x_0 + x_1) + x_2) + ... + x_{K-1},
// whatever the arrival order (a push that arrives before its turn is kept
// until the lower ranks arrived; contiguous ranks are folded eagerly). The
// result therefore does not depend on timing.
//
// Memory: per job, only the two most recent steps are retained (a fast worker
// may push step s+1 while a slow one still pulls step s; lockstep training
// never needs more). Their buffers are recycled for later steps, so the
// steady state allocates nothing. Pushing or pulling an older step is an
// error. ForgetJob releases a finished job.
//
// The worker side talks to shard s through the abstract PsClient (an
// in-process implementation is below; gRPC: common/grpcutil/grpc_ps_client.h;
// raw TCP: common/psnet/ps_tcp_client.h), and PsAllReduce does one push/pull
// round over all shards.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_PS_AGGREGATOR_H_
#define LOCKSTEP_COMMON_COLLECTIVE_PS_AGGREGATOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/wire_format.h"

namespace lockstep {

// One server-side shard of length shard_len, aggregating K = num_workers
// pushes per (job, step). Thread-safe: any number of threads may push and pull
// concurrently. Pushes and pulls copy under the shard's lock (a shard is a
// slice of the model, so the critical sections are one shard-length pass).
class PsShard {
 public:
  // num_workers >= 1, shard_len >= 0 (aborts otherwise: programming error).
  // shard_index is only used in messages. `clock` stamps last_push (null:
  // absl::Now); PsShardRegistry passes its limits.clock, so that its idle
  // eviction reads one time source (a test's fake clock included).
  PsShard(int num_workers, int64_t shard_len, int shard_index = 0,
          std::function<absl::Time()> clock = nullptr);
  PsShard(const PsShard&) = delete;
  PsShard& operator=(const PsShard&) = delete;

  int num_workers() const { return num_workers_; }
  int64_t shard_len() const { return shard_len_; }

  // Records worker's gradient sum over this shard and its example count for
  // (job, step). Idempotent per (job, step, worker): a repeated push with the
  // same count returns OK and is not counted again (its data is ignored).
  // Errors (messages name the shard, job, step and worker):
  //   InvalidArgumentError   worker not in [0, K), wrong length, count < 0,
  //                          step < 0;
  //   FailedPreconditionError step older than the two retained ones, or a
  //                           duplicate push with a different count;
  //   OutOfRangeError        total count overflows int64.
  absl::Status Push(uint64_t job, int64_t step, int worker,
                    absl::Span<const float> shard_grad_sum, int64_t count);

  // Waits until all K workers pushed (job, step), then copies the reduced
  // shard into `out` (length shard_len) and the total count into *count.
  // Pulling before the first push of the step is fine (it waits).
  // Errors:
  //   InvalidArgumentError    bad worker, wrong out length, null count,
  //                           step < 0;
  //   DeadlineExceededError   not complete by `deadline`; names the workers
  //                           whose pushes are missing;
  //   FailedPreconditionError the step is (or became, while waiting) older
  //                           than the two retained steps, or the job was
  //                           forgotten.
  absl::Status Pull(uint64_t job, int64_t step, int worker,
                    absl::Span<float> out, int64_t* count, absl::Time deadline);

  // Pull without the copy: waits until (job, step) is complete (same errors
  // as Pull), so that a caller can allocate its reply only once there is
  // something to return.
  absl::Status WaitComplete(uint64_t job, int64_t step, int worker,
                            absl::Time deadline);

  // Drops all state of `job` (waiting pulls for it then time out, unless the
  // job is pushed again).
  void ForgetJob(uint64_t job);

  // When the last push arrived (InfinitePast if none): what the registry's
  // eviction reads for front ends that call GetShard once per connection.
  absl::Time last_push() const {
    const int64_t ns = last_push_ns_.load(std::memory_order_relaxed);
    return ns == 0 ? absl::InfinitePast() : absl::FromUnixNanos(ns);
  }

  // Steps of `job` currently held (ascending; at most two), for tests.
  std::vector<int64_t> RetainedSteps(uint64_t job) const;

 private:
  struct Slot {
    bool active = false;
    int64_t step = 0;
    std::vector<float> acc;                 // sum of workers [0, folded)
    std::vector<std::vector<float>> early;  // pushes waiting for their turn
    std::vector<uint8_t> pushed;            // per worker
    std::vector<int64_t> counts;            // per worker
    int folded = 0;
    int64_t total_count = 0;
  };
  struct Job {
    bool has_latest = false;
    int64_t latest = 0;  // newest step pushed
    Slot slots[2];       // step s lives in slots[s & 1]
  };

  absl::Status PullImpl(uint64_t job, int64_t step, int worker,
                        absl::Span<float>* out_or_null, int64_t* count,
                        absl::Time deadline);
  static bool IsGone(const Job& job, int64_t step) {
    return job.has_latest && step < job.latest - 1;
  }
  void FoldLocked(Slot& slot, int worker, absl::Span<const float> data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_workers_;
  const int64_t shard_len_;
  const int shard_index_;
  const std::function<absl::Time()> clock_;
  std::atomic<int64_t> last_push_ns_{0};
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when a step completes or is recycled
  std::map<uint64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

// Worker-side access to one shard. Implementations must be thread-safe (one
// client object may be shared by all K workers of a process).
class PsClient {
 public:
  virtual ~PsClient() = default;
  // PsShard::Push semantics; may block until `deadline` (RPC), then
  // DeadlineExceededError / UnavailableError naming the shard server.
  virtual absl::Status Push(uint64_t job, int64_t step, int worker,
                            absl::Span<const float> shard_grad_sum,
                            int64_t count, absl::Time deadline) = 0;
  // PsShard::Pull semantics.
  virtual absl::Status Pull(uint64_t job, int64_t step, int worker,
                            absl::Span<float> out, int64_t* count,
                            absl::Time deadline) = 0;

  // One push/pull round in two halves, so that a client can pipeline it:
  // PsAllReduce calls StartRound on every shard, then FinishRound on every
  // shard, with the same (job, step, worker, wire). StartRound hands the
  // push to the server (it may return before the server answered: its
  // errors may then come from FinishRound); FinishRound returns the reduced
  // shard (PsShard::Pull semantics). Every StartRound that returned OK is
  // followed by a FinishRound of the same (job, step, worker), or the round
  // is given up (the next StartRound of that worker drops it).
  //
  // `wire` (JobSpec.compression) is how the shard's values travel, both
  // ways: float32 is exact; a 16-bit format (wire_format.h) sends each
  // pushed value rounded once, the server sums the decoded values in
  // float32 in rank order, and sends the sum rounded once, so every worker
  // decodes the same bits:
  //   out = rt(((rt(x_0) + rt(x_1)) + ...) + rt(x_{K-1})),  rt = RoundTrip16.
  // The count is always exact. The defaults are Push and Pull, one RPC
  // each; for a 16-bit `wire` they round the values in process as above
  // (an in-process shard has no wire).
  virtual absl::Status StartRound(uint64_t job, int64_t step, int worker,
                                  absl::Span<const float> shard_grad_sum,
                                  int64_t count, absl::Time deadline, WireFormat wire);
  virtual absl::Status FinishRound(uint64_t job, int64_t step, int worker,
                                   absl::Span<float> out, int64_t* count,
                                   absl::Time deadline, WireFormat wire);

  // Makes calls in flight return CancelledError soon and every later call
  // at once (a worker whose job was ended must not wait out a pull's
  // deadline). Any thread. The default does nothing (in-process clients
  // never wait on a network).
  virtual void Cancel() {}
};

// A ps job group's shape-agreement key: its group key with bit 63 set (a
// coordinator's group keys keep bit 63 clear; worker/job_runner.h
// ShapeAgreementJob). Its small rounds (the dataset agreement before step
// 0, a resume's and a rollback's announcements, the final state check)
// use shards of their own.
inline constexpr uint64_t kPsShapeKeyBit = uint64_t{1} << 63;
inline uint64_t PsShapeAgreementKey(uint64_t group_key) { return group_key | kPsShapeKeyBit; }

// A job key's shape as its coordinator knows it: K workers, S shards. (A
// shard's length depends on the dataset's width, which only the workers
// read: the key's first request fixes it, within the registry's limits.)
struct PsKeyShape {
  int num_workers = 0;
  int num_shards = 0;
};

// Bounds of a PsShardRegistry (what one parameter server may hold).
struct PsRegistryLimits {
  // Group keys held at once. A shape-agreement key counts as one more
  // while its group key is not held; while it is, it rides on its group
  // (so a running job's final state check, whose shape key may have been
  // evicted idle meanwhile, is never refused for the count: at most
  // 2 x max_jobs keys in all, every byte still within max_bytes).
  int max_jobs = 64;
  // Longest shard (floats); also what fixes the ps message-size limit
  // (common/grpcutil/message_limits.h).
  int64_t max_shard_floats = int64_t{1} << 28;  // 1 GiB
  // Worst-case bytes all held shards may need together: per shard
  // 2 retained steps x K buffers x shard_len x 4 bytes (the running sum plus
  // up to K-1 pushes that arrived before their turn; all of it is held from
  // the shard's first two steps). 0: half the physical memory, or of the
  // process's cgroup memory limit when that is lower.
  int64_t max_bytes = 0;
  // A job key with a request this recent is never evicted: a new key beyond
  // max_jobs is then refused (RESOURCE_EXHAUSTED) instead.
  absl::Duration active_window = absl::Minutes(10);
  // Time source (tests); null: absl::Now.
  std::function<absl::Time()> clock;
  // What the server's coordinator says a job key is. When set, a job key the registry does not hold yet is created only once
  // this returns its shape: a key its coordinator started (a ps job's
  // current group, or that group's shape-agreement key). The request's
  // num_workers must then be the shape's K and its shard index below the
  // shape's S (InvalidArgument naming the field otherwise); an error from
  // key_shape refuses the request (prefixed with the job key and shard).
  // It may wait until `deadline` (the coordinator's word still in flight).
  // Called with no registry lock held; it may take its own locks (the
  // coordinator's). Null: the first request of a key fixes its K (a server
  // without a coordinator: tests, benches).
  std::function<absl::StatusOr<PsKeyShape>(uint64_t job, absl::Time deadline)>
      key_shape;
};

// Worst-case bytes a shard of `shard_len` floats aggregated over
// `num_workers` workers holds (2 x K x shard_len x 4); -1 on overflow.
int64_t PsShardWorstCaseBytes(int num_workers, int64_t shard_len);

// The shards a parameter server holds, one PsShard per (job key, shard
// index). With limits.key_shape (every daemon with a coordinator) a key
// exists only once its coordinator started it, with the coordinator's K and
// shard count; the first request of a key fixes each shard's length (and,
// without key_shape, K), within the limits; every later request must name
// the same: InvalidArgumentError naming the field (num_workers, shard_len), the
// value and the expected value. Sizes never come from a request beyond
// that: a request is checked against the held shard before anything is
// allocated, and a shard allocates its step buffers only when pushes
// arrive (a push carries the bytes it makes the server hold).
// Shared by the server's gRPC service and its raw-TCP data plane, so both
// see one state and one set of counters.
//
// Memory: at most limits.max_jobs job keys (not counting the shape-agreement
// keys of held group keys) and limits.max_bytes worst-case
// shard bytes are held. A new key beyond max_jobs evicts the key idle
// longest, but only if it has been idle for limits.active_window (a
// running job is never evicted mid-job; shape-agreement keys go idle after
// step 0 and are evicted first); otherwise it is refused with
// ResourceExhaustedError naming the limit. A shard longer than
// max_shard_floats, a K above kMaxWorkers, or a shard whose worst case
// exceeds what is left of max_bytes is refused before anything is
// allocated. Thread-safe.
class PsShardRegistry {
 public:
  static constexpr int kMaxWorkers = 1 << 16;
  static constexpr int kMaxShards = 1 << 12;
  // 256 Mi floats = 1 GiB per shard.
  static constexpr int64_t kDefaultMaxShardFloats = int64_t{1} << 28;

  explicit PsShardRegistry(int max_jobs = 64,
                           int64_t max_shard_floats = kDefaultMaxShardFloats);
  explicit PsShardRegistry(PsRegistryLimits limits);

  // `deadline` bounds limits.key_shape's wait for a key not held yet
  // (InfinitePast: ask once, do not wait).
  absl::StatusOr<std::shared_ptr<PsShard>> GetShard(
      uint64_t job, int shard, int num_workers, int64_t shard_len,
      absl::Time deadline = absl::InfinitePast());
  // Drops job key `job` at once (its shards' steps are released; the bytes
  // count no more against max_bytes), instead of waiting for idle eviction:
  // for a key nobody uses any more (an older generation's group, a job that
  // ended). With limits.key_shape the key is never created again (the
  // newest 4096 forgotten keys are remembered). A front end still holding one of its shards (a TCP connection)
  // keeps that object alive but no longer in the registry. False when the
  // key is not held.
  bool Forget(uint64_t job);
  int num_jobs() const;
  int64_t max_shard_floats() const { return limits_.max_shard_floats; }
  const PsRegistryLimits& limits() const { return limits_; }
  // Worst-case bytes of the shards held now.
  int64_t held_bytes() const;

  // Successful pushes and pulls through any front end, and their payload
  // bytes (gradient floats x 4 + the 8-byte count), for the metrics.
  struct Stats {
    int64_t pushes = 0, pulls = 0;
    int64_t pushed_bytes = 0;  // received in pushes
    int64_t pulled_bytes = 0;  // sent in pull replies
  };
  void CountPush(int64_t bytes);
  void CountPull(int64_t bytes);
  Stats stats() const;

 private:
  struct JobEntry {
    std::map<int, std::shared_ptr<PsShard>> shards;
    int num_workers = 0;
    int num_shards = 0;  // from limits.key_shape; 0 = not known
    absl::Time last_used;
    int64_t bytes = 0;  // worst case of its shards
  };
  absl::Time Now() const;
  struct Eviction {
    bool evicted = false;
    uint64_t idlest_job = 0;     // the idlest key other than `keep` (if any)
    absl::Duration idle_for;     // how long it has been idle
  };
  // Erases the idlest job key other than `keep` if it has been idle for at
  // least limits_.active_window.
  Eviction EvictIdlestLocked(absl::Time now, uint64_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(std::map<uint64_t, JobEntry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `key` is a shape-agreement key riding on its group (not counted
  // against max_jobs): its group key is held or is `creating` (a job's
  // shape round comes first, before step 0).
  bool RidesLocked(uint64_t key, uint64_t creating) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keys that count against max_jobs when key `creating` is about to be
  // created: all but those that ride (RidesLocked).
  int CountedKeysLocked(uint64_t creating) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PsRegistryLimits limits_;
  // With limits.key_shape: the keys Forget dropped (newest kMaxForgotten),
  // never created again (a request that got its shape just before the
  // forget must not bring the key back).
  static constexpr size_t kMaxForgotten = 4096;
  std::set<uint64_t> forgotten_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> forgotten_order_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> pushes_{0}, pulls_{0}, pushed_bytes_{0},
      pulled_bytes_{0};
  mutable absl::Mutex mu_;
  std::map<uint64_t, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// PsClient calling a PsShard in the same process (shares its ownership).
class InProcessPsClient : public PsClient {
 public:
  explicit InProcessPsClient(std::shared_ptr<PsShard> shard);
  absl::Status Push(uint64_t job, int64_t step, int worker,
                    absl::Span<const float> shard_grad_sum, int64_t count,
                    absl::Time deadline) override;
  absl::Status Pull(uint64_t job, int64_t step, int worker,
                    absl::Span<float> out, int64_t* count,
                    absl::Time deadline) override;

 private:
  const std::shared_ptr<PsShard> shard_;
};

// num_shards fresh in-process shards for a vector of n floats aggregated over
// num_workers workers (shard s covers ShardBounds(n, num_shards, s)); element
// s of the result is the client of shard s. Aborts on num_workers < 1,
// num_shards < 1 or n < 0 (programming errors).
std::vector<std::unique_ptr<PsClient>> MakeInProcessPsClients(int num_workers,
                                                              int num_shards,
                                                              int64_t n);

struct PsAllReduceOptions {
  uint64_t job = 0;
  int64_t step = 0;
  int worker = 0;  // this worker's rank in [0, K)
  // The whole round (all pushes and pulls) must finish within this time.
  absl::Duration timeout = absl::Seconds(60);
  // How the values travel (PsClient::StartRound): float32 or 16 bits.
  WireFormat wire = WireFormat::kFloat32;
};

// One all-reduce round through S = shards.size() parameter-server shards:
// pushes grad[ShardBounds(n, S, s)] and *count to shard s for every s, then
// pulls every shard back into grad and sets *count to the total. Every shard
// must report the same total count (else InternalError naming the shard).
// Errors: InvalidArgumentError (no shards, null client/count, count < 0,
// timeout <= 0), else the failing client's status, prefixed with the shard.
// On error grad is unspecified and *count unchanged. Thread-compatible per
// call; the clients are shared.
absl::Status PsAllReduce(absl::Span<PsClient* const> shards,
                         absl::Span<float> grad, int64_t* count,
                         const PsAllReduceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_PS_AGGREGATOR_H_
