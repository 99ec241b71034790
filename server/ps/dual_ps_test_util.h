// Tests only: one shard registry behind a gRPC PsService (plain text on
// 127.0.0.1, OS-chosen port) and a raw-TCP data plane, as lockstep-server
// and the coordinator run them. Shared by server/ps:ps_conformance_test and
// server:grpc_ps_control_test.
#ifndef LOCKSTEP_SERVER_PS_DUAL_PS_TEST_UTIL_H_
#define LOCKSTEP_SERVER_PS_DUAL_PS_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "common/collective/ps_aggregator.h"
#include "common/psnet/ps_tcp_server.h"
#include "gtest/gtest.h"
#include "server/ps/ps_key_table.h"
#include "server/ps/ps_service.h"

namespace lockstep {

struct DualPs {
  // `options`: the data plane's (e.g. secrets_from_coordinator, as a TLS
  // lockstep-server runs it). `keys_from_coordinator`: the registry creates
  // only keys that a Control message started (keys), as lockstep-server
  // runs it by default.
  explicit DualPs(PsTcpServerOptions options = {}, bool keys_from_coordinator = false)
      : registry([&] {
          PsRegistryLimits l;
          if (keys_from_coordinator) {
            l.key_shape = [this](uint64_t job, absl::Time deadline) {
              return keys.Wait(job, deadline);
            };
          }
          return l;
        }()),
        service(&registry) {
    service.SetKeyTable(&keys);
    auto tcp = PsTcpServer::Start(&registry, "127.0.0.1", 0, std::move(options));
    EXPECT_TRUE(tcp.ok()) << tcp.status();
    data_plane = *std::move(tcp);
    service.SetSecretHooks(DataPlaneSecretHooks(data_plane.get()));
    service.SetDataAddress(data_plane->port());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~DualPs() {
    server->Shutdown();
    data_plane->Shutdown();
  }
  PsKeyTable keys;
  PsShardRegistry registry;
  PsService service;
  std::unique_ptr<PsTcpServer> data_plane;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_DUAL_PS_TEST_UTIL_H_
