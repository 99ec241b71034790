#include "client/coordinator_client.h"

#include "absl/time/clock.h"
#include "common/grpcutil/grpc_status.h"

namespace lockstep {
namespace {

// Runs one unary call `method` on a context with the client's deadline.
template <typename Request, typename Reply, typename Method>
absl::StatusOr<Reply> Unary(const CoordinatorClient& client, v1::Coordinator::Stub* stub,
                            Method method, const Request& request) {
  grpc::ClientContext ctx;
  client.SetDeadline(&ctx);
  Reply reply;
  absl::Status s = FromGrpcStatus((stub->*method)(&ctx, request, &reply));
  if (!s.ok()) return s;
  return reply;
}

v1::JobRef Ref(uint64_t id) {
  v1::JobRef ref;
  ref.set_job_id(id);
  return ref;
}

}  // namespace

CoordinatorClient::CoordinatorClient(const std::string& address, absl::Duration rpc_timeout,
                                     std::shared_ptr<grpc::ChannelCredentials> credentials)
    : stub_(v1::Coordinator::NewStub(grpc::CreateChannel(
          address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()))),
      rpc_timeout_(rpc_timeout) {}

void CoordinatorClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
}

absl::StatusOr<v1::SubmitJobReply> CoordinatorClient::Submit(
    const v1::SubmitJobRequest& request) {
  return Unary<v1::SubmitJobRequest, v1::SubmitJobReply>(
      *this, stub_.get(), &v1::Coordinator::Stub::SubmitJob, request);
}

absl::StatusOr<v1::JobStatus> CoordinatorClient::GetJob(uint64_t id) {
  return Unary<v1::JobRef, v1::JobStatus>(*this, stub_.get(), &v1::Coordinator::Stub::GetJob,
                                          Ref(id));
}

absl::StatusOr<v1::JobStatus> CoordinatorClient::Cancel(uint64_t id) {
  return Unary<v1::JobRef, v1::JobStatus>(*this, stub_.get(),
                                          &v1::Coordinator::Stub::CancelJob, Ref(id));
}

absl::StatusOr<v1::SyncHistory> CoordinatorClient::GetSyncHistory(uint64_t id,
                                                                  int64_t max_entries) {
  v1::SyncHistoryRequest req;
  req.set_job_id(id);
  req.set_max_entries(max_entries);
  return Unary<v1::SyncHistoryRequest, v1::SyncHistory>(
      *this, stub_.get(), &v1::Coordinator::Stub::GetSyncHistory, req);
}

absl::StatusOr<v1::SyncHistory> CoordinatorClient::GetSyncHistoryPage(uint64_t id,
                                                                      int64_t from_step,
                                                                      int64_t max_entries) {
  v1::SyncHistoryRequest req;
  req.set_job_id(id);
  req.set_from_step(from_step);
  req.set_max_entries(max_entries);
  return Unary<v1::SyncHistoryRequest, v1::SyncHistory>(
      *this, stub_.get(), &v1::Coordinator::Stub::GetSyncHistory, req);
}

absl::StatusOr<v1::JobList> CoordinatorClient::ListJobs(uint64_t evicted_before) {
  v1::ListRequest req;
  req.set_evicted_before(evicted_before);
  return Unary<v1::ListRequest, v1::JobList>(*this, stub_.get(),
                                             &v1::Coordinator::Stub::ListJobs, req);
}

absl::StatusOr<v1::WorkerList> CoordinatorClient::ListWorkers() {
  return Unary<v1::ListRequest, v1::WorkerList>(
      *this, stub_.get(), &v1::Coordinator::Stub::ListWorkers, v1::ListRequest());
}

}  // namespace lockstep
