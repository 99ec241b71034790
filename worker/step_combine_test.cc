// The bucketed combine: the bucket plan, the model's backward in pieces,
// the GradientCombiner bucket API (ring forced to each algorithm, ps with
// S shards, float32 and 16-bit wires) and StepCombiner's overlap, with
// K = 1..8 ranks as threads over in-process transports and awkward
// lengths and bucket sizes.
#include "worker/step_combine.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/inproc_transport.h"
#include "common/collective/ps_aggregator.h"
#include "gtest/gtest.h"
#include "worker/blobs_for_test.h"

namespace lockstep {
namespace {

using Plan = std::vector<Range>;

TEST(PlanGradBucketsTest, GroupsPiecesFromTheEndUpToTheBucketSize) {
  // Pieces of a 20-float buffer: [19,20) [15,19) [10,15) [2,10) [0,2).
  const std::vector<int64_t> starts = {19, 15, 10, 2, 0};
  EXPECT_EQ(PlanGradBuckets(20, starts, 0), (Plan{{0, 20}}));
  EXPECT_EQ(PlanGradBuckets(20, starts, -1), (Plan{{0, 20}}));
  EXPECT_EQ(PlanGradBuckets(20, starts, 5), (Plan{{15, 20}, {10, 15}, {2, 10}, {0, 2}}));
  EXPECT_EQ(PlanGradBuckets(20, starts, 10), (Plan{{10, 20}, {0, 10}}));
  EXPECT_EQ(PlanGradBuckets(20, starts, 1), (Plan{{19, 20}, {15, 19}, {10, 15}, {2, 10}, {0, 2}}));
  EXPECT_EQ(PlanGradBuckets(20, starts, 100), (Plan{{0, 20}}));
  // A missing last piece down to 0 is implied.
  EXPECT_EQ(PlanGradBuckets(20, {19, 15}, 5), (Plan{{15, 20}, {0, 15}}));
  EXPECT_EQ(PlanGradBuckets(0, {}, 5), (Plan{{0, 0}}));
}

TEST(ModelPiecesTest, TheMainJobsMlpIsFinishedFromTheEndInPanels) {
  auto model = CreateModel("mlp:256", 784, 10);
  ASSERT_TRUE(model.ok());
  // W0 [0, 200704) b0 [200704, 200960) W1 [200960, 203520) b1 [203520, 203530).
  EXPECT_EQ((*model)->GradPieceStarts(0),
            (std::vector<int64_t>{203520, 200960, 200704, 0}));
  // 64 Ki floats: W0's 784 rows of 256 in 4 panels of 196 rows (50176).
  EXPECT_EQ((*model)->GradPieceStarts(65536),
            (std::vector<int64_t>{203520, 200960, 200704, 150528, 100352, 50176, 0}));
  // With the loss slot (203530) first, 256 KiB buckets: 4 buckets.
  std::vector<int64_t> starts = {203530};
  for (int64_t s : (*model)->GradPieceStarts(65536)) starts.push_back(s);
  EXPECT_EQ(PlanGradBuckets(203531, starts, 65536),
            (Plan{{150528, 203531}, {100352, 150528}, {50176, 100352}, {0, 50176}}));
}

class Recorder : public GradReadyListener {
 public:
  void LossReady(double loss) override { events.push_back(-1), loss_sum = loss; }
  void ReadyFrom(int64_t begin) override { events.push_back(begin); }
  std::vector<int64_t> events;
  double loss_sum = 0;
};

TEST(ModelPiecesTest, BackwardInPanelsTellsEachPieceAndMatchesTheWholeGemm) {
  TrainTest data = Blobs(40, 0);
  for (int64_t panel : {int64_t{1}, int64_t{7}, int64_t{40}, int64_t{1000}}) {
    SCOPED_TRACE(panel);
    auto model = CreateModel("mlp:16,8", 6, 3);
    ASSERT_TRUE(model.ok());
    Model& m = **model;
    std::vector<float> params(m.num_params());
    m.Init(3, absl::MakeSpan(params));
    std::vector<float> whole(m.num_params()), pieces(m.num_params(), -7.0f);
    BatchStats a = m.LossAndGradSum(params, data.train.x.data(), data.train.y.data(), 40,
                                    absl::MakeSpan(whole));
    Recorder rec;
    BatchStats b = m.LossAndGradSum(params, data.train.x.data(), data.train.y.data(), 40,
                                    absl::MakeSpan(pieces), panel, &rec);
    EXPECT_EQ(a.loss_sum, b.loss_sum);
    EXPECT_EQ(rec.loss_sum, a.loss_sum);
    std::vector<int64_t> want = {-1};
    for (int64_t s : m.GradPieceStarts(panel)) want.push_back(s);
    EXPECT_EQ(rec.events, want);
    for (int64_t i = 0; i < m.num_params(); ++i) {
      EXPECT_NEAR(pieces[i], whole[i], 1e-5f * std::max(1.0f, std::fabs(whole[i]))) << i;
    }
  }
  // No examples: the loss, then everything at once (zeros).
  auto model = CreateModel("mlp:16,8", 6, 3);
  std::vector<float> params((*model)->num_params()), g((*model)->num_params(), 5.0f);
  Recorder rec;
  (*model)->LossAndGradSum(params, nullptr, nullptr, 0, absl::MakeSpan(g), 7, &rec);
  EXPECT_EQ(rec.events, (std::vector<int64_t>{-1, 0}));
  for (float v : g) EXPECT_EQ(v, 0.0f);
}

// Runs fn(rank) on K threads.
template <typename F>
void OnRanks(int k, F fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

// In-process ps shards shared by all ranks, one set per buffer length.
class SharedShards {
 public:
  SharedShards(int k, int shards) : k_(k), shards_(shards) {}
  PsCombiner::Connect connect() {
    return [this](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
      absl::MutexLock l(&mu_);
      auto& clients = by_len_[n];
      if (clients.empty()) clients = MakeInProcessPsClients(k_, shards_, n);
      std::vector<PsClient*> ptrs;
      for (auto& c : clients) ptrs.push_back(c.get());
      return ptrs;
    };
  }

 private:
  const int k_, shards_;
  absl::Mutex mu_;
  std::map<int64_t, std::vector<std::unique_ptr<PsClient>>> by_len_ ABSL_GUARDED_BY(mu_);
};

// A combine path: ring with an algorithm, or ps with S shards.
struct Path {
  std::string name;
  bool ps = false;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
  int shards = 1;
};

std::vector<Path> Paths() {
  return {{"ring_auto", false, AllReduceAlgorithm::kAuto, 0},
          {"ring_forced", false, AllReduceAlgorithm::kRing, 0},
          {"direct", false, AllReduceAlgorithm::kDirect, 0},
          {"ps_S1", true, AllReduceAlgorithm::kAuto, 1},
          {"ps_S2", true, AllReduceAlgorithm::kAuto, 2},
          {"ps_S3", true, AllReduceAlgorithm::kAuto, 3}};
}

// K combiners for a path (the hub and shards live in `keep`).
struct Combiners {
  std::unique_ptr<InProcessHub> hub;
  std::unique_ptr<SharedShards> shards;
  std::vector<std::unique_ptr<GradientCombiner>> of_rank;
};

Combiners MakeCombiners(const Path& p, int k) {
  Combiners c;
  if (p.ps) {
    c.shards = std::make_unique<SharedShards>(k, p.shards);
    for (int r = 0; r < k; ++r) {
      c.of_rank.push_back(std::make_unique<PsCombiner>(c.shards->connect(), r));
    }
  } else {
    c.hub = std::make_unique<InProcessHub>(k);
    for (int r = 0; r < k; ++r) {
      c.of_rank.push_back(std::make_unique<RingCombiner>(c.hub->endpoint(r), p.algorithm));
    }
  }
  return c;
}

// The bucket API directly: small integers, so every sum (and every 16-bit
// partial sum) is exact and the expected result is known in closed form.
TEST(BucketApiTest, EveryBucketSumsExactlyOnEveryRankWithAwkwardSizes) {
  for (const Path& path : Paths()) {
    for (int k = 1; k <= 8; ++k) {
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{13}, int64_t{301}}) {
        for (int64_t bucket : {int64_t{1}, int64_t{3}, int64_t{64}}) {
          for (WireFormat wire : {WireFormat::kFloat32, WireFormat::kBf16, WireFormat::kFp16}) {
            if (path.ps && wire != WireFormat::kFloat32) continue;
            SCOPED_TRACE(absl::StrCat(path.name, " K=", k, " n=", n, " bucket=", bucket,
                                      " wire=", WireFormatName(wire)));
            Combiners c = MakeCombiners(path, k);
            std::vector<std::vector<float>> buf(k, std::vector<float>(n));
            std::vector<int64_t> counts(k);
            std::vector<absl::Status> status(k);
            std::vector<Plan> plans(k);
            // Pieces of odd sizes: every 4th position, from the end.
            std::vector<int64_t> starts;
            for (int64_t s = n - 1; s > 0; s -= 4) starts.push_back(s);
            OnRanks(k, [&](int r) {
              for (int64_t i = 0; i < n; ++i) buf[r][i] = static_cast<float>((i * 7 + r * 3) % 15) - 7;
              auto plan = c.of_rank[r]->PlanBuckets(n, starts, bucket);
              if (!plan.ok()) {
                status[r] = plan.status();
                return;
              }
              plans[r] = *plan;
              int64_t count = r + 1;
              double wait = 0;
              for (int b = 0; b < static_cast<int>(plan->size()); ++b) {
                BucketCall call;
                call.job = 3;
                call.step = 9;
                call.bucket = b;
                call.num_buckets = static_cast<int>(plan->size());
                call.range = (*plan)[b];
                call.buffer_size = n;
                call.with_count = b == 0;
                call.wire = wire;
                call.deadline = absl::Now() + absl::Seconds(20);
                int64_t cnt = r + 1;
                status[r] = c.of_rank[r]->CombineBucket(
                    call, absl::MakeSpan(buf[r]).subspan(call.range.begin, call.range.size()),
                    &cnt, &wait);
                if (!status[r].ok()) return;
                if (b == 0) count = cnt;
              }
              counts[r] = count;
            });
            for (int r = 0; r < k; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
            // The plan tiles [0, n) from the end, the same on every rank.
            ASSERT_FALSE(plans[0].empty());
            EXPECT_EQ(plans[0].front().end, n);
            EXPECT_EQ(plans[0].back().begin, 0);
            for (size_t b = 1; b < plans[0].size(); ++b) {
              EXPECT_EQ(plans[0][b].end, plans[0][b - 1].begin);
            }
            if (path.ps && k > 0) {
              EXPECT_EQ(static_cast<int>(plans[0].size()), path.shards);
            }
            for (int r = 0; r < k; ++r) {
              EXPECT_EQ(plans[r], plans[0]);
              EXPECT_EQ(counts[r], k * (k + 1) / 2);
              for (int64_t i = 0; i < n; ++i) {
                float want = 0;
                for (int q = 0; q < k; ++q) want += static_cast<float>((i * 7 + q * 3) % 15) - 7;
                ASSERT_EQ(buf[r][i], want) << "rank " << r << " element " << i;
              }
            }
          }
        }
      }
    }
  }
}

// Rounded sums differ between ranks unless the all-gather carries the
// rounded value to everyone, the owner included: non-integers on a 16-bit
// wire end bit-identical on every rank.
TEST(BucketApiTest, SixteenBitWiresLeaveEveryRankWithTheSameFloat32Sums) {
  for (WireFormat wire : {WireFormat::kBf16, WireFormat::kFp16}) {
    for (AllReduceAlgorithm algo : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kDirect}) {
      for (int k : {2, 3, 5, 8}) {
        SCOPED_TRACE(absl::StrCat(WireFormatName(wire), " K=", k,
                                  algo == AllReduceAlgorithm::kRing ? " ring" : " direct"));
        const int64_t n = 1001;
        InProcessHub hub(k);
        std::vector<std::vector<float>> buf(k, std::vector<float>(n));
        std::vector<absl::Status> status(k);
        OnRanks(k, [&](int r) {
          SplitMix64 rng(100 + r);
          for (float& v : buf[r]) v = rng.NextFloat() * 2 - 1;
          RingCombiner combiner(hub.endpoint(r), algo);
          BucketCall call;
          call.job = 1;
          call.range = Range{0, n};
          call.buffer_size = n;
          call.wire = wire;
          call.deadline = absl::Now() + absl::Seconds(20);
          int64_t count = 1;
          status[r] = combiner.CombineBucket(call, absl::MakeSpan(buf[r]), &count, nullptr);
        });
        std::vector<float> exact(n, 0.0f);
        for (int r = 0; r < k; ++r) {
          SplitMix64 rng(100 + r);
          for (float& v : exact) v += rng.NextFloat() * 2 - 1;
        }
        for (int r = 0; r < k; ++r) {
          ASSERT_TRUE(status[r].ok()) << status[r];
          ASSERT_EQ(std::memcmp(buf[r].data(), buf[0].data(), n * sizeof(float)), 0) << r;
        }
        // Stated tolerance: K hops of half a 16-bit ulp of values below K.
        const float ulp = wire == WireFormat::kBf16 ? std::ldexp(1.0f, -8) : std::ldexp(1.0f, -11);
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_NEAR(buf[0][i], exact[i], k * k * ulp) << i;
        }
      }
    }
  }
}

