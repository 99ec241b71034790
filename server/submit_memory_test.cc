// CheckJobMemoryAtSubmit (server/submit_memory.h): closed-form needs of a
// small MLP against the coordinator's limit and the live workers' limits.
#include "server/submit_memory.h"

#include <string>

#include "gtest/gtest.h"
#include "proto/job.pb.h"

namespace lockstep {
namespace {

// mlp:1000, K = 1, batch 8, plain SGD, counted with 1 feature and 2
// classes: p = 1000 + 1000 + 2000 + 2 = 4002; parameters 4p = 16008,
// gradient and combine 4(p + 1) = 16012 each, no optimizer state,
// activations 8 x 8 x (1000 + 2) = 64128.
constexpr int64_t kNeed = 16008 + 16012 + 16012 + 64128;  // 112160

v1::JobSpec Spec(const std::string& model, int k) {
  v1::JobSpec spec;
  spec.set_model(model);
  spec.set_sync_mode(v1::RING);
  spec.mutable_data()->set_dataset("csv:train.csv;test.csv");
  spec.set_num_workers(k);
  spec.set_global_batch(8 * k);
  spec.set_steps(5);
  spec.mutable_lr()->set_base_lr(0.1f);
  return spec;
}

TEST(SubmitMemoryTest, WithinEveryLimitIsAccepted) {
  EXPECT_TRUE(CheckJobMemoryAtSubmit(Spec("mlp:1000", 1), kNeed, {kNeed, 0}).ok());
  EXPECT_TRUE(CheckJobMemoryAtSubmit(Spec("mlp:1000", 1), 0, {}).ok());  // no limits at all
}

TEST(SubmitMemoryTest, OverTheCoordinatorLimitIsRefusedNamingNeedAndLimit) {
  absl::Status s = CheckJobMemoryAtSubmit(Spec("mlp:1000", 1), kNeed - 1, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  const std::string m(s.message());
  EXPECT_NE(m.find("SubmitJob: job needs at least 112160 bytes of memory per worker"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("4002 parameters"), std::string::npos) << m;
  EXPECT_NE(m.find("counted with 1 input feature(s) and 2 classes"), std::string::npos) << m;
  EXPECT_NE(m.find("but the limit is 112159 bytes (112.2 kB, the coordinator's "
                   "--max_job_memory_bytes)"),
            std::string::npos)
      << m;
}

TEST(SubmitMemoryTest, FewerThanKLiveWorkersThatCanHoldItIsRefused) {
  // K = 2: per-worker batch 8 as above. Two live workers, one too small.
  absl::Status s = CheckJobMemoryAtSubmit(Spec("mlp:1000", 2), 0, {kNeed - 1, kNeed});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("but only 1 of the 2 live workers can hold it and 2 are needed; the "
                             "largest worker limit is 112160 bytes (112.2 kB, its "
                             "--max_job_memory_bytes)"),
            std::string::npos)
      << s;
  // A third worker without a limit makes two that can.
  EXPECT_TRUE(CheckJobMemoryAtSubmit(Spec("mlp:1000", 2), 0, {kNeed - 1, kNeed, 0}).ok());
  // Fewer live workers than K: the job waits for more, every live one must fit.
  EXPECT_TRUE(CheckJobMemoryAtSubmit(Spec("mlp:1000", 2), 0, {kNeed}).ok());
  EXPECT_EQ(CheckJobMemoryAtSubmit(Spec("mlp:1000", 2), 0, {kNeed - 1}).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(SubmitMemoryTest, TheStatedShapeCounts) {
  v1::JobSpec spec = Spec("mlp:1000", 1);
  spec.mutable_data()->set_dataset("libsvm:a.svm");
  spec.mutable_data()->set_dim(3);
  spec.mutable_data()->set_num_classes(4);
  // p = 3000 + 1000 + 4000 + 4 = 8004; 4p + 8(p + 1) + 64 x 1004.
  const int64_t need = 4 * 8004 + 8 * 8005 + 64 * 1004;
  EXPECT_TRUE(CheckJobMemoryAtSubmit(spec, need, {}).ok());
  absl::Status s = CheckJobMemoryAtSubmit(spec, need - 1, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("counted with 3 input feature(s) and 4 classes"), std::string::npos)
      << s;
}

// Issue 11: lockstep submit --workers=1 --model=mlp:1000000000 is refused at
// once (it used to be accepted and kill its worker with std::bad_alloc).
TEST(SubmitMemoryTest, TheIssuesHugeModelIsRefused) {
  absl::Status s = CheckJobMemoryAtSubmit(Spec("mlp:1000000000", 1), int64_t{8} << 30, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("but the limit is 8589934592 bytes (8.6 GB"), std::string::npos)
      << s;
}

TEST(SubmitMemoryTest, ASpecThatDoesNotConvertIsLeftToValidation) {
  EXPECT_TRUE(CheckJobMemoryAtSubmit(Spec("nonsense", 1), 1, {1}).ok());
}

}  // namespace
}  // namespace lockstep
