// Checkpoints and resume through the production job loop: K workers
// (threads) train a job that writes checkpoints and is stopped at step M
// (as the coordinator stops a job); a second job resumes from the newest
// valid checkpoint and must end with EXACTLY the weights hash of the same
// job run uninterrupted. Ring over in-process transports and over raw TCP
// on loopback, and ps over in-process shards; with peers' states fetchable
// (as in a worker daemon) rank 0 alone reads the checkpoint and the other
// ranks, whose checkpoint directories are empty (as on hosts that share
// none), copy its restored state.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/collective/inproc_transport.h"
#include "common/collective/ps_aggregator.h"
#include "common/train/checkpoint.h"
#include "common/train/state_board.h"
#include "gtest/gtest.h"
#include "worker/blobs_for_test.h"
#include "worker/job_runner.h"
#include "common/net/data_auth.h"
#include "worker/net/tcp_transport.h"

namespace lockstep {
namespace {

// Stops every rank after step `stop_after` (-1 = never): with report lag 0
// each rank waits for that reply before its next step, so all stop at the
// same boundary without a combine in flight.
class StopAfterReporter : public JobReporter {
 public:
  explicit StopAfterReporter(int64_t stop_after) : stop_after_(stop_after) {}
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& r) override {
    absl::MutexLock l(&mu_);
    first_step_ = std::min(first_step_, r.step());
    return stop_after_ >= 0 && r.step() >= stop_after_;
  }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }
  int64_t first_step() {
    absl::MutexLock l(&mu_);
    return first_step_;
  }

 private:
  const int64_t stop_after_;
  absl::Mutex mu_;
  int64_t first_step_ ABSL_GUARDED_BY(mu_) = 1 << 30;
};

enum class Mode { kInproc, kTcp, kPs };

struct JobResult {
  std::vector<absl::Status> status;
  std::vector<std::string> hash;  // per rank
  int64_t first_step = 0;
};

std::string FreshDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(t != nullptr ? t : "/tmp", "/", name);
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return dir;
}

// How the ranks reach a checkpoint to resume from.
struct Peers {
  // Each rank has a state board and fetches its peers' states from theirs.
  bool fetch = false;
  // Ranks other than 0 resume from (and write to) their own empty
  // directory.
  bool private_dirs = false;
};

