// Non-finite gradients (issue 10) on every combine path real jobs use, in
// one process over the real data planes on loopback: the ring over gRPC
// (PeerService servers) and over raw TCP (a TcpPeerHub per rank), with the
// direct exchange and the bandwidth-optimal ring forced; ps with S = 1 and 2
// shard servers over gRPC (PsService) and over the raw-TCP ps data plane;
// each with overlap off and on (64-byte buckets: the flags ride in the last
// bucket), and the ring with bf16 and fp16 on the wire; K = 2, 3 and 4.
//
// A rank's JobRunner is told to put a NaN in its local gradient at step 3
// (lockstep-worker --fault_nan_step). Asserted:
//   skip: every rank ends OK with one skipped step; every rank's report of
//     step 3 (and only of step 3) says the update was skipped and names the
//     injected rank(s), so every rank read the same flags in that step's
//     combine; the replicas are bit-identical at every step; the weights
//     after step 3 are those after step 2 (same hash: nothing applied); the
//     final weights match the single-process reference trainer run over the
//     same batches with step 3's update left out (within the tolerance of
//     the equivalence test, job_runner_test; bit-identical at K = 1), and
//     differ from the reference that applied it;
//   fail: every rank ends ABORTED with "non-finite gradient on rank R at
//     step 3", and no rank reported step 3.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/chunking.h"
#include "common/collective/ps_aggregator.h"
#include "common/data/sampler.h"
#include "common/grpcutil/grpc_ps_client.h"
#include "common/psnet/ps_tcp_client.h"
#include "common/psnet/ps_tcp_server.h"
#include "common/train/job_spec_convert.h"
#include "common/train/replica.h"
#include "gtest/gtest.h"
#include "server/ps/ps_service.h"
#include "worker/blobs_for_test.h"
#include "worker/combiner.h"
#include "worker/job_runner.h"
#include "worker/net/grpc_transport.h"
#include "worker/net/peer_service.h"
#include "common/net/data_auth.h"
#include "worker/net/tcp_transport.h"

namespace lockstep {
namespace {

constexpr int64_t kNanStep = 3;
constexpr int64_t kSteps = 7;

class FakeReporter : public JobReporter {
 public:
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& r) override {
    absl::MutexLock l(&mu_);
    reports_[r.step()][r.rank()] = r;
    return false;
  }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }
  std::map<int64_t, std::map<int, v1::ReportStepRequest>> reports() {
    absl::MutexLock l(&mu_);
    return reports_;
  }

 private:
  absl::Mutex mu_;
  std::map<int64_t, std::map<int, v1::ReportStepRequest>> reports_ ABSL_GUARDED_BY(mu_);
};

enum class Plane { kGrpc, kTcp };

struct Path {
  Plane plane;
  bool ps;
  AllReduceAlgorithm algo = AllReduceAlgorithm::kAuto;  // ring
  int shards = 1;                                       // ps
  bool overlap = false;
  std::string compression;  // ring: "", "bf16", "fp16"
};

std::string PathName(const Path& p, int k) {
  std::string s = p.plane == Plane::kGrpc ? "grpc_" : "tcp_";
  if (p.ps) {
    absl::StrAppend(&s, "ps_S", p.shards);
  } else {
    absl::StrAppend(&s, p.algo == AllReduceAlgorithm::kDirect ? "direct" : "ring");
  }
  absl::StrAppend(&s, "_K", k, p.overlap ? "_overlap" : "_serial");
  if (!p.compression.empty()) absl::StrAppend(&s, "_", p.compression);
  return s;
}

