// ReplicaState.FetchCheckpoint (state_service.h): a worker serves the
// checkpoint files it wrote, validated, to a resumed job's rank that has
// none (its writer busy with another job, or on another host); the
// receiver bounds the size before allocating and stores the file where
// ResumeReplica finds it (job_checkpoint.h StoreFetchedCheckpoint).
#include <stdlib.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/optim/hash.h"
#include "common/train/checkpoint.h"
#include "common/train/checkpoint_dirs.h"
#include "common/train/job_checkpoint.h"
#include "gtest/gtest.h"
#include "worker/net/state_service.h"

namespace lockstep {
namespace {

TrainingState State(int64_t next_step, int64_t n) {
  TrainingState s;
  s.job_id = 5;
  s.seed = 9;
  s.next_step = next_step;
  s.total_steps = 100;
  s.sampler = {1000, 10, false};
  s.job_spec = "spec";
  for (int64_t i = 0; i < n; ++i) s.params.push_back(0.5f * i + next_step);
  s.optimizer.steps = next_step;
  s.optimizer.slots.assign(static_cast<size_t>(n), 0.125f);
  s.weights_hash = HashWeights(s.params);
  return s;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream b;
  b << in.rdbuf();
  return b.str();
}

std::string TempDir() {
  std::string t = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                               "/ckfetchXXXXXX");
  EXPECT_NE(mkdtemp(&t[0]), nullptr);
  return t;
}

class CheckpointFetchTest : public ::testing::Test {
 protected:
  CheckpointFetchTest() {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~CheckpointFetchTest() override {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    // A transfer's reactor gives its slot back in OnDone, on a gRPC thread,
    // possibly after its client returned: the service (a member) must not
    // be destroyed before (the atomic load orders that last write before
    // the destruction, also for ThreadSanitizer).
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (service_.active_transfers() > 0 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(service_.active_transfers(), 0);
  }

  FetchCheckpointOptions Options(const std::string& root, int64_t step, int64_t max_bytes) {
    FetchCheckpointOptions o;
    o.checkpoint_dir = root;
    o.job_id = 5;
    o.step = step;
    o.max_bytes = max_bytes;
    o.deadline = absl::Now() + absl::Seconds(30);
    o.requester = "w-9";
    return o;
  }

  StateBoard board_;
  CheckpointDirs dirs_;
  StateServiceImpl service_{&board_, nullptr, &dirs_};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// The newest valid file (a corrupt newer one skipped as a reader would),
// or the step asked for; the bytes are the file's own.
TEST_F(CheckpointFetchTest, ServesTheNewestValidFileOrTheStepAsked) {
  const std::string root = TempDir();
  const std::string dir = JobCheckpointDir(root, 5);
  ASSERT_TRUE(MakeDirs(dir).ok());
  // 300,000 floats each way: 2.4 MB, three chunks.
  ASSERT_TRUE(WriteCheckpoint(dir, State(10, 300000), 5).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, State(20, 300000), 5).ok());
  const std::string p20 = absl::StrCat(dir, "/", CheckpointFileName(20));
  const std::string p30 = absl::StrCat(dir, "/", CheckpointFileName(30));
  {
    std::ofstream broken(p30, std::ios::binary);
    broken << "not a checkpoint";
  }
  dirs_.Add(root);
  absl::StatusOr<FetchedCheckpoint> got = FetchCheckpointFile(address_, Options(root, 0, 1 << 24));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->step, 20);
  EXPECT_EQ(got->bytes, ReadAll(p20));
  got = FetchCheckpointFile(address_, Options(root, 10, 1 << 24));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->step, 10);
  EXPECT_EQ(got->bytes, ReadAll(absl::StrCat(dir, "/", CheckpointFileName(10))));
  // Stored where a resume reads it: another root, same bytes.
  const std::string mine = TempDir();
  v1::JobSpec spec;
  spec.mutable_resume_from()->set_checkpoint_dir(mine);
  spec.mutable_resume_from()->set_job_id(5);
  absl::StatusOr<std::string> stored = StoreFetchedCheckpoint(spec, got->step, got->bytes);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, absl::StrCat(JobCheckpointDir(mine, 5), "/", CheckpointFileName(10)));
  EXPECT_EQ(ReadAll(*stored), got->bytes);
}

// Only directories this worker wrote to; a file larger than the receiver's
// model allows is refused before anything is allocated.
TEST_F(CheckpointFetchTest, RefusesOtherDirectoriesAndOversizedFiles) {
  const std::string root = TempDir();
  const std::string dir = JobCheckpointDir(root, 5);
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, State(10, 1000), 5).ok());
  absl::StatusOr<FetchedCheckpoint> got = FetchCheckpointFile(address_, Options(root, 0, 1 << 24));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("this worker wrote no checkpoints under"),
            std::string::npos)
      << got.status();
  dirs_.Add(root);
  got = FetchCheckpointFile(address_, Options(root, 0, 100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("expected 1..100 bytes for this job's model"),
            std::string::npos)
      << got.status();
  // A step that does not exist, and a job with no checkpoints there.
  EXPECT_EQ(FetchCheckpointFile(address_, Options(root, 11, 1 << 24)).status().code(),
            absl::StatusCode::kNotFound);
  FetchCheckpointOptions other = Options(root, 0, 1 << 24);
  other.job_id = 6;
  EXPECT_EQ(FetchCheckpointFile(address_, other).status().code(), absl::StatusCode::kNotFound);
  // A path outside the recorded roots (its parent) is refused too.
  EXPECT_EQ(FetchCheckpointFile(address_, Options(root + "/..", 0, 1 << 24)).status().code(),
            absl::StatusCode::kNotFound);
}