JobResult RunJob(const v1::JobSpec& spec, uint64_t job_id, Mode mode, const TrainTest& data,
                 int64_t stop_after, Peers peers = {}) {
  const int k = spec.num_workers();
  std::vector<std::unique_ptr<StateBoard>> boards;
  for (int r = 0; r < k; ++r) boards.push_back(std::make_unique<StateBoard>());
  std::vector<std::string> dirs(k);
  for (int r = 1; r < k && peers.private_dirs; ++r) {
    dirs[r] = FreshDir(absl::StrCat("private_", job_id, "_", r));
  }
  InProcessHub inproc(k);
  std::unique_ptr<TcpPeerHub> tcp_hub;
  std::string tcp_addr;
  if (mode == Mode::kTcp) {
    auto hub = TcpPeerHub::Start("127.0.0.1", 0);
    EXPECT_TRUE(hub.ok()) << hub.status();
    tcp_hub = *std::move(hub);
    tcp_addr = absl::StrCat("127.0.0.1:", tcp_hub->port());
  }
  absl::Mutex ps_mu;
  std::map<int64_t, std::vector<std::unique_ptr<PsClient>>> ps_by_len;
  PsCombiner::Connect connect = [&](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
    absl::MutexLock l(&ps_mu);
    auto& clients = ps_by_len[n];
    if (clients.empty()) clients = MakeInProcessPsClients(k, 2, n);
    std::vector<PsClient*> ptrs;
    for (auto& c : clients) ptrs.push_back(c.get());
    return ptrs;
  };
  StopAfterReporter reporter(stop_after);
  // As the coordinator: a rank that fails stops the others' runners.
  absl::Mutex runners_mu;
  std::vector<JobRunner*> runners(k, nullptr);
  JobResult result;
  result.status.resize(k);
  result.hash.resize(k);
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<TcpTransport> tcp;
      Transport* transport = inproc.endpoint(r);
      if (mode == Mode::kTcp) {
        TcpTransportOptions to;
        to.secret = std::string(dataauth::kSecretBytes, 'j');  // the job's data-plane secret
        auto t = TcpTransport::Create(tcp_hub.get(), job_id, r,
                                      std::vector<std::string>(k, tcp_addr), to);
        if (!t.ok()) {
          result.status[r] = t.status();
          return;
        }
        tcp = *std::move(t);
        transport = tcp.get();
      }
      JobRunnerOptions o;
      o.job_id = job_id;
      o.spec = spec;
      if (!dirs[r].empty()) {
        o.spec.set_checkpoint_dir(dirs[r]);
        o.spec.mutable_resume_from()->set_checkpoint_dir(dirs[r]);
      }
      if (peers.fetch) {
        o.state_board = boards[r].get();
        // A peer's state, as FetchReplicaState gets it: polled until published.
        o.fetch_state = [&boards, job_id](int peer, int64_t step, int64_t expected,
                                  absl::Time deadline) -> absl::StatusOr<std::string> {
          while (absl::Now() < deadline) {
            if (auto st = boards[peer]->Find(job_id, step); st != nullptr) {
              if (static_cast<int64_t>(st->size()) != expected) {
                return absl::FailedPreconditionError("size");
              }
              return *st;
            }
            absl::SleepFor(absl::Milliseconds(1));
          }
          return absl::DeadlineExceededError("not published");
        };
      }
      o.rank = r;
      o.world = k;
      o.worker_id = absl::StrCat("w-", r + 1);
      o.combine_timeout = absl::Seconds(30);
      o.report_lag = 0;
      RingCombiner ring(transport);
      PsCombiner ps(connect, r);
      GradientCombiner* combiner = mode == Mode::kPs ? static_cast<GradientCombiner*>(&ps)
                                                     : static_cast<GradientCombiner*>(&ring);
      JobRunner runner(o, &data, combiner, &reporter);
      {
        absl::MutexLock l(&runners_mu);
        runners[r] = &runner;
      }
      auto out = runner.Run();
      {
        absl::MutexLock l(&runners_mu);
        runners[r] = nullptr;
        if (!out.ok() && out.status().code() != absl::StatusCode::kCancelled) {
          for (JobRunner* other : runners) {
            if (other != nullptr) other->RequestStop();
          }
        }
      }
      result.status[r] = out.status();
      if (out.ok()) result.hash[r] = out->weights_hash;
    });
  }
  for (auto& t : threads) t.join();
  result.first_step = reporter.first_step();
  return result;
}


v1::JobSpec Spec(int k, Mode mode, const std::string& optimizer) {
  v1::JobSpec spec;
  spec.set_model("mlp:16,8");
  spec.set_sync_mode(mode == Mode::kPs ? v1::PS : v1::RING);
  spec.set_ps_shards(2);
  spec.set_peer_transport(mode == Mode::kTcp ? v1::TCP : v1::GRPC);
  spec.set_num_workers(k);
  spec.set_global_batch(29);
  spec.set_steps(40);
  spec.set_seed(5);
  spec.set_eval_each_epoch(true);
  spec.mutable_optimizer()->set_kind(optimizer);
  if (optimizer == "sgd") spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(optimizer == "sgd" ? 0.05f : 0.01f);
  spec.mutable_lr()->set_decay("cosine");
  spec.mutable_lr()->set_warmup_steps(3);
  return spec;
}

struct Case {
  const char* name;
  int k;
  Mode mode;
  const char* optimizer;
  bool corrupt_newest;
  Peers peers;  // of the resumed job
};

class ResumeJobTest : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeJobTest, ResumedJobEndsWithTheUninterruptedRunsHash) {
  const Case& c = GetParam();
  const TrainTest data = Blobs(200, 50);
  v1::JobSpec spec = Spec(c.k, c.mode, c.optimizer);

  JobResult whole = RunJob(spec, 11, c.mode, data, -1);
  for (int r = 0; r < c.k; ++r) ASSERT_TRUE(whole.status[r].ok()) << r << whole.status[r];
  for (int r = 1; r < c.k; ++r) ASSERT_EQ(whole.hash[r], whole.hash[0]);

