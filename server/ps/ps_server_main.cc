// lockstep-server --role=ps: a parameter-server shard process. Flags and
// wiring only; the logic is PsService / PsShard. SIGINT/SIGTERM: exit 0.
#include <cstdio>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/daemon_util.h"
#include "common/process_tuning.h"
#include "common/shutdown_signal.h"
#include "server/ps/ps_service.h"

ABSL_FLAG(std::string, role, "ps", "Server role; only \"ps\" (parameter-server shard) exists");
ABSL_FLAG(std::string, listen, "127.0.0.1:7080", "Address to serve on (port 0 = OS-chosen)");
ABSL_FLAG(std::string, port_file, "", "Write the bound port here once listening");
ABSL_FLAG(int32_t, max_jobs, 8, "Jobs whose shards are held at once (oldest dropped)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "lockstep parameter-server shard.\n"
      "  lockstep-server --role=ps --listen=HOST:PORT");
  absl::ParseCommandLine(argc, argv);
  lockstep::TuneProcessForThroughput();
  if (absl::GetFlag(FLAGS_role) != "ps") {
    std::fprintf(stderr, "lockstep-server: --role: expected ps, got \"%s\"\n",
                 absl::GetFlag(FLAGS_role).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_max_jobs) < 1) {
    std::fprintf(stderr, "lockstep-server: --max_jobs: expected >= 1\n");
    return 2;
  }
  if (absl::Status s = lockstep::InstallShutdownSignalHandlers(); !s.ok()) {
    std::fprintf(stderr, "lockstep-server: %s\n", std::string(s.message()).c_str());
    return 1;
  }

  lockstep::PsService service(absl::GetFlag(FLAGS_max_jobs));
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "lockstep-server: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = lockstep::WritePortFile(absl::GetFlag(FLAGS_port_file), port); !s.ok()) {
      std::fprintf(stderr, "lockstep-server: --port_file: %s\n", std::string(s.message()).c_str());
      server->Shutdown();
      return 2;
    }
  }
  std::fprintf(stderr, "lockstep-server --role=ps listening on port %d\n", port);
  const int sig = lockstep::WaitForShutdownSignal();
  std::fprintf(stderr, "lockstep-server: %s, shutting down\n", lockstep::ShutdownSignalName(sig));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