// One ps shard server: the shard registry behind a gRPC PsService and the
// raw-TCP ps data plane, both on OS-chosen loopback ports.
struct PsServer {
  PsServer() : service(&registry) {
    auto tcp = PsTcpServer::Start(&registry, "127.0.0.1", 0);
    CHECK_OK_OR_DIE(tcp.status());
    data_plane = *std::move(tcp);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    grpc_address = absl::StrCat("127.0.0.1:", port);
    tcp_address = absl::StrCat("127.0.0.1:", data_plane->port());
  }
  ~PsServer() {
    server->Shutdown();
    data_plane->Shutdown();
  }
  static void CHECK_OK_OR_DIE(const absl::Status& s) {
    if (!s.ok()) {
      ADD_FAILURE() << s;
      std::abort();
    }
  }
  PsShardRegistry registry{16};
  PsService service;
  std::unique_ptr<PsTcpServer> data_plane;
  std::unique_ptr<grpc::Server> server;
  std::string grpc_address, tcp_address;
};

// One ring rank's data plane endpoint: a PeerService on its own gRPC
// server, or a raw-TCP hub.
struct RingNode {
  explicit RingNode(Plane plane) {
    if (plane == Plane::kTcp) {
      auto h = TcpPeerHub::Start("127.0.0.1", 0);
      if (!h.ok()) {
        ADD_FAILURE() << h.status();
        std::abort();
      }
      hub = *std::move(h);
      address = absl::StrCat("127.0.0.1:", hub->port());
    } else {
      service = std::make_unique<PeerServiceImpl>();
      grpc::ServerBuilder b;
      int port = 0;
      b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
      b.RegisterService(service.get());
      server = b.BuildAndStart();
      address = absl::StrCat("127.0.0.1:", port);
    }
  }
  ~RingNode() {
    if (server != nullptr) server->Shutdown();
  }
  std::unique_ptr<TcpPeerHub> hub;
  std::unique_ptr<PeerServiceImpl> service;  // outlives server
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

v1::JobSpec Spec(const Path& p, int k, const std::string& policy) {
  v1::JobSpec spec;
  spec.set_model("mlp:16,8");
  spec.set_sync_mode(p.ps ? v1::PS : v1::RING);
  spec.set_num_workers(k);
  spec.set_global_batch(29);  // uneven slices for K = 2, 3, 4
  spec.set_steps(kSteps);
  spec.set_seed(5);
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(0.05f);
  spec.set_ps_shards(p.shards);
  spec.set_bucket_bytes(p.overlap ? 64 : -1);
  spec.set_compression(p.compression);
  spec.set_on_nonfinite(policy);
  return spec;
}

struct RunResult {
  std::vector<absl::StatusOr<JobOutcome>> outcome;
  std::vector<std::vector<float>> params;
};

// Runs the job on K ranks over path p; ranks in `nan_ranks` get a NaN at
// kNanStep (or `value`; in their local loss sum with `in_loss`).
RunResult RunJob(const Path& p, const v1::JobSpec& spec, const std::vector<int>& nan_ranks,
                 const TrainTest& data, FakeReporter* reporter,
                 float value = std::numeric_limits<float>::quiet_NaN(), bool in_loss = false) {
  const int k = spec.num_workers();
  RunResult result;
  result.outcome.resize(k, absl::UnknownError("not run"));
  result.params.resize(k);
  std::vector<std::unique_ptr<RingNode>> nodes;
  std::vector<std::unique_ptr<PsServer>> shards;
  std::vector<std::string> addresses;
  if (p.ps) {
    for (int s = 0; s < p.shards; ++s) shards.push_back(std::make_unique<PsServer>());
  } else {
    for (int r = 0; r < k; ++r) {
      nodes.push_back(std::make_unique<RingNode>(p.plane));
      addresses.push_back(nodes.back()->address);
    }
  }
  const uint64_t group = 77;
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      // Rank r's own transport or shard clients (one set per buffer length:
      // the shape-agreement round before step 0 is shorter).
      std::unique_ptr<Transport> transport;
      std::map<int64_t, std::vector<std::unique_ptr<PsClient>>> clients;
      std::unique_ptr<GradientCombiner> combiner;
      if (p.ps) {
        combiner = std::make_unique<PsCombiner>(
            [&](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
              auto& mine = clients[n];
              if (mine.empty()) {
                for (int s = 0; s < p.shards; ++s) {
                  const int64_t len = ShardBounds(n, p.shards, s).size();
                  if (p.plane == Plane::kTcp) {
                    // The job's data-plane secret, registered for both of
                    // its keys as a worker's DataAddress does.
                    const std::string secret(dataauth::kSecretBytes, 'n');
                    for (uint64_t key : {group, ShapeAgreementJob(group)}) {
                      PsServer::CHECK_OK_OR_DIE(shards[s]->data_plane->RegisterSecret(key, secret));
                    }
                    PsTcpClientOptions to;
                    to.secret = secret;
                    mine.push_back(
                        std::make_unique<PsTcpClient>(shards[s]->tcp_address, s, k, len, to));
                  } else {
                    mine.push_back(std::make_unique<GrpcPsClient>(
                        grpc::CreateChannel(shards[s]->grpc_address,
                                            grpc::InsecureChannelCredentials()),
                        shards[s]->grpc_address, s, k, len));
                  }
                }
              }
              std::vector<PsClient*> ptrs;
              for (auto& c : mine) ptrs.push_back(c.get());
              return ptrs;
            },
            r);
      } else {
        if (p.plane == Plane::kTcp) {
          TcpTransportOptions to;
          to.secret = std::string(dataauth::kSecretBytes, 'n');  // the job's data-plane secret
          auto t = TcpTransport::Create(nodes[r]->hub.get(), group, r, addresses, to);
          if (!t.ok()) {
            result.outcome[r] = t.status();
            return;
          }
          transport = *std::move(t);
        } else {
          auto t = GrpcTransport::Create(nodes[r]->service.get(), group, r, addresses);
          if (!t.ok()) {
            result.outcome[r] = t.status();
            return;
          }
          transport = *std::move(t);
        }
        combiner = std::make_unique<RingCombiner>(transport.get(), p.algo);
      }
      JobRunnerOptions o;
      o.job_id = 7;
      o.group_key = group;
      o.spec = spec;
      o.rank = r;
      o.world = k;
      o.worker_id = absl::StrCat("w-", r + 1);
      o.combine_timeout = absl::Seconds(20);
      for (int q : nan_ranks) {
        if (q == r) o.nan_at_step = kNanStep;
      }
      o.nan_value = value;
      o.nan_in_loss = in_loss;
      JobRunner runner(o, &data, combiner.get(), reporter);
      result.outcome[r] = runner.Run();
      if (runner.replica() != nullptr) {
        auto w = runner.replica()->params();
        result.params[r].assign(w.begin(), w.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

// The single-process reference over the same global batches, leaving out
// step `skip`'s update (-1: none).
std::vector<float> Reference(const v1::JobSpec& spec, const Dataset& train, int64_t skip) {
  auto ts = ToTrainSpec(spec);
  EXPECT_TRUE(ts.ok()) << ts.status();
  auto rep = Replica::Create(*ts, train.dim, train.num_classes);
  EXPECT_TRUE(rep.ok()) << rep.status();
  GlobalBatchSampler sampler(train.num_examples, ts->global_batch, ts->seed);
  for (int64_t step = 0; step < TotalSteps(*ts, train.num_examples); ++step) {
    BatchStats s = (*rep)->ComputeGradSum(train, sampler.Batch(step));
    if (step != skip) (*rep)->Apply(step, s.count);
  }
  auto w = (*rep)->params();
  return std::vector<float>(w.begin(), w.end());
}

// Within the equivalence test's tolerance (job_runner_test): relative 1e-5
// with float32 on the wire, 2e-2 with 16 bits. Returns the parameters off.
int CountOff(const std::vector<float>& got, const std::vector<float>& want,
             const std::string& compression) {
  const float rel = compression.empty() ? 1e-5f : 2e-2f;
  const float floor = compression.empty() ? 1e-2f : 5e-1f;
  int off = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    off += std::fabs(got[i] - want[i]) > rel * std::max(std::fabs(want[i]), floor);
  }
  return off;
}

std::vector<Path> Paths() {
  std::vector<Path> paths;
  for (Plane plane : {Plane::kGrpc, Plane::kTcp}) {
    for (bool overlap : {false, true}) {
      for (AllReduceAlgorithm algo : {AllReduceAlgorithm::kDirect, AllReduceAlgorithm::kRing}) {
        for (std::string c : {"", "bf16", "fp16"}) {
          Path p{plane, false, algo, 1, overlap, c};
          paths.push_back(p);
        }
      }
      for (int shards : {1, 2}) paths.push_back(Path{plane, true, AllReduceAlgorithm::kAuto, shards, overlap, ""});
    }
  }
  return paths;
}

struct Case {
  Path path;
  int k;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int k : {2, 3, 4}) {
    for (const Path& p : Paths()) cases.push_back({p, k});
  }
  return cases;
}

// The ranks that get a NaN: the last rank; at K = 4 also rank 1 (two
// ranks flagged in one step).
std::vector<int> NanRanks(int k) {
  if (k == 4) return {1, 3};
  return {k - 1};
}

std::string Expected(int k) {
  return k == 4 ? absl::StrCat("non-finite gradient on ranks 1 and 3 at step ", kNanStep)
                : absl::StrCat("non-finite gradient on rank ", k - 1, " at step ", kNanStep);
}

class NonFiniteTest : public ::testing::TestWithParam<Case> {};

TEST_P(NonFiniteTest, SkipLeavesOutTheUpdateOnEveryReplica) {
  const Path& p = GetParam().path;
  const int k = GetParam().k;
  const TrainTest data = Blobs(200, 0);
  FakeReporter reporter;
  const absl::Time t0 = absl::Now();
  RunResult run = RunJob(p, Spec(p, k, "skip"), NanRanks(k), data, &reporter);
  for (int r = 0; r < k; ++r) {
    ASSERT_TRUE(run.outcome[r].ok()) << "rank " << r << ": " << run.outcome[r].status();
    EXPECT_EQ(run.outcome[r]->skipped_steps, 1) << "rank " << r;
    EXPECT_EQ(run.outcome[r]->steps, kSteps);
  }
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30));
  // Every rank read the same flags in step 3's combine, and only there.
  const auto reports = reporter.reports();
  ASSERT_EQ(static_cast<int64_t>(reports.size()), kSteps);
  const std::vector<int> want_ranks = NanRanks(k);
  for (const auto& [step, by_rank] : reports) {
    ASSERT_EQ(static_cast<int>(by_rank.size()), k) << "step " << step;
    for (const auto& [rank, rep] : by_rank) {
      EXPECT_EQ(rep.update_skipped(), step == kNanStep) << "step " << step << " rank " << rank;
      const std::vector<int> got(rep.nonfinite_ranks().begin(), rep.nonfinite_ranks().end());
      EXPECT_EQ(got, step == kNanStep ? want_ranks : std::vector<int>{})
          << "step " << step << " rank " << rank;
      // Replicas bit-identical at every step.
      EXPECT_EQ(rep.weights_hash(), by_rank.at(0).weights_hash()) << "step " << step;
    }
  }
  // Nothing was applied at step 3: its weights are step 2's.
  EXPECT_EQ(reports.at(kNanStep).at(0).weights_hash(), reports.at(kNanStep - 1).at(0).weights_hash());
  EXPECT_NE(reports.at(kNanStep + 1).at(0).weights_hash(), reports.at(kNanStep).at(0).weights_hash());
  for (int r = 1; r < k; ++r) {
    ASSERT_EQ(run.params[r].size(), run.params[0].size());
    EXPECT_EQ(std::memcmp(run.params[r].data(), run.params[0].data(),
                          run.params[0].size() * sizeof(float)),
              0)
        << "rank " << r;
  }
  // The final weights: the reference without step 3's update.
  const v1::JobSpec spec = Spec(p, k, "skip");
  const std::vector<float> skipped = Reference(spec, data.train, kNanStep);
  ASSERT_EQ(skipped.size(), run.params[0].size());
  EXPECT_EQ(CountOff(run.params[0], skipped, p.compression), 0);
  if (p.compression.empty()) {
    // ... and not the reference that applied it (the test can fail).
    const std::vector<float> applied = Reference(spec, data.train, -1);
    EXPECT_GT(CountOff(run.params[0], applied, p.compression), 0);
  }
}

