// PsClient over gRPC: a worker's handle on one parameter-server shard
// served by PsService at `address`. Thread-safe (the stub is).
#ifndef LOCKSTEP_COMMON_GRPCUTIL_GRPC_PS_CLIENT_H_
#define LOCKSTEP_COMMON_GRPCUTIL_GRPC_PS_CLIENT_H_

#include <memory>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/ps_aggregator.h"
#include "proto/ps.grpc.pb.h"

namespace lockstep {

class GrpcPsClient : public PsClient {
 public:
  // shard: this shard's index; num_workers: K; shard_len: its length.
  GrpcPsClient(std::shared_ptr<grpc::Channel> channel, std::string address, int shard,
               int num_workers, int64_t shard_len);

  // Errors are the server's (named by shard index and address), or
  // UNAVAILABLE / DEADLINE_EXCEEDED when it cannot be reached in time.
  // DEADLINE_EXCEEDED, and CANCELLED (Cancel), add why the channel could
  // not connect when it could not (health_check.h ConnectFailure).
  absl::Status Push(uint64_t job, int64_t step, int worker,
                    absl::Span<const float> shard_grad_sum, int64_t count,
                    absl::Time deadline) override;
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                    int64_t* count, absl::Time deadline) override;
  // A Push and a Pull whose values travel as `wire` (ps.proto wire_format:
  // a 16-bit push is rounded once here; the server rounds the sum once).
  absl::Status StartRound(uint64_t job, int64_t step, int worker,
                          absl::Span<const float> shard_grad_sum, int64_t count,
                          absl::Time deadline, WireFormat wire) override;
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t* count, absl::Time deadline, WireFormat wire) override;

  // Cancels the calls in flight and makes every later call return
  // CANCELLED at once (a worker whose job was ended must not wait out a
  // pull's deadline). Any thread.
  void Cancel() override;

  // The shard server's raw-TCP data plane address (DataAddress RPC): its
  // host, or the host of `address` when it names none, and its data port.
  // FailedPreconditionError naming the shard when the server has none (an
  // older server, or --data_port=-1).
  // With `secret` (the Assignment's data_plane_secret), also registers it for
  // job key `job` at the server (ps.proto DataAddressRequest).
  absl::StatusOr<std::string> DataAddress(absl::Time deadline, uint64_t job = 0,
                                          const std::string& secret = "");

 private:
  absl::Status PushAs(uint64_t job, int64_t step, int worker,
                      absl::Span<const float> shard_grad_sum, int64_t count,
                      absl::Time deadline, WireFormat wire);
  absl::Status PullAs(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                      int64_t* count, absl::Time deadline, WireFormat wire);
  absl::Status Named(const grpc::Status& s) const;
  // Registers a call's context so Cancel() can reach it; false when
  // already cancelled.
  bool Begin(grpc::ClientContext* ctx);
  void End(grpc::ClientContext* ctx);

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> active_ ABSL_GUARDED_BY(mu_);

  std::shared_ptr<grpc::Channel> channel_;  // for ConnectFailure (health_check.h)
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  const std::string address_;
  const int shard_;
  const int num_workers_;
  const int64_t shard_len_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_GRPC_PS_CLIENT_H_
