// reflection_probe HOST:PORT [SYMBOL...]: asks a daemon's gRPC server
// reflection service which services it serves (printed one per line,
// sorted, as "service NAME"), then for each SYMBOL (e.g.
// lockstep.v1.Coordinator) which .proto files describe it ("symbol S in
// F1 F2 ...", the file holding S first). Exit 0 when every answer came,
// 1 on an RPC failure or a reflection error (printed), 2 for bad usage.
// Used by tests/daemon_ops_test.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "google/protobuf/descriptor.pb.h"
#include "tests/reflection_probe.grpc.pb.h"

namespace refl = grpc::reflection::v1alpha;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: reflection_probe HOST:PORT [SYMBOL...]\n");
    return 2;
  }
  auto stub = refl::ServerReflection::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&ctx);
  refl::ServerReflectionRequest req;
  req.set_list_services("");
  refl::ServerReflectionResponse resp;
  if (!stream->Write(req) || !stream->Read(&resp)) {
    grpc::Status s = stream->Finish();
    std::fprintf(stderr, "reflection_probe: %s: %s\n", argv[1], s.error_message().c_str());
    return 1;
  }
  if (!resp.has_list_services_response()) {
    std::fprintf(stderr, "reflection_probe: list_services: %s\n",
                 resp.error_response().error_message().c_str());
    return 1;
  }
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) std::printf("service %s\n", n.c_str());
  int rc = 0;
  for (int i = 2; i < argc; ++i) {
    req.set_file_containing_symbol(argv[i]);
    if (!stream->Write(req) || !stream->Read(&resp)) {
      std::fprintf(stderr, "reflection_probe: stream broke asking for %s\n", argv[i]);
      return 1;
    }
    if (!resp.has_file_descriptor_response()) {
      std::fprintf(stderr, "reflection_probe: symbol %s: %s\n", argv[i],
                   resp.error_response().error_message().c_str());
      rc = 1;
      continue;
    }
    std::printf("symbol %s in", argv[i]);
    for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      std::printf(" %s", file.ParseFromString(bytes) ? file.name().c_str() : "(unparsable)");
    }
    std::printf("\n");
  }
  stream->WritesDone();
  grpc::Status s = stream->Finish();
  if (!s.ok()) {
    std::fprintf(stderr, "reflection_probe: %s\n", s.error_message().c_str());
    return 1;
  }
  return rc;
}
