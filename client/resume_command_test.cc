#include "client/resume_command.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

v1::JobStatus Old(v1::JobState state) {
  v1::JobStatus j;
  j.set_job_id(7);
  j.set_state(state);
  j.mutable_spec()->set_model("mlp:256");
  j.mutable_spec()->set_seed(3);
  j.mutable_spec()->set_steps(500);
  j.mutable_spec()->set_checkpoint_dir("/ck");
  j.mutable_spec()->set_checkpoint_every_steps(100);
  return j;
}

TEST(ResumeSpecTest, PointsTheSameRunAtTheOldJobsCheckpoints) {
  auto spec = ResumeSpec(Old(v1::FAILED), 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), "mlp:256");
  EXPECT_EQ(spec->seed(), 3u);
  EXPECT_EQ(spec->steps(), 500);
  EXPECT_EQ(spec->checkpoint_dir(), "/ck");
  EXPECT_EQ(spec->checkpoint_every_steps(), 100);
  EXPECT_EQ(spec->resume_from().checkpoint_dir(), "/ck");
  EXPECT_EQ(spec->resume_from().job_id(), 7u);
  EXPECT_EQ(spec->resume_from().step(), 0);
  EXPECT_EQ(spec->name(), "resume of job 7");
  v1::JobStatus named = Old(v1::CANCELLED);
  named.mutable_spec()->set_name("fmnist");
  // A resumed job resumed again points at its own checkpoints.
  named.mutable_spec()->mutable_resume_from()->set_job_id(3);
  spec = ResumeSpec(named, 300);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->name(), "fmnist (resume of job 7)");
  EXPECT_EQ(spec->resume_from().job_id(), 7u);
  EXPECT_EQ(spec->resume_from().step(), 300);
}

TEST(ResumeSpecTest, RefusesAJobWithoutCheckpointsOrStillRunning) {
  v1::JobStatus none = Old(v1::FAILED);
  none.mutable_spec()->clear_checkpoint_dir();
  EXPECT_EQ(ResumeSpec(none, 0).status().message(),
            "job 7 wrote no checkpoints (its spec has no checkpoint_dir; submit with "
            "--checkpoint_dir=DIR to checkpoint a job)");
  EXPECT_EQ(ResumeSpec(Old(v1::RUNNING), 0).status().message(),
            "job 7 is RUNNING: resume a job that has ended (lockstep cancel 7 first)");
  EXPECT_EQ(ResumeSpec(Old(v1::PENDING), 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResumeSpec(Old(v1::FAILED), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
