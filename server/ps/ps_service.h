// The parameter-server gRPC service (lockstep.v1.ParameterServer): a thin
// adapter from Push/Pull RPCs to PsShard objects (common/collective), one
// per (job, shard), held by a PsShardRegistry (created on first use from the
// K and shard length the request carries). The server sums and returns;
// workers apply the update. DataAddress tells workers where the same
// registry's raw-TCP data plane listens (common/psnet/ps_tcp_server.h).
//
// Memory (PsShardRegistry, common/collective/ps_aggregator.h): at most
// max_jobs group keys (a held group's shape-agreement key rides on it) and
// max_bytes of worst-case shard memory; a new key beyond max_jobs evicts the
// key idle longest, never one with traffic in the last active_window (it is
// refused with RESOURCE_EXHAUSTED instead). A request naming a num_workers
// or shard_len other than the held shard's is INVALID_ARGUMENT naming the
// field, the value and the expected one; nothing is allocated from a
// request's numbers: a Pull's reply is allocated once its step is complete,
// at the shard's length. Each PsShard keeps only its two latest steps.
//
// Threading: gRPC's sync server calls Push/Pull from many threads; the
// shard map is guarded by a mutex, shards are thread-safe. A Pull waits for
// the step's K pushes up to the client's wait_micros / RPC deadline, but
// returns CANCELLED within kCancelCheckEvery once the client cancels.
#ifndef LOCKSTEP_SERVER_PS_PS_SERVICE_H_
#define LOCKSTEP_SERVER_PS_PS_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/collective/ps_aggregator.h"
#include "common/psnet/ps_tcp_server.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps/ps_key_table.h"

namespace lockstep {

class PsService final : public v1::ParameterServer::Service {
 public:
  // A service with its own registry of `max_jobs` jobs.
  explicit PsService(int max_jobs = 64);
  // A service over `registry` (not owned; shared with the raw-TCP data
  // plane, common/psnet/ps_tcp_server.h).
  explicit PsService(PsShardRegistry* registry);

  grpc::Status Push(grpc::ServerContext* ctx, const v1::PushRequest* req,
                    v1::PushReply* reply) override;
  grpc::Status Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                    v1::PullReply* reply) override;
  grpc::Status DataAddress(grpc::ServerContext* ctx, const v1::DataAddressRequest* req,
                           v1::DataAddressReply* reply) override;

  // What DataAddress answers: the raw-TCP data plane's port (0 = none) and
  // host ("" = the host the caller dialed). Any thread.
  void SetDataAddress(int port, std::string host = "");
  // The TCP data plane's secret table (PsTcpServer), as DataAddress and
  // Control use it. Unset (no TCP data plane): a DataAddress carrying a
  // secret, and a Control setting one, are FAILED_PRECONDITION. Any thread.
  struct SecretHooks {
    // A worker's registration (DataAddress): PsTcpServer::RegisterSecret,
    // which may wait until `deadline` for the coordinator's secret.
    std::function<absl::Status(uint64_t job, const std::string& secret, absl::Time deadline)>
        register_secret;
    // The coordinator's (Control): PsTcpServer::SetCoordinatorSecret.
    std::function<absl::Status(uint64_t job, const std::string& secret)> set_secret;
    // Control's forget_jobs: PsTcpServer::ForgetSecret.
    std::function<void(uint64_t job)> forget_secret;
  };
  void SetSecretHooks(SecretHooks hooks);
  // The longest a DataAddress waits for the coordinator's secret (also
  // bounded by the call's deadline).
  static constexpr absl::Duration kMaxSecretWait = absl::Seconds(10);
  // Control's bound on each list.
  static constexpr int kMaxControlEntries = 256;

  grpc::Status Control(grpc::ServerContext* ctx, const v1::PsControlRequest* req,
                       v1::PsControlReply* reply) override;
  // Where Control's key shapes go (not owned, outlives this; the registry's
  // PsRegistryLimits::key_shape reads it). Unset: shapes are ignored (a
  // server whose registry takes K from the first request). Any thread.
  void SetKeyTable(PsKeyTable* table);

  // Jobs currently held (for tests and status).
  int num_jobs() const { return registry_->num_jobs(); }

  // Pull handlers currently waiting for pushes (for tests and status).
  int waiting_pulls() const { return waiting_pulls_.load(std::memory_order_relaxed); }

  // Successful pushes and pulls since start (gRPC and the TCP data plane
  // sharing the registry) and their payload bytes (gradient floats x 4 +
  // the 8-byte count), for the metrics.
  using Stats = PsShardRegistry::Stats;
  Stats stats() const { return registry_->stats(); }

  // A waiting Pull checks this often whether its client has cancelled, and
  // then returns CANCELLED, freeing its server thread.
  static constexpr absl::Duration kCancelCheckEvery = absl::Milliseconds(50);

 private:
  std::unique_ptr<PsShardRegistry> owned_;
  PsShardRegistry* const registry_;
  std::atomic<int> waiting_pulls_{0};
  absl::Mutex data_mu_;
  int data_port_ ABSL_GUARDED_BY(data_mu_) = 0;
  std::string data_host_ ABSL_GUARDED_BY(data_mu_);
  SecretHooks secret_hooks_ ABSL_GUARDED_BY(data_mu_);
  PsKeyTable* key_table_ ABSL_GUARDED_BY(data_mu_) = nullptr;
  // Scratch for pushes, reused across calls (a fresh 1 MB buffer per push
  // costs page faults); guarded by its own mutex, one per concurrent push.
  absl::Mutex scratch_mu_;
  std::vector<std::unique_ptr<std::vector<float>>> scratch_ ABSL_GUARDED_BY(scratch_mu_);
};

// The hooks of `plane`'s secret table (not owned; it must outlive the
// service's calls).
PsService::SecretHooks DataPlaneSecretHooks(PsTcpServer* plane);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_PS_SERVICE_H_