// StepCombiner with real replicas: K ranks each compute their slice's
// gradient and the overlapped combine gives every rank the same bits,
// within rounding of the sum of the K separately computed gradients.
struct StepCase {
  int64_t bucket_bytes;
  WireFormat wire;
};

TEST(StepCombinerTest, OverlappedBucketsGiveEveryRankTheSumOfTheSlices) {
  TrainTest data = Blobs(200, 0);
  TrainSpec spec;
  spec.model = "mlp:16,8";
  spec.global_batch = 29;
  spec.seed = 4;
  const std::vector<StepCase> cases = {{-1, WireFormat::kFloat32}, {0, WireFormat::kFloat32},
                                       {4, WireFormat::kFloat32},  {44, WireFormat::kFloat32},
                                       {200, WireFormat::kBf16},   {44, WireFormat::kFp16}};
  for (const Path& path : Paths()) {
    for (int k = 1; k <= 8; ++k) {
      for (const StepCase& sc : cases) {
        if (path.ps && sc.wire != WireFormat::kFloat32) continue;
        for (int64_t batch : {int64_t{29}, int64_t{5}}) {  // 5 over 8: empty slices
          if (batch < k && batch != 5) continue;
          SCOPED_TRACE(absl::StrCat(path.name, " K=", k, " bucket_bytes=", sc.bucket_bytes,
                                    " wire=", WireFormatName(sc.wire), " batch=", batch));
          Combiners c = MakeCombiners(path, k);
          std::vector<std::unique_ptr<Replica>> reps;
          for (int r = 0; r < k; ++r) {
            auto rep = Replica::Create(spec, 6, 3);
            ASSERT_TRUE(rep.ok()) << rep.status();
            reps.push_back(*std::move(rep));
          }
          const int64_t n = reps[0]->num_params() + 1;
          // Each rank's slice of examples [7, 7 + batch), and its plain
          // gradient (with the loss) computed on its own.
          std::vector<std::vector<int64_t>> slice(k);
          std::vector<float> want(n, 0.0f);
          for (int r = 0; r < k; ++r) {
            const Range b = ChunkBounds(batch, k, r);
            for (int64_t i = b.begin; i < b.end; ++i) slice[r].push_back(7 + i);
            auto solo = Replica::Create(spec, 6, 3);
            (*solo)->ComputeGradSum(data.train, slice[r]);
            auto g = (*solo)->combine_buffer();
            for (int64_t i = 0; i < n; ++i) want[i] += g[i];
          }
          std::vector<absl::Status> status(k);
          std::vector<int64_t> counts(k);
          std::vector<CombineTiming> timing(k);
          std::vector<Plan> plans(k);
          CombineConfig config;
          config.bucket_bytes = sc.bucket_bytes;
          config.wire = sc.wire;
          OnRanks(k, [&](int r) {
            StepCombiner step(c.of_rank[r].get(), config, k);
            EXPECT_EQ(step.overlapped(), k > 1 && sc.bucket_bytes != -1);
            // Two steps: the plan is made once and reused.
            for (int64_t s = 0; s < 2 && status[r].ok(); ++s) {
              BatchStats local;
              status[r] = step.ComputeAndCombine(*reps[r], data.train, slice[r], 11, s,
                                                 absl::Seconds(20), &local, &counts[r],
                                                 &timing[r]);
              EXPECT_EQ(local.count, static_cast<int64_t>(slice[r].size()));
            }
            plans[r] = step.buckets();
          });
          for (int r = 0; r < k; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
          const float tol_scale = sc.wire == WireFormat::kFloat32 ? 1e-5f : 2e-2f;
          float max_abs = 0;
          for (float v : want) max_abs = std::max(max_abs, std::fabs(v));
          for (int r = 0; r < k; ++r) {
            EXPECT_EQ(counts[r], batch);
            auto got = reps[r]->combine_buffer();
            ASSERT_EQ(std::memcmp(got.data(), reps[0]->combine_buffer().data(), n * sizeof(float)),
                      0)
                << "rank " << r << " differs from rank 0";
            for (int64_t i = 0; i < n; ++i) {
              ASSERT_NEAR(got[i], want[i], tol_scale * std::max(max_abs, 1.0f)) << i;
            }
            EXPECT_GE(timing[r].communication_seconds, 0);
            EXPECT_GE(timing[r].exposed_seconds, 0);
            EXPECT_GE(timing[r].peer_wait_seconds, 0);
            EXPECT_LE(timing[r].peer_wait_seconds, timing[r].communication_seconds + 1e-9);
            EXPECT_GT(timing[r].compute_seconds, 0);
            if (k > 1 && sc.bucket_bytes != -1) {
              EXPECT_EQ(timing[r].buckets, static_cast<int>(plans[r].size()));
              EXPECT_EQ(plans[r], plans[0]);
              if (path.ps) {
                EXPECT_EQ(timing[r].buckets, path.shards);
              } else if (sc.bucket_bytes == 4) {
                // One bucket per piece: loss, b2, 8 rows of W2, b1, 16 rows
                // of W1, b0, 6 rows of W0.
                EXPECT_EQ(timing[r].buckets, 1 + 1 + 8 + 1 + 16 + 1 + 6);
              }
            } else {
              EXPECT_EQ(timing[r].buckets, 1);
              EXPECT_EQ(timing[r].exposed_seconds, timing[r].communication_seconds);
            }
          }
          // K = 1: no combine at all; the buffer is the plain gradient.
          if (k == 1) {
            ASSERT_EQ(std::memcmp(reps[0]->combine_buffer().data(), want.data(),
                                  n * sizeof(float)),
                      0);
          }
        }
      }
    }
  }
}

TEST(StepCombinerTest, ConfigFromTheJobSpecNamesBadFields) {
  v1::JobSpec spec;
  spec.set_sync_mode(v1::RING);
  auto c = CombineConfigFromSpec(spec);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bucket_bytes, -1);  // no overlap by default
  EXPECT_EQ(c->wire, WireFormat::kFloat32);
  spec.set_peer_transport(v1::TCP);
  c = CombineConfigFromSpec(spec);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bucket_bytes, -1);
  spec.set_sync_mode(v1::PS);
  EXPECT_EQ(CombineConfigFromSpec(spec)->bucket_bytes, -1);
  spec.set_bucket_bytes(4096);
  EXPECT_EQ(CombineConfigFromSpec(spec)->bucket_bytes, 4096);
  spec.set_sync_mode(v1::RING);
  spec.set_compression("bf16");
  spec.set_bucket_bytes(-1);
  c = CombineConfigFromSpec(spec);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->wire, WireFormat::kBf16);
  EXPECT_EQ(c->bucket_bytes, -1);
  spec.set_bucket_bytes(-2);
  EXPECT_EQ(CombineConfigFromSpec(spec).status().message(),
            "spec.bucket_bytes: expected -1 (no overlap), 0 (default) or > 0, got -2");
  spec.set_bucket_bytes(0);
  spec.set_compression("int8");
  EXPECT_EQ(CombineConfigFromSpec(spec).status().message(),
            "spec.compression: expected none, bf16 or fp16, got \"int8\"");
  // ps jobs compress too (their shards decode 16-bit pushes).
  spec.set_compression("fp16");
  spec.set_sync_mode(v1::PS);
  c = CombineConfigFromSpec(spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->wire, WireFormat::kFp16);
}

