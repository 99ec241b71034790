// One rank of //bench:allreduce: see allreduce_rank.h.
#include "bench/allreduce_rank.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/allreduce_flags.h"
#include "bench/bench_util.h"
#include "common/collective/progress_mark.h"
#include "common/collective/ring_allreduce.h"
#include "common/net/data_auth.h"
#include "common/net/data_conn.h"
#include "common/process_tuning.h"
#include "worker/net/grpc_transport.h"
#include "worker/net/peer_service.h"
#include "worker/net/tcp_transport.h"

namespace lockstep::allreduce_bench {

using bench::Median;

// Must match iterations_for / warmup_for in mpi_allreduce.c.
// About 128 MiB reduced per (K, size), 6..500 timed calls.
int IterationsFor(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{128} << 20) / bytes, 6, 500));
}
int WarmupFor(int64_t bytes) { return std::max(2, IterationsFor(bytes) / 10); }

std::vector<int64_t> ParseInts(const std::string& csv) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(csv, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(p, &v) || v <= 0) {
      std::fprintf(stderr, "bad number '%s' in '%s'\n", std::string(p).c_str(),
                   csv.c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

std::vector<std::pair<std::string, int>> ParseGrpcArgs(const std::string& s) {
  std::vector<std::pair<std::string, int>> out;
  for (absl::string_view kv : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
    int v;
    if (!absl::SimpleAtoi(p.second, &v)) {
      std::fprintf(stderr, "bad --grpc_args entry '%s'\n", std::string(kv).c_str());
      std::exit(2);
    }
    out.emplace_back(p.first, v);
  }
  return out;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

namespace {

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int RunRank() {
  // The same process-wide settings the worker daemon makes at startup.
  TuneProcessForThroughput();

  const int rank = absl::GetFlag(FLAGS_rank);
  const int k = absl::GetFlag(FLAGS_world);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const std::vector<int64_t> sizes = ParseInts(absl::GetFlag(FLAGS_sizes));
  const auto grpc_args = ParseGrpcArgs(absl::GetFlag(FLAGS_grpc_args));

  const bool use_tls = absl::GetFlag(FLAGS_transport) == "tcp_tls";
  const bool use_tcp = absl::GetFlag(FLAGS_transport) == "tcp" || use_tls;
  // gRPC: the worker's PeerService on its own server. TCP: a peer hub.
  PeerServiceImpl service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<TcpPeerHub> hub;
  int port = 0;
  if (use_tcp) {
    TcpHubOptions hub_options;
    if (use_tls) {
      // As lockstep-worker --data_plane_tls does, with the worker's files.
      const std::string c = absl::GetFlag(FLAGS_certs_dir);
      auto tls = dataconn::DataTls::Create(absl::StrCat(c, "/worker.pem"),
                                           absl::StrCat(c, "/worker.key"),
                                           absl::StrCat(c, "/ca.pem"), {"worker"});
      if (!tls.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, tls.status().ToString().c_str());
        return 1;
      }
      hub_options.tls = *tls;
    }
    absl::StatusOr<std::unique_ptr<TcpPeerHub>> h =
        TcpPeerHub::Start("127.0.0.1", 0, hub_options);
    if (!h.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, h.status().ToString().c_str());
      return 1;
    }
    hub = *std::move(h);
    port = hub->port();
  } else {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    service.RegisterOn(builder);
    for (const auto& [name, value] : grpc_args) {
      builder.AddChannelArgument(name, value);
    }
    server = builder.BuildAndStart();
    if (server == nullptr || port <= 0) {
      std::fprintf(stderr, "rank %d: cannot start the gRPC server\n", rank);
      return 1;
    }
  }
  WriteFileAtomically(absl::StrCat(dir, "/port.", rank), absl::StrCat(port));

  // Rendezvous: wait for every rank's port file.
  std::vector<std::string> addresses(k);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int r = 0; r < k; ++r) {
    std::string text;
    int p = 0;
    while (!ReadFile(absl::StrCat(dir, "/port.", r), &text) ||
           !absl::SimpleAtoi(text, &p)) {
      if (absl::Now() > deadline) {
        std::fprintf(stderr, "rank %d: rank %d never published its port\n",
                     rank, r);
        return 1;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    addresses[r] = absl::StrCat("127.0.0.1:", p);
  }

  // As a job's PeerWait progress; outlives the transport (shared: gRPC's
  // reactors may touch it after the transport is gone).
  auto progress = std::make_shared<ProgressMark>();
  std::unique_ptr<GrpcTransport> grpc_transport;
  std::unique_ptr<TcpTransport> tcp_transport;
  Transport* transport = nullptr;
  if (use_tcp) {
    TcpTransportOptions options;
    // Every rank of this benchmark shares one fixed test secret (a job's
    // comes from the coordinator): the hello is authenticated as in a job.
    options.secret = std::string(dataauth::kSecretBytes, 'b');
    options.send_buffer_bytes = absl::GetFlag(FLAGS_send_buffer_bytes);
    options.progress_in_recv = absl::GetFlag(FLAGS_progress_in_recv);
    if (absl::GetFlag(FLAGS_progress_mark)) options.progress = progress.get();
    if (absl::GetFlag(FLAGS_recv_spin_us) >= 0) {
      options.recv_spin = absl::Microseconds(absl::GetFlag(FLAGS_recv_spin_us));
    }
    absl::StatusOr<std::unique_ptr<TcpTransport>> t =
        TcpTransport::Create(hub.get(), /*group=*/1, rank, addresses, options);
    if (!t.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str());
      return 1;
    }
    tcp_transport = *std::move(t);
    transport = tcp_transport.get();
  } else {
    GrpcTransportOptions options;
    options.max_queued_bytes = absl::GetFlag(FLAGS_max_queued_bytes);
    options.channel_args = grpc_args;
    if (absl::GetFlag(FLAGS_recv_spin_us) >= 0) {
      options.recv_spin = absl::Microseconds(absl::GetFlag(FLAGS_recv_spin_us));
    }
    options.streams_per_peer = absl::GetFlag(FLAGS_streams_per_peer);
    if (absl::GetFlag(FLAGS_progress_mark)) options.progress = progress;
    absl::StatusOr<std::unique_ptr<GrpcTransport>> t =
        GrpcTransport::Create(&service, /*group=*/1, rank, addresses, options);
    if (!t.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str());
      return 1;
    }
    grpc_transport = *std::move(t);
    transport = grpc_transport.get();
  }
  RingAllReducer reducer(transport);

  int64_t max_bytes = 0;
  for (int64_t s : sizes) max_bytes = std::max(max_bytes, s);
  // Allocated and first touched once, reused for every size.
  std::vector<float> buf(max_bytes / sizeof(float), 0.0f);
  const float mine = static_cast<float>(rank + 1);
  const float want = static_cast<float>(k * (k + 1) / 2);
  int64_t step = 0;
  int status = 0;
  for (int64_t bytes : sizes) {
    const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
    const int warm = WarmupFor(bytes), iters = IterationsFor(bytes);
    std::vector<double> us;
    us.reserve(iters);
    absl::Span<float> v(buf.data(), n);
    for (int i = 0; i < warm + iters; ++i) {
      std::fill(v.begin(), v.end(), mine);
      int64_t count = 1;
      AllReduceOptions o;
      o.job = 1;
      o.step = step++;
      o.timeout = absl::Seconds(120);
      o.segment_bytes = absl::GetFlag(FLAGS_segment_bytes);
      o.direct_max_bytes = absl::GetFlag(FLAGS_direct_max_bytes);
      o.first_step_window_bytes = absl::GetFlag(FLAGS_first_step_window_bytes);
      const absl::Time t0 = absl::Now();
      absl::Status s = reducer.AllReduce(v, &count, o);
      const absl::Time t1 = absl::Now();
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: size %lld: %s\n", rank,
                     static_cast<long long>(bytes), s.ToString().c_str());
        return 1;
      }
      if (count != k) {
        std::fprintf(stderr, "rank %d: count %lld, expected %d\n", rank,
                     static_cast<long long>(count), k);
        return 1;
      }
      if (i >= warm) us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
    }
    for (int64_t j = 0; j < n; ++j) {
      if (v[j] != want) {
        std::fprintf(stderr, "rank %d: size %lld: element %lld is %g, expected %g\n",
                     rank, static_cast<long long>(bytes),
                     static_cast<long long>(j), v[j], want);
        status = 1;
        break;
      }
    }
    if (rank == 0) {
      const double med = Median(us);
      std::printf("RESULT %lld %d %.3f %.3f\n", static_cast<long long>(bytes),
                  iters, med, *std::min_element(us.begin(), us.end()));
      std::fflush(stdout);
    }
  }
  if (absl::GetFlag(FLAGS_stats)) {
    if (use_tcp) {
      std::fprintf(stderr, "rank %d: %lld messages sent, %lld of them partly through the backlog\n",
                   rank, static_cast<long long>(tcp_transport->messages_sent()),
                   static_cast<long long>(tcp_transport->messages_backlogged()));
    } else {
      std::fprintf(stderr, "rank %d: %lld messages received, %lld of them in several slices\n",
                   rank, static_cast<long long>(service.messages_delivered()),
                   static_cast<long long>(service.messages_fragmented()));
    }
  }
  if (use_tcp) {
    tcp_transport->Shutdown();
    tcp_transport.reset();
    hub.reset();
  } else {
    grpc_transport->Shutdown();
    grpc_transport.reset();
    service.Shutdown();
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }
  return status;
}

}  // namespace lockstep::allreduce_bench
