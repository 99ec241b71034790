// Equivalence, the heart of the product: K workers (threads, in-process
// transports) in ring and in ps mode end with the weights the
// single-process reference trainer computes on the same global batches,
// and all replicas' hashes agree at every step.
#include "worker/job_runner.h"

#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/collective/inproc_transport.h"
#include "common/collective/ps_aggregator.h"
#include "common/rng.h"
#include "common/train/reference_trainer.h"
#include "gtest/gtest.h"
#include "common/train/job_spec_convert.h"
#include "worker/blobs_for_test.h"

namespace lockstep {
namespace {

// Records every rank's report; can ask the runners to stop after a step.
class FakeReporter : public JobReporter {
 public:
  explicit FakeReporter(int64_t stop_after = -1) : stop_after_(stop_after) {}
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& r) override {
    absl::MutexLock l(&mu_);
    hashes_[r.step()][r.rank()] = r.weights_hash();
    losses_[r.step()][r.rank()] = r.loss();
    return stop_after_ >= 0 && r.step() >= stop_after_;
  }
  absl::Status ReportEval(const v1::ReportEvalRequest& r) override {
    absl::MutexLock l(&mu_);
    evals_.push_back(r);
    return absl::OkStatus();
  }
  absl::Status UploadWeights(uint64_t, const Replica& replica) override {
    absl::MutexLock l(&mu_);
    uploaded_.assign(replica.params().begin(), replica.params().end());
    return absl::OkStatus();
  }
  std::map<int64_t, std::map<int, std::string>> hashes() {
    absl::MutexLock l(&mu_);
    return hashes_;
  }
  std::map<int64_t, std::map<int, double>> losses() {
    absl::MutexLock l(&mu_);
    return losses_;
  }
  std::vector<v1::ReportEvalRequest> evals() {
    absl::MutexLock l(&mu_);
    return evals_;
  }
  std::vector<float> uploaded() {
    absl::MutexLock l(&mu_);
    return uploaded_;
  }