// A transport whose messages are limited (as the grpc peer transport's are
// to 4 MiB); everything else is the in-process endpoint's.
class LimitedTransport : public Transport {
 public:
  LimitedTransport(Transport* inner, int64_t limit) : inner_(inner), limit_(limit) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return limit_; }
  absl::Status Send(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                    absl::Time deadline) override {
    ++sends;
    return inner_->Send(to, key, data, deadline);
  }
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    return inner_->Recv(from, key, out, deadline);
  }
  int sends = 0;

 private:
  Transport* inner_;
  const int64_t limit_;
};

// spec.ring_algorithm = direct sends each buffer in one message: one that
// does not fit the transport's limit fails before anything is sent, naming
// the field, the size and the limit; one that fits (float32 or 16-bit)
// sums exactly. Ring and auto never hit the check.
TEST(RingCombinerTest, ForcedDirectChecksTheTransportsMessageLimit) {
  InProcessHub hub(2);
  LimitedTransport t0(hub.endpoint(0), 1000), t1(hub.endpoint(1), 1000);
  RingCombiner direct0(&t0, AllReduceAlgorithm::kDirect);
  std::vector<float> big(300, 1.0f);  // 8 + 1200 bytes > 1000
  int64_t count = 3;
  absl::Status s = direct0.Combine(1, 0, absl::MakeSpan(big), &count, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(),
            "spec.ring_algorithm: direct sends each gradient buffer in one message of 1208 "
            "bytes, more than the 1000 bytes one direct message may hold on this transport: "
            "use ring (or auto), or overlap buckets (spec.bucket_bytes) small enough to fit");
  EXPECT_EQ(t0.sends, 0);
  BucketCall call;
  call.job = 1;
  call.deadline = absl::Now() + absl::Seconds(5);
  s = direct0.CombineBucket(call, absl::MakeSpan(big), &count, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(t0.sends, 0);

  // Fits: 8 + 600 bytes at 16 bits, 8 + 800 at 32. Both ranks sum exactly.
  RingCombiner direct1(&t1, AllReduceAlgorithm::kDirect);
  for (WireFormat wire : {WireFormat::kBf16, WireFormat::kFloat32}) {
    const size_t n = wire == WireFormat::kFloat32 ? 200 : 300;
    std::vector<float> a(n, 1.0f), b(n, 2.0f);
    int64_t ca = 3, cb = 4;
    BucketCall c = call;
    c.step = wire == WireFormat::kFloat32 ? 2 : 1;
    c.wire = wire;
    c.deadline = absl::Now() + absl::Seconds(5);
    absl::Status sb;
    std::thread other([&] { sb = direct1.CombineBucket(c, absl::MakeSpan(b), &cb, nullptr); });
    s = direct0.CombineBucket(c, absl::MakeSpan(a), &ca, nullptr);
    other.join();
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(sb.ok()) << sb;
    EXPECT_EQ(ca, 7);
    EXPECT_EQ(cb, 7);
    EXPECT_EQ(a, std::vector<float>(n, 3.0f));
    EXPECT_EQ(b, a);
  }
  // Without a transport limit the direct algorithm's own 2 MiB holds.
  InProcessHub hub1(2);
  RingCombiner unlimited(hub1.endpoint(0), AllReduceAlgorithm::kDirect);
  std::vector<float> huge((kMaxSegmentBytes - 8) / 4 + 1, 1.0f);
  s = unlimited.Combine(1, 0, absl::MakeSpan(huge), &count, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("more than the 2097152 bytes one direct message may hold"),
            std::string::npos)
      << s;
  // The ring algorithm with the same limit: no check (its segments are
  // bounded by kMaxSegmentBytes, not the buffer).
  RingCombiner ring0(&t0, AllReduceAlgorithm::kRing), ring1(&t1, AllReduceAlgorithm::kRing);
  std::vector<float> a(300, 1.0f), b(300, 2.0f);
  int64_t ca = 1, cb = 1;
  absl::Status sb;
  std::thread other([&] { sb = ring1.Combine(1, 3, absl::MakeSpan(b), &cb, absl::Seconds(5)); });
  s = ring0.Combine(1, 3, absl::MakeSpan(a), &ca, absl::Seconds(5));
  other.join();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(sb.ok()) << sb;
  EXPECT_EQ(a, std::vector<float>(300, 3.0f));
  EXPECT_EQ(ca, 2);
}

// A peer that never shows up: the overlapped combine returns the
// transport's deadline error by the deadline, naming the bucket.
TEST(StepCombinerTest, AMissingPeerFailsTheStepByItsDeadline) {
  TrainTest data = Blobs(50, 0);
  TrainSpec spec;
  spec.model = "mlp:16,8";
  InProcessHub hub(2);
  RingCombiner combiner(hub.endpoint(0), AllReduceAlgorithm::kRing);
  CombineConfig config;
  config.bucket_bytes = 44;
  StepCombiner step(&combiner, config, 2);
  auto rep = Replica::Create(spec, 6, 3);
  ASSERT_TRUE(rep.ok());
  const std::vector<int64_t> slice = {0, 1, 2};
  BatchStats local;
  int64_t count = 0;
  CombineTiming timing;
  const absl::Time t0 = absl::Now();
  absl::Status s = step.ComputeAndCombine(**rep, data.train, slice, 5, 0, absl::Milliseconds(300),
                                          &local, &count, &timing);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("bucket 0 of"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_GT(timing.exposed_seconds, 0.2);
}

}  // namespace
}  // namespace lockstep
