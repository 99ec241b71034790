// CoordinatorClient: the lockstep.v1.Coordinator calls the client commands
// make (lockstep_main.cc, scale_command.cc, resume), each with a deadline of
// `rpc_timeout` and its grpc::Status converted to absl::Status in one place
// (common/grpcutil/grpc_status.h).
//
// Thread-safety: the methods may be called from any thread (the stub is
// thread-safe). Errors are the coordinator's own (NOT_FOUND "job 42 not
// found", INVALID_ARGUMENT naming the field, ...) or the channel's
// (UNAVAILABLE, DEADLINE_EXCEEDED).
#ifndef LOCKSTEP_CLIENT_COORDINATOR_CLIENT_H_
#define LOCKSTEP_CLIENT_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"

namespace lockstep {

class CoordinatorClient {
 public:
  // `address` is host:port; the channel connects lazily. rpc_timeout > 0.
  // `credentials`: common/grpcutil/tls.h's channel credentials (mutual TLS,
  // bearer token); nullptr = plain text.
  CoordinatorClient(const std::string& address, absl::Duration rpc_timeout,
                    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  absl::StatusOr<v1::SubmitJobReply> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::JobStatus> GetJob(uint64_t id);
  absl::StatusOr<v1::JobStatus> Cancel(uint64_t id);
  // The most recent max_entries checks (0 = every kept check) and the exact
  // counters.
  absl::StatusOr<v1::SyncHistory> GetSyncHistory(uint64_t id, int64_t max_entries);
  // One page: the checks with step >= from_step in step order, at most
  // max_entries (0 = the coordinator's cap); next_step -1 at the newest.
  absl::StatusOr<v1::SyncHistory> GetSyncHistoryPage(uint64_t id, int64_t from_step,
                                                     int64_t max_entries);
  // evicted_before > 0: a later page of evicted jobs (ListRequest).
  absl::StatusOr<v1::JobList> ListJobs(uint64_t evicted_before = 0);
  absl::StatusOr<v1::WorkerList> ListWorkers();

  // For the streaming calls (WatchJob, GetWeights), whose deadlines the
  // caller chooses.
  v1::Coordinator::Stub* stub() { return stub_.get(); }
  // Sets ctx's deadline to now + rpc_timeout.
  void SetDeadline(grpc::ClientContext* ctx) const;

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  const absl::Duration rpc_timeout_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_COORDINATOR_CLIENT_H_
