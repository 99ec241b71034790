#include "server/coordinator_service.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/daemon_util.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/worker_token.h"

namespace lockstep {
namespace {

constexpr absl::Duration kWatchSlice = absl::Milliseconds(100);

// RESOURCE_EXHAUSTED when `request` is over the control limit (the server's
// own receive limit is the ps shard's).
grpc::Status CheckRequestSize(const char* method, const google::protobuf::Message& request,
                              int64_t limit) {
  const size_t bytes = request.ByteSizeLong();
  if (static_cast<int64_t>(bytes) <= limit) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("lockstep.v1.Coordinator/", method, ": request is ", bytes,
                   " bytes, over the coordinator's control-message limit of ", limit,
                   " bytes (only its parameter-server shard takes larger messages)"));
}

// Copies *result into *reply and converts the status.
template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* reply) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *reply = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

CoordinatorService::CoordinatorService(lockstep::Coordinator* coordinator,
                                       int64_t max_request_bytes)
    : coordinator_(coordinator), max_request_bytes_(max_request_bytes) {}

grpc::Status CoordinatorService::CheckSize(const char* method,
                                           const google::protobuf::Message& request) const {
  return CheckRequestSize(method, request, max_request_bytes_);
}

void CoordinatorService::BeginShutdown() {
  shutting_down_.store(true);
  absl::MutexLock l(&streams_mu_);
  for (grpc::ServerContext* context : streams_) context->TryCancel();
}

grpc::Status CoordinatorService::CheckToken(const grpc::ServerContext& context,
                                            const std::string& worker_id) {
  // Not naming the method: a PERMISSION_DENIED naming ReportSteps is what
  // an older call policy answers, and workers then fall back to ReportStep.
  return ToGrpcStatus(coordinator_->CheckWorkerToken(worker_id, WorkerTokenOf(context)));
}

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* context,
                                                const v1::RegisterWorkerRequest* request,
                                                v1::RegisterWorkerReply* reply) {
  if (grpc::Status s = CheckSize("RegisterWorker", *request); !s.ok()) return s;
  // The caller's IP fills in an address registered without a host.
  absl::StatusOr<std::string> caller = HostFromGrpcPeer(context->peer());
  return Reply(
      coordinator_->RegisterWorker(*request, caller.ok() ? *caller : "", WorkerTokenOf(*context)),
      reply);
}

grpc::Status CoordinatorService::DeregisterWorker(grpc::ServerContext* context,
                                                  const v1::DeregisterWorkerRequest* request,
                                                  v1::DeregisterWorkerReply* reply) {
  if (grpc::Status s = CheckSize("DeregisterWorker", *request); !s.ok()) return s;
  if (grpc::Status s = CheckToken(*context, request->worker_id()); !s.ok()) {
    return s;
  }
  return Reply(coordinator_->DeregisterWorker(*request), reply);
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context,
                                           const v1::HeartbeatRequest* request,
                                           v1::HeartbeatReply* reply) {
  if (grpc::Status s = CheckSize("Heartbeat", *request); !s.ok()) return s;
  // A heartbeat without this id's token changes nothing: its caller is told
  // to register (and so gets an id and token of its own), as a worker a
  // restarted coordinator does not know is.
  if (!coordinator_->CheckWorkerToken(request->worker_id(), WorkerTokenOf(*context)).ok()) {
    reply->Clear();
    reply->set_reregister(true);
    return grpc::Status::OK;
  }
  return Reply(coordinator_->Heartbeat(*request), reply);
}

grpc::Status CoordinatorService::ReportStep(grpc::ServerContext* context,
                                            const v1::ReportStepRequest* request,
                                            v1::ReportStepReply* reply) {
  if (grpc::Status s = CheckSize("ReportStep", *request); !s.ok()) return s;
  if (grpc::Status s = CheckToken(*context, request->worker_id()); !s.ok()) {
    return s;
  }
  return Reply(coordinator_->ReportStep(*request), reply);
}

