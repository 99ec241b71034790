#include "common/grpcutil/worker_token.h"

namespace lockstep {

void AttachWorkerToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata(kWorkerTokenMetadata, token);
}

std::string WorkerTokenOf(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kWorkerTokenMetadata);
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace lockstep
