#include "common/grpcutil/message_limits.h"

#include <algorithm>

namespace lockstep {

int PsMaxMessageBytes(int64_t max_shard_floats) {
  int64_t bytes = kGrpcMaxMessageBytes;
  if (max_shard_floats >= 0 && max_shard_floats <= kGrpcMaxMessageBytes / 4) {
    bytes = max_shard_floats * 4 + kPsMessageSlackBytes;
  }
  bytes = std::clamp<int64_t>(bytes, kControlMaxMessageBytes, kGrpcMaxMessageBytes);
  return static_cast<int>(bytes);
}

int64_t PsMaxGrpcShardFloats() { return (kGrpcMaxMessageBytes - kPsMessageSlackBytes) / 4; }

void SetServerMessageLimits(grpc::ServerBuilder* builder, int max_bytes) {
  builder->SetMaxReceiveMessageSize(max_bytes);
  builder->SetMaxSendMessageSize(max_bytes);
}

grpc::ChannelArguments ChannelArgsWithMessageLimits(int max_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_bytes);
  args.SetMaxSendMessageSize(max_bytes);
  return args;
}

std::shared_ptr<grpc::Channel> CreateLimitedChannel(
    const std::string& target, int max_bytes, std::shared_ptr<grpc::ChannelCredentials> creds) {
  if (creds == nullptr) creds = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, creds, ChannelArgsWithMessageLimits(max_bytes));
}

}  // namespace lockstep