grpc::Status CoordinatorService::ReportSteps(grpc::ServerContext* context,
                                             const v1::StepReports* request,
                                             v1::ReportStepReply* reply) {
  if (grpc::Status s = CheckSize("ReportSteps", *request); !s.ok()) return s;
  // Every report's worker (one, from a real worker): checked once each.
  const std::string* checked = nullptr;
  for (const v1::ReportStepRequest& r : request->reports()) {
    if (checked != nullptr && r.worker_id() == *checked) continue;
    if (grpc::Status s = CheckToken(*context, r.worker_id()); !s.ok()) return s;
    checked = &r.worker_id();
  }
  return Reply(coordinator_->ReportSteps(*request), reply);
}

grpc::Status CoordinatorService::ReportStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::ReportStepReply, v1::StepReports>* stream) {
  {
    absl::MutexLock l(&streams_mu_);
    // Checked under the lock BeginShutdown cancels under: a stream opened
    // after it is refused here, one opened before is cancelled by it.
    if (shutting_down_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "ReportStream: the coordinator is shutting down");
    }
    streams_.insert(context);
  }
  // Both reused across the stream's messages.
  v1::StepReports request;
  v1::ReportStepReply reply;
  grpc::Status status = grpc::Status::OK;
  while (stream->Read(&request)) {
    reply.Clear();
    status = ReportSteps(context, &request, &reply);
    if (!status.ok()) break;
    if (!stream->Write(reply)) break;
  }
  {
    absl::MutexLock l(&streams_mu_);
    streams_.erase(context);
  }
  if (status.ok() && shutting_down_.load()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "ReportStream: the coordinator is shutting down");
  }
  return status;
}

grpc::Status CoordinatorService::ReportEval(grpc::ServerContext* context,
                                            const v1::ReportEvalRequest* request,
                                            v1::ReportEvalReply*) {
  if (grpc::Status s = CheckSize("ReportEval", *request); !s.ok()) return s;
  if (grpc::Status s = CheckToken(*context, request->worker_id()); !s.ok()) {
    return s;
  }
  return ToGrpcStatus(coordinator_->ReportEval(*request));
}

grpc::Status CoordinatorService::ReportDone(grpc::ServerContext* context,
                                            const v1::ReportDoneRequest* request,
                                            v1::ReportDoneReply*) {
  if (grpc::Status s = CheckSize("ReportDone", *request); !s.ok()) return s;
  if (grpc::Status s = CheckToken(*context, request->worker_id()); !s.ok()) {
    return s;
  }
  return ToGrpcStatus(coordinator_->ReportDone(*request));
}

grpc::Status CoordinatorService::UploadWeights(grpc::ServerContext* context,
                                               grpc::ServerReader<v1::WeightsChunk>* reader,
                                               v1::UploadWeightsReply*) {
  v1::WeightsChunk chunk;
  bool any = false;
  std::string worker_id;
  uint64_t job_id = 0;
  while (reader->Read(&chunk)) {
    if (grpc::Status s = CheckSize("UploadWeights", chunk); !s.ok()) return s;
    if (!any) {
      any = true;
      worker_id = chunk.worker_id();
      job_id = chunk.job_id();
      if (grpc::Status s = CheckToken(*context, worker_id); !s.ok()) return s;
    } else if (chunk.worker_id() != worker_id || chunk.job_id() != job_id) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("UploadWeights: chunk at offset ", chunk.offset(), " is for job ",
                       chunk.job_id(), " from ", chunk.worker_id(),
                       ", the stream started with job ", job_id, " from ", worker_id));
    }
    if (absl::Status s = coordinator_->UploadWeightsChunk(chunk); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  if (!any) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "UploadWeights: the stream carried no chunks");
  }
  return ToGrpcStatus(coordinator_->FinishWeightsUpload(worker_id, job_id));
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext*,
                                           const v1::SubmitJobRequest* request,
                                           v1::SubmitJobReply* reply) {
  if (grpc::Status s = CheckSize("SubmitJob", *request); !s.ok()) return s;
  return Reply(coordinator_->SubmitJob(*request), reply);
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext*, const v1::JobRef* request,
                                        v1::JobStatus* reply) {
  if (grpc::Status s = CheckSize("GetJob", *request); !s.ok()) return s;
  return Reply(coordinator_->GetJob(request->job_id()), reply);
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext*, const v1::ListRequest* request,
                                          v1::JobList* reply) {
  if (grpc::Status s = CheckSize("ListJobs", *request); !s.ok()) return s;
  // From the state database too; a later page when evicted_before is set.
  *reply = coordinator_->ListJobs(/*with_evicted=*/true, request->evicted_before());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext*, const v1::ListRequest* request,
                                             v1::WorkerList* reply) {
  if (grpc::Status s = CheckSize("ListWorkers", *request); !s.ok()) return s;
  *reply = coordinator_->ListWorkers();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext*, const v1::JobRef* request,
                                           v1::JobStatus* reply) {
  if (grpc::Status s = CheckSize("CancelJob", *request); !s.ok()) return s;
  return Reply(coordinator_->CancelJob(request->job_id()), reply);
}