TEST_P(NonFiniteTest, FailEndsEveryRankNamingTheRankAndStep) {
  const Path& p = GetParam().path;
  const int k = GetParam().k;
  const TrainTest data = Blobs(200, 0);
  FakeReporter reporter;
  const absl::Time t0 = absl::Now();
  RunResult run = RunJob(p, Spec(p, k, ""), NanRanks(k), data, &reporter);  // "" = fail, the default
  for (int r = 0; r < k; ++r) {
    ASSERT_FALSE(run.outcome[r].ok()) << "rank " << r;
    EXPECT_EQ(run.outcome[r].status().code(), absl::StatusCode::kAborted);
    EXPECT_EQ(run.outcome[r].status().message(),
              absl::StrCat(Expected(k), " (spec.on_nonfinite: fail)"));
  }
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30));
  for (const auto& [step, by_rank] : reporter.reports()) EXPECT_LT(step, kNanStep);
}

INSTANTIATE_TEST_SUITE_P(EveryCombinePath, NonFiniteTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           return PathName(info.param.path, info.param.k);
                         });

// Finite local values whose SUM is not finite, and a non-finite loss with a
// finite gradient, on the ring over gRPC and raw TCP and on ps over gRPC and
// raw TCP, without and with overlap, K = 2 and 3. Closed form: ranks 0 and 1
// each put 3e38 (finite, < FLT_MAX 3.4e38) in their first gradient element
// at step 3, so the combined element is 6e38 = +inf whatever the other
// ranks add; no rank's flag is set, and every rank must find it in the
// combined buffer.
struct SumCase {
  Path path;
  int k;
};

