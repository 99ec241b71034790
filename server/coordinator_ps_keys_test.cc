// The coordinator and its parameter-server shards (server/ps_control.h):
// the keys it starts on --ps_addresses shards (K, S, data-plane secret),
// re-sends and forgets, what its own shard may create (PsKeyShapeOf); and
// a resumed job's checkpoint source (Assignment.checkpoint_source).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/coordinator_test_fixture.h"

namespace lockstep {
namespace testing_coordinator {
namespace {

// What the coordinator told its --ps_addresses shards (server/ps_control.h).
struct RecordingPsControl : PsControl {
  struct Call {
    std::vector<std::string> shards;
    std::vector<PsKeyStart> secrets;
    std::vector<uint64_t> forget;
  };
  std::vector<Call> sets, forgets;
  void StartKeys(const std::vector<std::string>& shards, std::vector<PsKeyStart> keys) override {
    sets.push_back({shards, std::move(keys), {}});
  }
  void Forget(const std::vector<std::string>& shards, std::vector<uint64_t> jobs) override {
    forgets.push_back({shards, {}, std::move(jobs)});
  }
};

// A ps job over TCP on --ps_addresses shards: the shards get both of its
// keys, with the job's K and S and its data-plane secret, once, with its
// first assignment (before any of its workers can ask them), and are told
// to forget both keys when it ends. The coordinator's own shard checks
// registrations against the same secret (IsDataPlaneSecret). A gRPC ps job
// gets its keys and shape without a secret.
TEST_F(CoordinatorTest, PsShardsGetTheJobsKeysAndSecretFromTheCoordinator) {
  RecordingPsControl control;
  CoordinatorOptions o = DefaultOptions();
  o.ps_addresses = {"ps0:1", "ps1:1"};
  o.ps_control = &control;
  Reset(o);
  const std::string w1 = Register(1), w2 = Register(2);
  v1::JobSpec spec = Spec(2, v1::PS);
  spec.set_ps_shards(2);
  spec.set_ps_transport(v1::TCP);
  const uint64_t job = Submit(spec);
  const v1::HeartbeatReply b1 = Beat(w1);
  ASSERT_TRUE(b1.has_assignment());
  const uint64_t key = b1.assignment().group_key();
  const std::string secret = b1.assignment().data_plane_secret();
  const uint64_t shape = key | (uint64_t{1} << 63);
  ASSERT_EQ(control.sets.size(), 1u);
  EXPECT_EQ(control.sets[0].shards, (std::vector<std::string>{"ps0:1", "ps1:1"}));
  ASSERT_EQ(control.sets[0].secrets.size(), 2u);
  EXPECT_EQ(control.sets[0].secrets[0].job, key);
  EXPECT_EQ(control.sets[0].secrets[1].job, shape);
  EXPECT_EQ(control.sets[0].secrets[0].secret, secret);
  EXPECT_EQ(control.sets[0].secrets[1].secret, secret);
  for (const PsKeyStart& k : control.sets[0].secrets) {
    EXPECT_EQ(k.num_workers, 2);
    EXPECT_EQ(k.num_shards, 2);
  }
  // Not this coordinator's own shard's key: it would not create it.
  EXPECT_EQ(coord_->PsKeyShapeOf(key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(Beat(w2).has_assignment());
  Beat(w1, job);
  Beat(w2, job);
  EXPECT_EQ(control.sets.size(), 1u);  // once per generation
  // Sent again every 5 s while the job runs (a lost message, a restarted
  // shard), the same keys.
  coord_->Tick();  // the first tick sends them
  ASSERT_EQ(control.sets.size(), 2u);
  control.sets.pop_back();
  coord_->Tick();
  EXPECT_EQ(control.sets.size(), 1u);  // not before another 5 s
  for (int i = 0; i < 2; ++i) {  // the workers stay alive meanwhile
    clock_.Advance(absl::Milliseconds(2500));
    Beat(w1, job);
    Beat(w2, job);
  }
  coord_->Tick();
  ASSERT_EQ(control.sets.size(), 2u);
  ASSERT_EQ(control.sets[1].secrets.size(), 2u);
  EXPECT_EQ(control.sets[1].shards, control.sets[0].shards);
  EXPECT_EQ(control.sets[1].secrets[0].job, key);
  EXPECT_EQ(control.sets[1].secrets[1].secret, secret);
  coord_->Tick();
  EXPECT_EQ(control.sets.size(), 2u);  // not before another 5 s
  control.sets.pop_back();
  EXPECT_TRUE(coord_->IsDataPlaneSecret(key, secret));
  EXPECT_TRUE(coord_->IsDataPlaneSecret(shape, secret));
  EXPECT_FALSE(coord_->IsDataPlaneSecret(key + 1, secret));
  EXPECT_FALSE(coord_->IsDataPlaneSecret(key, std::string(secret.size(), 'x')));
  EXPECT_FALSE(coord_->IsDataPlaneSecret(key, ""));
  EXPECT_TRUE(control.forgets.empty());
  ASSERT_TRUE(coord_->CancelJob(job).ok());
  ASSERT_EQ(control.forgets.size(), 1u);
  EXPECT_EQ(control.forgets[0].shards, control.sets[0].shards);
  EXPECT_EQ(control.forgets[0].forget, (std::vector<uint64_t>{key, shape}));
  clock_.Advance(absl::Milliseconds(2500));
  Beat(w1);
  Beat(w2);
  clock_.Advance(absl::Milliseconds(2500));
  coord_->Tick();
  EXPECT_EQ(control.sets.size(), 1u);  // an ended job's keys are not sent again

  spec.set_ps_transport(v1::GRPC);
  Submit(spec);
  Beat(w1);
  const v1::HeartbeatReply b2 = Beat(w2);
  ASSERT_TRUE(b2.has_assignment());
  ASSERT_EQ(control.sets.size(), 2u);
  ASSERT_EQ(control.sets[1].secrets.size(), 2u);
  EXPECT_EQ(control.sets[1].secrets[0].job, b2.assignment().group_key());
  for (const PsKeyStart& k : control.sets[1].secrets) {
    EXPECT_EQ(k.secret, "");
    EXPECT_EQ(k.num_workers, 2);
    EXPECT_EQ(k.num_shards, 2);
  }
}

// A resumed job names its checkpoints' writer (rank 0 of the job it
// resumes) as the source to fetch the file from when that worker is alive
// but not the new rank 0 (busy with another job); when it is idle it is
// rank 0 again and reads its own files (no source).
TEST_F(CoordinatorTest, AResumedJobNamesItsBusyCheckpointWriter) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  v1::JobSpec spec = Spec(2);
  spec.set_checkpoint_dir("/ck");
  const uint64_t a = Submit(spec);  // ranks: w-1 (writes), w-2
  ASSERT_TRUE(Beat(w1).has_assignment());
  ASSERT_TRUE(Beat(w2).has_assignment());
  ASSERT_TRUE(coord_->CancelJob(a).ok());
  for (const std::string& w : {w1, w2, w3}) Beat(w);  // idle again
  v1::JobSpec resume = spec;
  resume.mutable_resume_from()->set_checkpoint_dir("/ck");
  resume.mutable_resume_from()->set_job_id(a);
  // The writer idle: rank 0 again, no source.
  const uint64_t r1 = Submit(resume);
  v1::HeartbeatReply b = Beat(w1);
  ASSERT_TRUE(b.has_assignment());
  EXPECT_EQ(b.assignment().rank(), 0);
  EXPECT_EQ(b.assignment().checkpoint_source(), "");
  ASSERT_TRUE(coord_->CancelJob(r1).ok());
  for (const std::string& w : {w1, w2, w3}) Beat(w);
  // The writer busy with a job of one: the resumed job runs on w-2 and w-3
  // and names w-1.
  Submit(Spec(1));
  b = Beat(w1);
  ASSERT_TRUE(b.has_assignment());
  EXPECT_EQ(b.assignment().checkpoint_source(), "");  // not a resume
  Submit(resume);
  b = Beat(w2);
  ASSERT_TRUE(b.has_assignment());
  EXPECT_EQ(b.assignment().rank(), 0);
  EXPECT_EQ(b.assignment().checkpoint_source(), "10.0.0.1:5000");
}

// The coordinator's own shard creates only the keys of its running ps
// jobs' current generations (PsKeyShapeOf, what its registry asks), with
// their K and S; not another key, not once the job ended.
TEST_F(CoordinatorTest, ItsOwnPsShardKnowsOnlyRunningJobsKeys) {
  const std::string w1 = Register(1), w2 = Register(2);
  const uint64_t job = Submit(Spec(2, v1::PS));
  const v1::HeartbeatReply b1 = Beat(w1);
  ASSERT_TRUE(b1.has_assignment());
  ASSERT_TRUE(b1.assignment().coordinator_ps_shard());
  const uint64_t key = b1.assignment().group_key();
  for (uint64_t k : {key, key | (uint64_t{1} << 63)}) {
    absl::StatusOr<PsKeyShape> shape = coord_->PsKeyShapeOf(k);
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->num_workers, 2);
    EXPECT_EQ(shape->num_shards, 1);
  }
  absl::StatusOr<PsKeyShape> other = coord_->PsKeyShapeOf(key + 1);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(other.status().message().find("is no running ps job's current group"),
            std::string::npos)
      << other.status();
  ASSERT_TRUE(coord_->CancelJob(job).ok());
  EXPECT_EQ(coord_->PsKeyShapeOf(key).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace testing_coordinator
}  // namespace lockstep
