// The checkpoint / resume job flags (job_flags.h).
#include <set>
#include <string>

#include "absl/flags/flag.h"
#include "common/train/job_flags.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every_steps);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every_seconds);
ABSL_DECLARE_FLAG(int32_t, checkpoint_keep);
ABSL_DECLARE_FLAG(std::string, resume_from);

namespace lockstep {
namespace {

TEST(ParseResumeFromTest, AJobDirectoryOrOneCheckpointFile) {
  auto r = ParseResumeFrom("/ck/job-12");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checkpoint_dir(), "/ck");
  EXPECT_EQ(r->job_id(), 12u);
  EXPECT_EQ(r->step(), 0);
  r = ParseResumeFrom("/ck/job-12/");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job_id(), 12u);
  r = ParseResumeFrom("/data/ck/job-3/step-000000000120.ckpt");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checkpoint_dir(), "/data/ck");
  EXPECT_EQ(r->job_id(), 3u);
  EXPECT_EQ(r->step(), 120);
  r = ParseResumeFrom("job-4");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checkpoint_dir(), ".");
  for (const char* bad : {"/ck", "/ck/job-0", "/ck/job-x", "/ck/job-3/step-0.ckpt",
                          "/ck/job-3/step-12.bin", "/ck/step-000000000120.ckpt"}) {
    r = ParseResumeFrom(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(r.status().message(),
              std::string("expected DIR/job-<id> (a job's checkpoint directory) or "
                          "DIR/job-<id>/step-<N>.ckpt (one checkpoint), got \"") +
                  bad + "\"");
  }
}

TEST(CheckpointFlagsTest, GoIntoTheSpec) {
  absl::SetFlag(&FLAGS_checkpoint_dir, "/ck");
  absl::SetFlag(&FLAGS_checkpoint_every_steps, 100);
  absl::SetFlag(&FLAGS_checkpoint_every_seconds, 60);
  absl::SetFlag(&FLAGS_checkpoint_keep, 5);
  absl::SetFlag(&FLAGS_resume_from, "/ck/job-7/step-000000000300.ckpt");
  auto spec = JobSpecFromFlags({});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint_dir(), "/ck");
  EXPECT_EQ(spec->checkpoint_every_steps(), 100);
  EXPECT_EQ(spec->checkpoint_every_seconds(), 60);
  EXPECT_EQ(spec->checkpoint_keep(), 5);
  EXPECT_EQ(spec->resume_from().checkpoint_dir(), "/ck");
  EXPECT_EQ(spec->resume_from().job_id(), 7u);
  EXPECT_EQ(spec->resume_from().step(), 300);
  absl::SetFlag(&FLAGS_resume_from, "/ck/7");
  EXPECT_EQ(JobSpecFromFlags({}).status().message(),
            "--resume_from: expected DIR/job-<id> (a job's checkpoint directory) or "
            "DIR/job-<id>/step-<N>.ckpt (one checkpoint), got \"/ck/7\"");
  absl::SetFlag(&FLAGS_resume_from, "");
  spec = JobSpecFromFlags({});
  ASSERT_TRUE(spec.ok());
  EXPECT_FALSE(spec->has_resume_from());
}

}  // namespace
}  // namespace lockstep