std::vector<SumCase> SumCases() {
  std::vector<SumCase> cases;
  for (int k : {2, 3}) {
    for (Plane plane : {Plane::kGrpc, Plane::kTcp}) {
      for (bool overlap : {false, true}) {
        cases.push_back({Path{plane, false, AllReduceAlgorithm::kAuto, 1, overlap, ""}, k});
        cases.push_back({Path{plane, true, AllReduceAlgorithm::kAuto, 1, overlap, ""}, k});
      }
    }
  }
  return cases;
}

class NonFiniteSumTest : public ::testing::TestWithParam<SumCase> {};

// Skip asserted as for a NaN: one skipped step (3) on every rank, no rank
// named, weights after step 3 = after step 2, replicas bit-identical, and
// the final weights those of the reference without step 3's update.
void ExpectSkippedWithRanks(const Path& p, int k, const RunResult& run, FakeReporter& reporter,
                            const TrainTest& data, const std::vector<int>& want_ranks) {
  for (int r = 0; r < k; ++r) {
    ASSERT_TRUE(run.outcome[r].ok()) << "rank " << r << ": " << run.outcome[r].status();
    EXPECT_EQ(run.outcome[r]->skipped_steps, 1) << "rank " << r;
  }
  const auto reports = reporter.reports();
  ASSERT_EQ(static_cast<int64_t>(reports.size()), kSteps);
  for (const auto& [step, by_rank] : reports) {
    ASSERT_EQ(static_cast<int>(by_rank.size()), k) << "step " << step;
    for (const auto& [rank, rep] : by_rank) {
      EXPECT_EQ(rep.update_skipped(), step == kNanStep) << "step " << step << " rank " << rank;
      const std::vector<int> got(rep.nonfinite_ranks().begin(), rep.nonfinite_ranks().end());
      EXPECT_EQ(got, step == kNanStep ? want_ranks : std::vector<int>{})
          << "step " << step << " rank " << rank;
      EXPECT_EQ(rep.weights_hash(), by_rank.at(0).weights_hash()) << "step " << step;
    }
  }
  EXPECT_EQ(reports.at(kNanStep).at(0).weights_hash(),
            reports.at(kNanStep - 1).at(0).weights_hash());
  for (int r = 1; r < k; ++r) {
    ASSERT_EQ(run.params[r].size(), run.params[0].size());
    EXPECT_EQ(std::memcmp(run.params[r].data(), run.params[0].data(),
                          run.params[0].size() * sizeof(float)),
              0)
        << "rank " << r;
  }
  const std::vector<float> skipped = Reference(Spec(p, k, "skip"), data.train, kNanStep);
  ASSERT_EQ(skipped.size(), run.params[0].size());
  EXPECT_EQ(CountOff(run.params[0], skipped, p.compression), 0);
}

