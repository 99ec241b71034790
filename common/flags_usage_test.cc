#include "common/flags_usage.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(FlagsUsageTest, LockstepSourceFiles) {
  for (const char* f : {"common/train/job_flags.cc", "common/log_flags.cc", "server/coordinator_main.cc",
                        "server/ps/ps_server_main.cc", "worker/worker_main.cc",
                        "/work/main/worker/train_main.cc", "./client/lockstep_main.cc"}) {
    EXPECT_TRUE(IsLockstepSourceFile(f)) << f;
  }
  for (const char* f : {"absl/flags/parse.cc", "external/x/common.cc", "bench/allreduce.cc",
                        "tests/x.cc", "myworker/x.cc", "", "worker"}) {
    EXPECT_FALSE(IsLockstepSourceFile(f)) << f;
  }
}

}  // namespace
}  // namespace lockstep
