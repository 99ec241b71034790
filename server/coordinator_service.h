// CoordinatorService: the gRPC face of lockstep::Coordinator
// (lockstep.v1.Coordinator, synchronous API). A thin adapter: every method
// forwards to the Coordinator and converts the status with grpc_status.h;
// the only behaviour of its own is streaming:
//   * WatchJob sends a JobEvent with the current status at once and then
//     one per job change, until the job is terminal (the stream then ends
//     OK after the final snapshot), the client cancels, or BeginShutdown()
//     is called (UNAVAILABLE). It waits in slices of at most 100 ms so a
//     cancelled client is noticed quickly; no polling of job state.
//   * GetWeights streams the final weights in chunks of at most 1 MiB of
//     data (kMaxWeightsChunkBytes), the first carrying the block layout.
//   * ReportStream answers each StepReports message as ReportSteps would
//     (the same size and token checks, per message), one reply each, in
//     order. An error ends the stream with that status. The handler waits
//     in Read without a deadline of its own (the worker's reporter bounds
//     each exchange and cancels); BeginShutdown() cancels every open stream
//     so a server Shutdown does not wait for them.
//   * UploadWeights feeds every chunk to Coordinator::UploadWeightsChunk and
//     ends with FinishWeightsUpload; INVALID_ARGUMENT for an empty stream or
//     a stream whose chunks name different jobs or workers.
//
// Request size: the coordinator's gRPC server also hosts its parameter-server
// shard, so the server's receive limit is the ps one (up to 1 GiB+,
// common/grpcutil/message_limits.h). Every method here first checks its
// request's serialized size (each chunk of a stream) against
// `max_request_bytes` (default kControlMaxMessageBytes, 16 MiB, what the
// control plane's channels carry) and refuses a larger one with
// RESOURCE_EXHAUSTED naming the method, the size and the limit, before the
// Coordinator sees it; ps Push/Pull on the same port keep their limit.
//
// Thread-safety: safe for gRPC's concurrent calls. `coordinator` is not
// owned and must outlive the service (and the server it is registered on).
#ifndef LOCKSTEP_SERVER_COORDINATOR_SERVICE_H_
#define LOCKSTEP_SERVER_COORDINATOR_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/grpcutil/message_limits.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator.h"

namespace lockstep {

// Data bytes per streamed weights chunk (the gRPC message limit is 4 MiB).
constexpr int64_t kMaxWeightsChunkBytes = int64_t{1} << 20;

class CoordinatorService final : public lockstep::v1::Coordinator::Service {
 public:
  explicit CoordinatorService(lockstep::Coordinator* coordinator,
                              int64_t max_request_bytes = kControlMaxMessageBytes);

  // Makes running and future WatchJob and ReportStream streams end with
  // UNAVAILABLE (open report streams are cancelled), so a server Shutdown
  // does not wait for them. Call before Server::Shutdown.
  void BeginShutdown();

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const lockstep::v1::RegisterWorkerRequest* request,
                              lockstep::v1::RegisterWorkerReply* reply) override;
  grpc::Status DeregisterWorker(grpc::ServerContext* context,
                                const lockstep::v1::DeregisterWorkerRequest* request,
                                lockstep::v1::DeregisterWorkerReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const lockstep::v1::HeartbeatRequest* request,
                         lockstep::v1::HeartbeatReply* reply) override;
  grpc::Status ReportStep(grpc::ServerContext* context,
                          const lockstep::v1::ReportStepRequest* request,
                          lockstep::v1::ReportStepReply* reply) override;
  grpc::Status ReportSteps(grpc::ServerContext* context, const lockstep::v1::StepReports* request,
                           lockstep::v1::ReportStepReply* reply) override;
  grpc::Status ReportStream(grpc::ServerContext* context,
                            grpc::ServerReaderWriter<lockstep::v1::ReportStepReply,
                                                     lockstep::v1::StepReports>* stream) override;
  grpc::Status ReportEval(grpc::ServerContext* context,
                          const lockstep::v1::ReportEvalRequest* request,
                          lockstep::v1::ReportEvalReply* reply) override;
  grpc::Status ReportDone(grpc::ServerContext* context,
                          const lockstep::v1::ReportDoneRequest* request,
                          lockstep::v1::ReportDoneReply* reply) override;
  grpc::Status UploadWeights(grpc::ServerContext* context,
                             grpc::ServerReader<lockstep::v1::WeightsChunk>* reader,
                             lockstep::v1::UploadWeightsReply* reply) override;
  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const lockstep::v1::SubmitJobRequest* request,
                         lockstep::v1::SubmitJobReply* reply) override;
  grpc::Status GetJob(grpc::ServerContext* context, const lockstep::v1::JobRef* request,
                      lockstep::v1::JobStatus* reply) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const lockstep::v1::ListRequest* request,
                        lockstep::v1::JobList* reply) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const lockstep::v1::ListRequest* request,
                           lockstep::v1::WorkerList* reply) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const lockstep::v1::JobRef* request,
                         lockstep::v1::JobStatus* reply) override;
  grpc::Status GetSyncHistory(grpc::ServerContext* context,
                              const lockstep::v1::SyncHistoryRequest* request,
                              lockstep::v1::SyncHistory* reply) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const lockstep::v1::JobRef* request,
                        grpc::ServerWriter<lockstep::v1::JobEvent>* writer) override;
  grpc::Status GetWeights(grpc::ServerContext* context, const lockstep::v1::WeightsRequest* request,
                          grpc::ServerWriter<lockstep::v1::WeightsChunk>* writer) override;

 private:
  grpc::Status CheckSize(const char* method, const google::protobuf::Message& request) const;
  // PERMISSION_DENIED unless the call carries `worker_id`'s worker token
  // (common/grpcutil/worker_token.h; Coordinator::CheckWorkerToken).
  grpc::Status CheckToken(const grpc::ServerContext& context, const std::string& worker_id);

  lockstep::Coordinator* const coordinator_;
  const int64_t max_request_bytes_;
  std::atomic<bool> shutting_down_{false};
  // The contexts of open ReportStream calls (cancelled by BeginShutdown).
  absl::Mutex streams_mu_;
  absl::flat_hash_set<grpc::ServerContext*> streams_ ABSL_GUARDED_BY(streams_mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATOR_SERVICE_H_