TEST_P(NonFiniteSumTest, AnOverflowingSumIsSkippedOnEveryReplica) {
  const Path& p = GetParam().path;
  const int k = GetParam().k;
  const TrainTest data = Blobs(200, 0);
  FakeReporter reporter;
  RunResult run = RunJob(p, Spec(p, k, "skip"), {0, 1}, data, &reporter, 3e38f);
  ExpectSkippedWithRanks(p, k, run, reporter, data, {});
}

TEST_P(NonFiniteSumTest, AnOverflowingSumFailsNamingTheStep) {
  const Path& p = GetParam().path;
  const int k = GetParam().k;
  const TrainTest data = Blobs(200, 0);
  FakeReporter reporter;
  RunResult run = RunJob(p, Spec(p, k, "fail"), {0, 1}, data, &reporter, 3e38f);
  for (int r = 0; r < k; ++r) {
    ASSERT_FALSE(run.outcome[r].ok()) << "rank " << r;
    EXPECT_EQ(run.outcome[r].status().code(), absl::StatusCode::kAborted);
    EXPECT_EQ(run.outcome[r].status().message(),
              "non-finite sum at step 3: every rank's gradient and loss were finite, the sum "
              "overflowed (spec.on_nonfinite: fail)");
  }
  for (const auto& [step, by_rank] : reporter.reports()) EXPECT_LT(step, kNanStep);
}