// At most kMaxCheckpointFetches (2) transfers at once: each holds the file
// in memory. A third caller is refused RESOURCE_EXHAUSTED while two are in
// progress; FetchCheckpointFileInTurn (what a fetching rank uses) waits for
// a turn and gets the file once one ends; the slots are given back.
TEST_F(CheckpointFetchTest, ServesAtMostTwoTransfersAtOnce) {
  const std::string root = TempDir();
  const std::string dir = JobCheckpointDir(root, 5);
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteCheckpoint(dir, State(10, 300000), 5).ok());
  const std::string want = ReadAll(absl::StrCat(dir, "/", CheckpointFileName(10)));
  dirs_.Add(root);
  absl::Mutex mu;
  int loading = 0;     // transfers past the bound's check, in the hook
  bool held = true;    // the hook holds them until the test lets go
  service_.SetLoadHookForTest([&] {
    absl::MutexLock l(&mu);
    ++loading;
    mu.AwaitWithTimeout(absl::Condition(+[](bool* h) { return !*h; }, &held), absl::Seconds(30));
  });
  std::vector<absl::StatusOr<FetchedCheckpoint>> got(3, absl::UnknownError("not run"));
  std::vector<std::thread> callers;
  // Lets the held transfers go and joins every caller (also on the way out
  // of a failed assertion: nothing may use this frame afterwards).
  auto release_and_join = [&] {
    {
      absl::MutexLock l(&mu);
      held = false;
    }
    for (auto& t : callers) {
      if (t.joinable()) t.join();
    }
  };
  for (int i = 0; i < 2; ++i) {
    callers.emplace_back([&, i] { got[i] = FetchCheckpointFile(address_, Options(root, 0, 1 << 24)); });
  }
  bool both_loading = false;
  {
    absl::MutexLock l(&mu);
    both_loading = mu.AwaitWithTimeout(
        absl::Condition(+[](int* n) { return *n == 2; }, &loading), absl::Seconds(20));
  }
  if (!both_loading) {
    ADD_FAILURE() << "the two transfers did not both reach the loader";
    release_and_join();
    service_.SetLoadHookForTest(nullptr);
    return;
  }
  absl::StatusOr<FetchedCheckpoint> third = FetchCheckpointFile(address_, Options(root, 0, 1 << 24));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_NE(third.status().message().find("2 checkpoint transfers in progress here; retry"),
            std::string::npos)
      << third.status();
  EXPECT_EQ(service_.busy_refusals(), 1);
  // One that waits for its turn: refused at least once more, then served.
  callers.emplace_back([&] {
    got[2] = FetchCheckpointFileInTurn(address_, Options(root, 0, 1 << 24), absl::Milliseconds(10));
  });
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (service_.busy_refusals() < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));  // polls a counter; the order is the hook's
  }
  EXPECT_GE(service_.busy_refusals(), 2);
  {
    absl::MutexLock l(&mu);
    EXPECT_EQ(loading, 2);  // nothing got past the bound meanwhile
  }
  release_and_join();
  service_.SetLoadHookForTest(nullptr);
  for (const auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->step, 10);
    EXPECT_EQ(g->bytes, want);
  }
  // Every slot is given back (once gRPC is done with each call, which may
  // be just after its client returned): two more at once are both served.
  const absl::Time freed_by = absl::Now() + absl::Seconds(20);
  while (service_.active_transfers() > 0 && absl::Now() < freed_by) {
    absl::SleepFor(absl::Milliseconds(5));  // polls a counter
  }
  ASSERT_EQ(service_.active_transfers(), 0);
  const int64_t refused = service_.busy_refusals();
  std::vector<std::thread> again;
  std::vector<absl::StatusOr<FetchedCheckpoint>> more(2, absl::UnknownError("not run"));
  for (int i = 0; i < 2; ++i) {
    again.emplace_back([&, i] { more[i] = FetchCheckpointFile(address_, Options(root, 0, 1 << 24)); });
  }
  for (auto& t : again) t.join();
  for (const auto& g : more) EXPECT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(service_.busy_refusals(), refused);
}

TEST(CheckpointDirsTest, KeepsTheNewestDirectories) {
  CheckpointDirs d;
  for (size_t i = 0; i < CheckpointDirs::kMax + 1; ++i) d.Add(absl::StrCat("/d", i));
  EXPECT_FALSE(d.Contains("/d0"));
  EXPECT_TRUE(d.Contains("/d1"));
  d.Add("/d1");  // used again: now the newest
  d.Add("/new");
  EXPECT_TRUE(d.Contains("/d1"));
  EXPECT_FALSE(d.Contains("/d2"));
  EXPECT_TRUE(d.Contains("/new/"));  // trailing slashes do not count
  d.Add("/slash//");
  EXPECT_TRUE(d.Contains("/slash"));
  EXPECT_FALSE(d.Contains("/slas"));
}

}  // namespace
}  // namespace lockstep