grpc::Status CoordinatorService::GetSyncHistory(grpc::ServerContext*,
                                                const v1::SyncHistoryRequest* request,
                                                v1::SyncHistory* reply) {
  if (grpc::Status s = CheckSize("GetSyncHistory", *request); !s.ok()) return s;
  if (request->has_from_step()) {
    return Reply(coordinator_->GetSyncHistoryPage(request->job_id(), request->from_step(),
                                                  request->max_entries()),
                 reply);
  }
  return Reply(coordinator_->GetSyncHistory(request->job_id(), request->max_entries()), reply);
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context, const v1::JobRef* request,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  if (grpc::Status s = CheckSize("WatchJob", *request); !s.ok()) return s;
  // Coalesced (Coordinator::NextJobEvents): every state change at once, the
  // progress at most once per watch interval.
  uint64_t seen = 0;
  absl::Time last_sent = absl::InfinitePast();
  while (true) {
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "WatchJob: cancelled by the client");
    }
    if (shutting_down_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "WatchJob: the coordinator is shutting down");
    }
    absl::StatusOr<Coordinator::JobEvents> next =
        coordinator_->NextJobEvents(request->job_id(), seen, last_sent, absl::Now() + kWatchSlice);
    if (!next.ok()) return ToGrpcStatus(next.status());
    if (next->events.empty()) continue;  // slice ended with nothing to send
    seen = next->version;
    last_sent = next->sent;
    for (v1::JobStatus& status : next->events) {
      v1::JobEvent event;
      *event.mutable_status() = std::move(status);
      const bool terminal = IsTerminalJobState(event.status().state());
      if (!writer->Write(event)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "WatchJob: the client went away");
      }
      if (terminal) return grpc::Status::OK;
    }
  }
}

grpc::Status CoordinatorService::GetWeights(grpc::ServerContext* context,
                                            const v1::WeightsRequest* request,
                                            grpc::ServerWriter<v1::WeightsChunk>* writer) {
  if (grpc::Status s = CheckSize("GetWeights", *request); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const FinalWeights>> weights =
      coordinator_->GetWeights(request->job_id());
  if (!weights.ok()) return ToGrpcStatus(weights.status());
  const FinalWeights& w = **weights;
  const int64_t max_floats = kMaxWeightsChunkBytes / 4;
  int64_t offset = 0;
  do {
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "GetWeights: cancelled by the client");
    }
    v1::WeightsChunk chunk = MakeWeightsChunk(w, offset, max_floats);
    offset += static_cast<int64_t>(chunk.data().size() / 4);
    if (!writer->Write(chunk)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "GetWeights: the client went away");
    }
  } while (offset < w.total);
  return grpc::Status::OK;
}

}  // namespace lockstep