TEST_P(NonFiniteSumTest, ANonFiniteLossWithAFiniteGradientIsFlagged) {
  const Path& p = GetParam().path;
  const int k = GetParam().k;
  const TrainTest data = Blobs(200, 0);
  FakeReporter skip_reporter;
  RunResult skipped = RunJob(p, Spec(p, k, "skip"), {1}, data, &skip_reporter,
                             std::numeric_limits<float>::infinity(), /*in_loss=*/true);
  ExpectSkippedWithRanks(p, k, skipped, skip_reporter, data, {1});
  FakeReporter fail_reporter;
  RunResult failed = RunJob(p, Spec(p, k, "fail"), {1}, data, &fail_reporter,
                            std::numeric_limits<float>::quiet_NaN(), /*in_loss=*/true);
  for (int r = 0; r < k; ++r) {
    ASSERT_FALSE(failed.outcome[r].ok()) << "rank " << r;
    EXPECT_EQ(failed.outcome[r].status().message(),
              "non-finite loss on rank 1 at step 3 (spec.on_nonfinite: fail)");
  }
}

INSTANTIATE_TEST_SUITE_P(RingAndPs, NonFiniteSumTest, ::testing::ValuesIn(SumCases()),
                         [](const auto& info) {
                           return PathName(info.param.path, info.param.k);
                         });

