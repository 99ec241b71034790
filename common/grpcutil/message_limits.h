// Message-size limits of lockstep's gRPC servers and channels, set
// deliberately in one place (gRPC's defaults are 4 MiB received and
// unlimited sent, so a ps shard over 4 MiB failed and nothing stated what a
// daemon accepts).
//
//   control plane  coordinator RPCs (specs, reports, status, 1 MiB weight
//                  chunks), health, the state service's 1 MiB chunks:
//                  kControlMaxMessageBytes (16 MiB) both ways;
//   peer service   kMaxPeerMessageBytes + 4 KiB (worker/net/peer_service.h);
//   ps             one shard per Push request / Pull reply:
//                  PsMaxMessageBytes(max_shard_floats) = 4 x floats + 64 KiB,
//                  at most kGrpcMaxMessageBytes. A server that hosts the ps
//                  service (lockstep-server, the coordinator) receives up to
//                  that; a ps client channel receives up to that.
// A message over a limit fails that RPC with RESOURCE_EXHAUSTED ("Received
// message larger than max (N vs. M)") naming both sizes; the process keeps
// serving.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_MESSAGE_LIMITS_H_
#define LOCKSTEP_COMMON_GRPCUTIL_MESSAGE_LIMITS_H_

#include <cstdint>

#include <grpcpp/grpcpp.h>

namespace lockstep {

inline constexpr int kControlMaxMessageBytes = 16 << 20;
// gRPC's own ceiling (an int, and its framing), less room for headers.
inline constexpr int64_t kGrpcMaxMessageBytes = (int64_t{1} << 31) - (int64_t{1} << 20);
inline constexpr int64_t kPsMessageSlackBytes = 64 << 10;

// 4 x max_shard_floats + kPsMessageSlackBytes, clamped to
// [kControlMaxMessageBytes, kGrpcMaxMessageBytes] (no overflow).
int PsMaxMessageBytes(int64_t max_shard_floats);

// The largest shard (floats) a gRPC ps message can carry.
int64_t PsMaxGrpcShardFloats();

// Sets the builder's receive and send limits.
void SetServerMessageLimits(grpc::ServerBuilder* builder, int max_bytes);

// Channel arguments with receive and send limits.
grpc::ChannelArguments ChannelArgsWithMessageLimits(int max_bytes);

// A channel to `target` with those limits (plain text when `creds` is
// null).
std::shared_ptr<grpc::Channel> CreateLimitedChannel(
    const std::string& target, int max_bytes,
    std::shared_ptr<grpc::ChannelCredentials> creds = nullptr);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_MESSAGE_LIMITS_H_
