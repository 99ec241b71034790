#include "common/grpcutil/server_reflection.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>

namespace lockstep {

void EnableServerReflection() { grpc::reflection::InitProtoReflectionServerBuilderPlugin(); }

}  // namespace lockstep
