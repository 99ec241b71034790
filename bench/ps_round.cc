// bazel run -c opt //bench:ps_round [-- --rounds=300 --n=203531]
//
// One parameter-server round (every worker pushes its shard, then pulls the
// reduced shard) of the main job's gradient (MLP 784-256-10: 203,530
// parameters + the loss slot), K = 2 workers, S = 1 and 2 shards, over the
// gRPC Push/Pull service and over the raw-TCP data plane
// (common/psnet), servers and workers in this process on 127.0.0.1. Prints
// the median and 90th-percentile round latency per worker and the ratio.
// No training: the data path alone (compare the cluster figures, which add
// compute and the coordinator).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/collective/chunking.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/wire_format.h"
#include "common/grpcutil/grpc_ps_client.h"
#include "common/process_tuning.h"
#include "common/net/data_auth.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/psnet/ps_tcp_server.h"
#include "server/ps/ps_service.h"

ABSL_FLAG(int, rounds, 300, "timed rounds per configuration (after 20 warm-up rounds)");
ABSL_FLAG(int64_t, n, 203531, "floats per worker (the main job's model + the loss slot)");
ABSL_FLAG(int, workers, 2, "K");
ABSL_FLAG(std::string, compression, "none,bf16",
          "comma-separated wire formats to measure (none, bf16, fp16: JobSpec.compression); "
          "float32 (none) is the anchor");

namespace lockstep {
namespace {

struct Shard {
  Shard() : service(&registry) {
    auto tcp = PsTcpServer::Start(&registry, "127.0.0.1", 0);
    if (!tcp.ok()) {
      std::fprintf(stderr, "%s\n", std::string(tcp.status().message()).c_str());
      std::exit(1);
    }
    data_plane = *std::move(tcp);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    grpc_address = "127.0.0.1:" + std::to_string(port);
    tcp_address = "127.0.0.1:" + std::to_string(data_plane->port());
  }
  ~Shard() {
    server->Shutdown();
    data_plane->Shutdown();
  }
  PsShardRegistry registry{64};
  PsService service;
  std::unique_ptr<PsTcpServer> data_plane;
  std::unique_ptr<grpc::Server> server;
  std::string grpc_address, tcp_address;
};

// Median and p90 of worker 0's round latencies, in microseconds.
std::pair<double, double> Run(int k, int shards, int64_t n, bool tcp, int rounds, uint64_t job,
                              WireFormat wire) {
  std::vector<std::unique_ptr<Shard>> servers;
  // The job's data-plane secret, registered as a worker's DataAddress does.
  const std::string secret(dataauth::kSecretBytes, 'b');
  for (int s = 0; s < shards; ++s) {
    servers.push_back(std::make_unique<Shard>());
    if (!servers.back()->data_plane->RegisterSecret(job, secret).ok()) std::exit(1);
  }
  std::vector<std::vector<double>> lat(k);
  std::vector<std::thread> threads;
  for (int w = 0; w < k; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::unique_ptr<PsClient>> owned;
      std::vector<PsClient*> clients;
      for (int s = 0; s < shards; ++s) {
        const int64_t len = ShardBounds(n, shards, s).size();
        if (tcp) {
          PsTcpClientOptions to;
          to.secret = secret;
          owned.push_back(std::make_unique<PsTcpClient>(servers[s]->tcp_address, s, k, len, to));
        } else {
          owned.push_back(std::make_unique<GrpcPsClient>(
              grpc::CreateChannel(servers[s]->grpc_address, grpc::InsecureChannelCredentials()),
              servers[s]->grpc_address, s, k, len));
        }
        clients.push_back(owned.back().get());
      }
      std::vector<float> buf(n);
      for (int r = 0; r < rounds + 20; ++r) {
        std::fill(buf.begin(), buf.end(), 1.0f);
        int64_t count = 1;
        PsAllReduceOptions o;
        o.job = job;
        o.step = r;
        o.worker = w;
        o.timeout = absl::Seconds(60);
        o.wire = wire;
        const absl::Time t0 = absl::Now();
        absl::Status s = PsAllReduce(clients, absl::MakeSpan(buf), &count, o);
        const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
        if (!s.ok() || count != k || buf[0] != static_cast<float>(k)) {
          std::fprintf(stderr, "round %d worker %d: %s\n", r, w, std::string(s.message()).c_str());
          std::exit(1);
        }
        if (r >= 20) lat[w].push_back(us);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> v = lat[0];
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[v.size() * 9 / 10]};
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  lockstep::TuneProcessForThroughput();
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int64_t n = absl::GetFlag(FLAGS_n);
  const int k = absl::GetFlag(FLAGS_workers);
  std::vector<lockstep::WireFormat> wires;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_compression), ',')) {
    auto w = lockstep::ParseWireFormat(name);
    if (!w.ok()) {
      std::fprintf(stderr, "--compression: %s\n", std::string(w.status().message()).c_str());
      return 2;
    }
    wires.push_back(*w);
  }
  std::printf("ps round, K=%d, %lld floats (%.0f KB) per worker, %d rounds; worker 0's latency\n",
              k, static_cast<long long>(n), n * 4 / 1e3, rounds);
  std::printf("%3s %5s | %12s %12s | %12s %12s | %8s\n", "S", "wire", "grpc med us",
              "grpc p90 us", "tcp med us", "tcp p90 us", "grpc/tcp");
  uint64_t job = 1;
  for (int shards = 1; shards <= 2; ++shards) {
    for (lockstep::WireFormat wire : wires) {
      auto g = lockstep::Run(k, shards, n, false, rounds, job++, wire);
      auto t = lockstep::Run(k, shards, n, true, rounds, job++, wire);
      std::printf("%3d %5s | %12.0f %12.0f | %12.0f %12.0f | %7.2fx\n", shards,
                  lockstep::WireFormatName(wire), g.first, g.second, t.first, t.second,
                  g.first / t.first);
    }
  }
  return 0;
}