  // First attempt: checkpoints every 6 steps (keep 3), stopped after step
  // 25 (26 steps done): checkpoints at 12, 18, 24 remain.
  const std::string root = FreshDir(absl::StrCat("resume_", c.name));
  spec.set_checkpoint_dir(root);
  spec.set_checkpoint_every_steps(6);
  JobResult first = RunJob(spec, 12, c.mode, data, 25);
  for (int r = 0; r < c.k; ++r) {
    ASSERT_EQ(first.status[r].code(), absl::StatusCode::kCancelled) << r << first.status[r];
  }
  auto files = ListCheckpoints(JobCheckpointDir(root, 12));
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].first, 12);
  EXPECT_EQ((*files)[2].first, 24);
  int64_t want_first = 24;
  if (c.corrupt_newest) {
    // Flip a byte in the newest: the resumed job must use step 18's.
    const std::string& path = (*files)[2].second;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
    f.close();
    want_first = 18;
  }

  v1::JobSpec resume = spec;
  resume.mutable_resume_from()->set_checkpoint_dir(root);
  resume.mutable_resume_from()->set_job_id(12);
  JobResult second = RunJob(resume, 13, c.mode, data, -1, c.peers);
  for (int r = 0; r < c.k; ++r) ASSERT_TRUE(second.status[r].ok()) << r << second.status[r];
  EXPECT_EQ(second.first_step, want_first);
  for (int r = 0; r < c.k; ++r) EXPECT_EQ(second.hash[r], whole.hash[0]) << "rank " << r;
  // The resumed job checkpoints under its own id, at the end too.
  auto own = ListCheckpoints(JobCheckpointDir(root, 13));
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_FALSE(own->empty());
  EXPECT_EQ(own->back().first, 40);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ResumeJobTest,
    ::testing::Values(Case{"inproc_K1_sgd", 1, Mode::kInproc, "sgd", false},
                      Case{"inproc_K3_adam", 3, Mode::kInproc, "adam", false},
                      Case{"inproc_K2_corrupt_newest", 2, Mode::kInproc, "sgd", true},
                      Case{"tcp_K2_sgd", 2, Mode::kTcp, "sgd", false},
                      Case{"ps_K2_adamw", 2, Mode::kPs, "adamw", false},
                      Case{"inproc_K3_adam_from_rank0", 3, Mode::kInproc, "adam", false,
                           Peers{true, true}},
                      Case{"inproc_K2_corrupt_newest_from_rank0", 2, Mode::kInproc, "sgd", true,
                           Peers{true, true}},
                      Case{"tcp_K2_sgd_from_rank0", 2, Mode::kTcp, "sgd", false,
                           Peers{true, true}},
                      Case{"ps_K2_adamw_from_rank0", 2, Mode::kPs, "adamw", false,
                           Peers{true, true}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ResumeJobTest, AMissingCheckpointFailsEveryRankNamingTheDirectory) {
  const TrainTest data = Blobs(200, 50);
  v1::JobSpec spec = Spec(2, Mode::kInproc, "sgd");
  const std::string root = FreshDir("resume_missing");
  spec.mutable_resume_from()->set_checkpoint_dir(root);
  spec.mutable_resume_from()->set_job_id(4);
  JobResult r = RunJob(spec, 5, Mode::kInproc, data, -1);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.status[rank].code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(r.status[rank].message(),
              absl::StrCat("worker w-", rank + 1, ": spec.resume_from: ", root,
                           "/job-4: no such checkpoint directory"));
  }
}

// With peers' states fetchable only rank 0 reads the checkpoint: when it
// cannot, rank 0's error names the directory and the others stop when the
// job does (the coordinator fails it with rank 0's reason).
TEST(ResumeJobTest, AMissingCheckpointOnRankZeroFailsEveryRankNamingIt) {
  const TrainTest data = Blobs(200, 50);
  v1::JobSpec spec = Spec(3, Mode::kInproc, "sgd");
  const std::string root = FreshDir("resume_missing_rank0");
  spec.mutable_resume_from()->set_checkpoint_dir(root);
  spec.mutable_resume_from()->set_job_id(4);
  JobResult r = RunJob(spec, 5, Mode::kInproc, data, -1, Peers{true, false});
  EXPECT_EQ(r.status[0].code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status[0].message(), absl::StrCat("worker w-1: spec.resume_from: ", root,
                                                "/job-4: no such checkpoint directory"));
  // The others wait for the job to be stopped on rank 0's report.
  for (int rank = 1; rank < 3; ++rank) {
    EXPECT_EQ(r.status[rank].code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(r.status[rank].message(), "job 5 stopped");
  }
}

}  // namespace
}  // namespace lockstep
