// lockstep-worker: a worker daemon. Parses flags and wires objects: one
// gRPC server for the peer data plane, the coordinator channel, and the
// WorkerDaemon loop. SIGINT/SIGTERM shut it down cleanly (exit 0).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/daemon_util.h"
#include "common/process_tuning.h"
#include "common/shutdown_signal.h"
#include "worker/net/grpc_transport.h"
#include "worker/net/peer_service.h"
#include "worker/worker_daemon.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address host:port");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "Address of this worker's peer service (port 0 = chosen by the OS)");
ABSL_FLAG(std::string, advertise, "",
          "Address peers use to reach this worker (default: the --listen host, or this "
          "machine's host name for a wildcard listen address, with the bound port)");
ABSL_FLAG(std::string, port_file, "", "Write the bound port here once listening");
ABSL_FLAG(std::string, hostname, "", "Name shown in status (default: gethostname)");
ABSL_FLAG(int32_t, blas_threads, 1, "OpenBLAS threads per worker");
ABSL_FLAG(int64_t, fault_perturb_step, -1,
          "Testing only: after this step of every job, nudge this replica's first weight by "
          "one ulp so the coordinator's hash check catches the drift (-1 = off)");
ABSL_FLAG(std::string, data_dir, "",
          "Relative dataset paths in jobs resolve against this directory (this machine's data)");
ABSL_FLAG(int32_t, rpc_timeout_ms, 5000, "Deadline of each coordinator RPC");
ABSL_FLAG(int32_t, combine_timeout_ms, 30000,
          "Deadline of one gradient combine (a silent peer fails the job after this)");

namespace {

class GrpcJobTransport : public lockstep::JobTransport {
 public:
  explicit GrpcJobTransport(std::unique_ptr<lockstep::GrpcTransport> t) : t_(std::move(t)) {}
  lockstep::Transport* transport() override { return t_.get(); }
  void Shutdown() override { t_->Shutdown(); }

 private:
  std::unique_ptr<lockstep::GrpcTransport> t_;
};

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "lockstep worker daemon.\n"
      "  lockstep-worker --coordinator=HOST:PORT [--listen=HOST:PORT] [--port_file=F]");
  absl::ParseCommandLine(argc, argv);
  lockstep::TuneProcessForThroughput();

  if (absl::Status s = lockstep::InstallShutdownSignalHandlers(); !s.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n", std::string(s.message()).c_str());
    return 1;
  }

  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (!data_dir.empty() && chdir(data_dir.c_str()) != 0) {
    std::fprintf(stderr, "lockstep-worker: --data_dir: cannot enter %s\n", data_dir.c_str());
    return 2;
  }
  lockstep::PeerServiceImpl peers;
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  peers.RegisterOn(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "lockstep-worker: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  std::string advertise = absl::GetFlag(FLAGS_advertise);
  // A wildcard listen address is no address for peers: use the host name.
  if (advertise.empty()) advertise = lockstep::AdvertisedAddress(HostOf(listen), port);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = lockstep::WritePortFile(absl::GetFlag(FLAGS_port_file), port); !s.ok()) {
      std::fprintf(stderr, "lockstep-worker: --port_file: %s\n", std::string(s.message()).c_str());
      server->Shutdown();
      return 2;
    }
  }
  std::string hostname = absl::GetFlag(FLAGS_hostname);
  if (hostname.empty()) {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    hostname = buf;
  }
  std::fprintf(stderr, "lockstep-worker listening on %s (coordinator %s)\n", advertise.c_str(),
               absl::GetFlag(FLAGS_coordinator).c_str());

  lockstep::WorkerDaemonOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.advertise_address = advertise;
  options.hostname = hostname;
  options.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  options.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
  options.combine_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_combine_timeout_ms));
  options.perturb_at_step = absl::GetFlag(FLAGS_fault_perturb_step);
  auto channel = grpc::CreateChannel(options.coordinator, grpc::InsecureChannelCredentials());
  lockstep::WorkerDaemon daemon(
      options, channel,
      [&peers](uint64_t job, int rank, const std::vector<std::string>& addresses)
          -> absl::StatusOr<std::unique_ptr<lockstep::JobTransport>> {
        auto t = lockstep::GrpcTransport::Create(&peers, job, rank, addresses);
        if (!t.ok()) return t.status();
        return std::unique_ptr<lockstep::JobTransport>(
            new GrpcJobTransport(*std::move(t)));
      });

  std::thread signal_thread([&] {
    const int sig = lockstep::WaitForShutdownSignal();
    std::fprintf(stderr, "lockstep-worker: %s, shutting down\n",
                 lockstep::ShutdownSignalName(sig));
    daemon.Shutdown();
  });
  absl::Status s = daemon.Run();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Run() only returns after Shutdown(), i.e. after a signal arrived.
  signal_thread.join();
  if (!s.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
