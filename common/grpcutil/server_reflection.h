// gRPC server reflection (grpc.reflection.v1alpha.ServerReflection) for the
// daemons, so grpcurl and similar tools can list and call their services
// without the .proto files.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_SERVER_REFLECTION_H_
#define LOCKSTEP_COMMON_GRPCUTIL_SERVER_REFLECTION_H_

namespace lockstep {

// Makes every grpc::ServerBuilder created afterwards in this process add the
// reflection service, which describes every service registered on the
// server from the linked protobuf descriptors. Call from main before
// creating builders; idempotent.
void EnableServerReflection();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_SERVER_REFLECTION_H_