 private:
  const int64_t stop_after_;
  absl::Mutex mu_;
  std::map<int64_t, std::map<int, std::string>> hashes_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::map<int, double>> losses_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportEvalRequest> evals_ ABSL_GUARDED_BY(mu_);
  std::vector<float> uploaded_ ABSL_GUARDED_BY(mu_);
};

v1::JobSpec MlpSpec() {
  v1::JobSpec spec;
  spec.set_model("mlp:16,8");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(1);
  spec.set_global_batch(29);  // not divisible by 2, 3 or 4: uneven slices
  spec.set_steps(40);
  spec.set_seed(5);
  spec.set_eval_each_epoch(true);
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(0.05f);
  return spec;
}

struct RunResult {
  std::vector<std::vector<float>> params;  // per rank
  std::vector<absl::Status> status;
};

RunResult RunJob(v1::JobSpec spec, int k, bool ps, const TrainTest& data,
                 FakeReporter* reporter, int shards = 2,
                 const std::map<int, const TrainTest*>& data_of_rank = {}) {
  spec.set_num_workers(k);
  spec.set_sync_mode(ps ? v1::PS : v1::RING);
  spec.set_ps_shards(shards);
  InProcessHub hub(k);
  RunResult result;
  result.params.resize(k);
  result.status.resize(k);
  std::vector<std::unique_ptr<JobRunner>> runners;
  std::vector<std::unique_ptr<GradientCombiner>> combiners;
  // All ranks share one set of shards, made when the first rank learns the
  // buffer length.
  // (One set per buffer length: the shape-agreement round is shorter.)
  absl::Mutex ps_mu;
  std::map<int64_t, std::vector<std::unique_ptr<PsClient>>> ps_by_len;
  PsCombiner::Connect connect = [&](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
    absl::MutexLock l(&ps_mu);
    auto& clients = ps_by_len[n];
    if (clients.empty()) clients = MakeInProcessPsClients(k, shards, n);
    std::vector<PsClient*> ptrs;
    for (auto& c : clients) ptrs.push_back(c.get());
    return ptrs;
  };
  for (int r = 0; r < k; ++r) {
    JobRunnerOptions o;
    o.job_id = 7;
    o.spec = spec;
    o.rank = r;
    o.world = k;
    o.worker_id = "w-" + std::to_string(r + 1);
    o.combine_timeout = absl::Seconds(20);
    if (ps) {
      combiners.push_back(std::make_unique<PsCombiner>(connect, r));
    } else {
      combiners.push_back(std::make_unique<RingCombiner>(hub.endpoint(r)));
    }
    o.peer_names = {"a0", "a1", "a2", "a3"};
    const TrainTest* d = data_of_rank.count(r) ? data_of_rank.at(r) : &data;
    runners.push_back(std::make_unique<JobRunner>(o, d, combiners.back().get(), reporter));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      auto out = runners[r]->Run();
      result.status[r] = out.status();
      if (runners[r]->replica() != nullptr) {
        auto p = runners[r]->replica()->params();
        result.params[r].assign(p.begin(), p.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

class EquivalenceTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(EquivalenceTest, MatchesReferenceAndReplicasStayBitIdentical) {
  const int k = std::get<0>(GetParam());
  const bool ps = std::get<1>(GetParam());
  TrainTest data = Blobs(200, 50);
  v1::JobSpec spec = MlpSpec();
  auto train_spec = ToTrainSpec(spec);
  ASSERT_TRUE(train_spec.ok()) << train_spec.status();
  auto ref = TrainReference(*train_spec, data.train, data.test, nullptr);
  ASSERT_TRUE(ref.ok()) << ref.status();

  FakeReporter reporter;
  RunResult run = RunJob(spec, k, ps, data, &reporter);
  for (int r = 0; r < k; ++r) ASSERT_TRUE(run.status[r].ok()) << "rank " << r << ": " << run.status[r];

  // Every replica bit-identical to rank 0.
  for (int r = 1; r < k; ++r) {
    ASSERT_EQ(std::memcmp(run.params[r].data(), run.params[0].data(),
                          run.params[0].size() * sizeof(float)),
              0)
        << "rank " << r;
  }
  // Same hash on every rank at every step.
  auto hashes = reporter.hashes();
  ASSERT_EQ(hashes.size(), 40u);
  for (const auto& [step, by_rank] : hashes) {
    ASSERT_EQ(static_cast<int>(by_rank.size()), k);
    for (const auto& [rank, h] : by_rank) EXPECT_EQ(h, by_rank.at(0)) << "step " << step;
  }
  // Within a relative 1e-5 of the single-process reference, per parameter.
  auto want = ref->replica->params();
  ASSERT_EQ(want.size(), run.params[0].size());
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float got = run.params[0][i];
    const float tol = 1e-5f * std::max(std::fabs(want[i]), 1e-2f);
    if (std::fabs(got - want[i]) > tol && ++bad < 5) {
      ADD_FAILURE() << "param " << i << ": distributed " << got << " vs reference " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(reporter.uploaded(), run.params[0]);
  // The global loss every rank reports is the same number.
  for (const auto& [step, by_rank] : reporter.losses())
    for (const auto& [rank, loss] : by_rank) EXPECT_EQ(loss, by_rank.at(0));
  // Rank 0 evaluated at each epoch end (200/29 -> 7 steps per epoch) and at the end.
  EXPECT_EQ(reporter.evals().size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(RingAndPs, EquivalenceTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<1>(info.param) ? "ps" : "ring") + "_K" +
                                  std::to_string(std::get<0>(info.param));
                         });

TEST(JobRunnerTest, APerturbedReplicaShowsUpInItsHashFromThatStepOn) {
  TrainTest data = Blobs(100, 0);
  v1::JobSpec spec = MlpSpec();
  spec.set_steps(6);
  spec.set_num_workers(3);
  InProcessHub hub(3);
  FakeReporter reporter;
  std::vector<std::unique_ptr<RingCombiner>> combiners;
  std::vector<std::unique_ptr<JobRunner>> runners;
  for (int r = 0; r < 3; ++r) {
    JobRunnerOptions o;
    o.spec = spec;
    o.rank = r;
    o.world = 3;
    o.perturb_at_step = r == 1 ? 2 : -1;
    combiners.push_back(std::make_unique<RingCombiner>(hub.endpoint(r)));
    runners.push_back(std::make_unique<JobRunner>(o, &data, combiners.back().get(), &reporter));
  }
  std::vector<std::thread> threads;
  for (auto& runner : runners) threads.emplace_back([&runner] { ASSERT_TRUE(runner->Run().ok()); });
  for (auto& t : threads) t.join();
  for (const auto& [step, by_rank] : reporter.hashes()) {
    EXPECT_EQ(by_rank.at(0), by_rank.at(2)) << "step " << step;
    if (step < 2) {
      EXPECT_EQ(by_rank.at(1), by_rank.at(0)) << "step " << step;
    } else {
      EXPECT_NE(by_rank.at(1), by_rank.at(0)) << "step " << step;
    }
  }
}

TEST(JobRunnerTest, CoordinatorStopEndsEveryRankAtTheSameStep) {
  TrainTest data = Blobs(100, 0);
  FakeReporter reporter(/*stop_after=*/4);
  RunResult run = RunJob(MlpSpec(), 3, false, data, &reporter);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(run.status[r].code(), absl::StatusCode::kCancelled) << run.status[r];
  }
  EXPECT_EQ(reporter.hashes().size(), 5u);  // steps 0..4, none after the stop
}

TEST(JobRunnerTest, AWorkerWhoseDatasetHasAnotherShapeIsNamedOnEveryRank) {
  TrainTest data = Blobs(100, 0);
  TrainTest other = Blobs(100, 0);
  other.train.dim = 5;  // rank 2 sees 5 features per example
  other.train.x.resize(100 * 5);
  for (bool ps : {false, true}) {
    SCOPED_TRACE(ps ? "ps" : "ring");
    FakeReporter reporter;
    RunResult run = RunJob(MlpSpec(), 4, ps, data, &reporter, 1, {{2, &other}});
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(run.status[r].code(), absl::StatusCode::kFailedPrecondition) << run.status[r];
      EXPECT_NE(run.status[r].message().find("rank 2 (a2) has dim 5"), std::string::npos)
          << run.status[r];
    }
    EXPECT_TRUE(reporter.hashes().empty());
  }
}

TEST(JobRunnerTest, DatasetOfTheWrongShapeNamesTheWorker) {
  TrainTest data = Blobs(20, 0);
  v1::JobSpec spec = MlpSpec();
  spec.set_model("logistic");  // 3 classes: not binary
  FakeReporter reporter;
  GradientCombiner* none = nullptr;
  JobRunnerOptions o;
  o.spec = spec;
  o.worker_id = "w-9";
  o.world = 1;
  JobRunner runner(o, &data, none, &reporter);
  auto out = runner.Run();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("worker w-9"), std::string::npos) << out.status();
}

// A combiner that fails the way a transport does: naming the key it had.
class FailingCombiner : public GradientCombiner {
 public:
  absl::Status Combine(uint64_t job, int64_t step, absl::Span<float>, int64_t*,
                       absl::Duration) override {
    last_job = job;
    return absl::UnavailableError(
        absl::StrCat("peer rank 1 (10.77.0.3:7071): cannot connect (job ", job, ", step ", step,
                     ")"));
  }
  uint64_t last_job = 0;
};

TEST(JobRunnerTest, AFailureBeforeStepZeroNamesTheUsersJobNotTheInternalKey) {
  TrainTest data = Blobs(20, 0);
  FakeReporter reporter;
  FailingCombiner combiner;
  JobRunnerOptions o;
  o.spec = MlpSpec();
  o.spec.set_num_workers(2);
  o.job_id = 7;
  o.world = 2;
  o.rank = 0;
  for (uint64_t group_key : {uint64_t{0}, (uint64_t{5} << 20) | 7}) {
    o.group_key = group_key;
    JobRunner runner(o, &data, &combiner, &reporter);
    auto out = runner.Run();
    EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(out.status().message(),
              "before step 0 (dataset-shape agreement of job 7): peer rank 1 (10.77.0.3:7071): "
              "cannot connect (job 7, step 0)");
    // On the wire: the shape round's key of the group key.
    EXPECT_EQ(combiner.last_job, ShapeAgreementJob(group_key != 0 ? group_key : 7));
  }
  EXPECT_TRUE(reporter.hashes().empty());
}

}  // namespace
}  // namespace lockstep