// A finite local value that overflows the fp16 wire (> 65504) alone: one
// rank puts 1e5 in its gradient; float32 holds it, fp16 does not, so the
// combined element is +inf on every rank (ring over raw TCP, K = 2).
TEST(NonFiniteWireTest, AValueThatOverflowsTheFp16WireIsSkipped) {
  const TrainTest data = Blobs(200, 0);
  for (bool overlap : {false, true}) {
    const Path p{Plane::kTcp, false, AllReduceAlgorithm::kAuto, 1, overlap, "fp16"};
    FakeReporter reporter;
    RunResult run = RunJob(p, Spec(p, 2, "skip"), {1}, data, &reporter, 1e5f);
    ExpectSkippedWithRanks(p, 2, run, reporter, data, {});
    // ... and over a float32 wire the same value is applied (not skipped).
    const Path f32{Plane::kTcp, false, AllReduceAlgorithm::kAuto, 1, overlap, ""};
    FakeReporter f32_reporter;
    RunResult applied = RunJob(f32, Spec(f32, 2, "skip"), {1}, data, &f32_reporter, 1e5f);
    const auto reports = f32_reporter.reports();
    ASSERT_TRUE(reports.count(kNanStep) && reports.at(kNanStep).count(0));
    EXPECT_FALSE(reports.at(kNanStep).at(0).update_skipped());
  }
}

// K = 1: nothing to combine; the flag is this rank's own, and the weights
// are bit-identical to the reference trainer without step 3's update.
TEST(NonFiniteSingleWorkerTest, SkipIsBitIdenticalToTheReferenceWithoutThatUpdate) {
  const TrainTest data = Blobs(200, 0);
  const Path p{Plane::kTcp, false, AllReduceAlgorithm::kAuto, 1, false, ""};
  FakeReporter reporter;
  RunResult run = RunJob(p, Spec(p, 1, "skip"), {0}, data, &reporter);
  ASSERT_TRUE(run.outcome[0].ok()) << run.outcome[0].status();
  EXPECT_EQ(run.outcome[0]->skipped_steps, 1);
  const std::vector<float> want = Reference(Spec(p, 1, "skip"), data.train, kNanStep);
  ASSERT_EQ(want.size(), run.params[0].size());
  EXPECT_EQ(std::memcmp(want.data(), run.params[0].data(), want.size() * sizeof(float)), 0);
  // No fault: no skip, and the reference with every update.
  FakeReporter clean_reporter;
  RunResult clean = RunJob(p, Spec(p, 1, "skip"), {}, data, &clean_reporter);
  ASSERT_TRUE(clean.outcome[0].ok()) << clean.outcome[0].status();
  EXPECT_EQ(clean.outcome[0]->skipped_steps, 0);
  const std::vector<float> all = Reference(Spec(p, 1, "skip"), data.train, -1);
  EXPECT_EQ(std::memcmp(all.data(), clean.params[0].data(), all.size() * sizeof(float)), 0);
}

// A real non-finite gradient, not an injected one: a learning rate that
// makes the weights blow up yields an infinite/NaN gradient on its own;
// under fail the job stops at that step instead of training on NaN.
TEST(NonFiniteSingleWorkerTest, ADivergingRunIsCaughtWithoutInjection) {
  const TrainTest data = Blobs(200, 0);
  Path p{Plane::kTcp, false, AllReduceAlgorithm::kAuto, 1, false, ""};
  v1::JobSpec spec = Spec(p, 1, "");
  spec.mutable_lr()->set_base_lr(1e30f);
  spec.set_steps(50);
  FakeReporter reporter;
  RunResult run = RunJob(p, spec, {}, data, &reporter);
  const absl::StatusOr<JobOutcome>& out = run.outcome[0];
  ASSERT_FALSE(out.ok()) << "50 steps at lr 1e30 stayed finite";
  EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted) << out.status();
  EXPECT_NE(out.status().message().find("non-finite gradient on rank 0 at step "),
            std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace lockstep
