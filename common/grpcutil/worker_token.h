// The worker token on the control channel: RegisterWorker's reply gives a
// worker a token (RegisterWorkerReply.worker_token) that only the
// coordinator can derive for that worker id (dataauth::WorkerToken under
// its start-up key). The worker sends it as call metadata with every later
// call naming its id (Heartbeat, ReportStep(s), ReportEval, ReportDone,
// UploadWeights, DeregisterWorker); the coordinator's service adapter
// checks it before the call reaches the coordinator, so a caller that
// merely knows a worker id (every `lockstep workers` lists them) cannot
// report, fail or deregister for that worker.
//
// Pure helpers, thread-safe.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_WORKER_TOKEN_H_
#define LOCKSTEP_COMMON_GRPCUTIL_WORKER_TOKEN_H_

#include <string>

#include <grpcpp/grpcpp.h>

namespace lockstep {

// The metadata key (ASCII: the token is 64 hex digits).
inline constexpr char kWorkerTokenMetadata[] = "lockstep-worker-token";

// Adds `token` to the call's metadata; nothing when it is empty (a worker
// not registered yet). Before the call starts.
void AttachWorkerToken(grpc::ClientContext* ctx, const std::string& token);

// The token a call carries ("" = none; the first when there are several).
std::string WorkerTokenOf(const grpc::ServerContext& ctx);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_WORKER_TOKEN_H_
