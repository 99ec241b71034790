#include "common/train/job_memory.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(JobMemoryTest, ClosedFormForAnMlpWithAdam) {
  TrainSpec spec;
  spec.model = "mlp:256";
  spec.global_batch = 128;
  spec.optimizer.kind = "adam";
  auto n = ComputeJobMemoryNeed(spec, 784, 10, 2);
  ASSERT_TRUE(n.ok()) << n.status();
  const int64_t p = 784 * 256 + 256 + 256 * 10 + 10;  // 203530
  EXPECT_EQ(n->num_params, p);
  EXPECT_EQ(n->parameters, 4 * p);
  EXPECT_EQ(n->gradient, 4 * (p + 1));
  EXPECT_EQ(n->optimizer, 2 * 4 * p);
  EXPECT_EQ(n->combine, 4 * (p + 1));
  EXPECT_EQ(n->activations, 8 * 64 * (256 + 10));  // b = 128 / 2
  EXPECT_EQ(n->total, 4 * p + 8 * (p + 1) + 8 * p + 8 * 64 * 266);
}

TEST(JobMemoryTest, SgdSlotsFollowMomentum) {
  TrainSpec spec;
  spec.model = "softmax";
  spec.global_batch = 3;
  auto plain = ComputeJobMemoryNeed(spec, 4, 3, 2);  // b = 2
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->optimizer, 0);
  EXPECT_EQ(plain->activations, 8 * 2 * 3);
  spec.optimizer.momentum = 0.9f;
  auto momentum = ComputeJobMemoryNeed(spec, 4, 3, 2);
  ASSERT_TRUE(momentum.ok());
  EXPECT_EQ(momentum->optimizer, 4 * 15);
}

// Issue 11: --model=mlp:1000000000 on Fashion-MNIST: 795e9 parameters,
// about 16 TB with SGD momentum; refused naming need and limit.
TEST(JobMemoryTest, AHugeModelIsRefusedNamingNeedAndLimit) {
  TrainSpec spec;
  spec.model = "mlp:1000000000";
  spec.optimizer.momentum = 0.9f;
  auto n = ComputeJobMemoryNeed(spec, 784, 10, 1);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->num_params, int64_t{784} * 1000000000 + 1000000000 + 10000000000 + 10);
  absl::Status s = CheckJobMemory(*n, int64_t{8} << 30, "worker w-1", "--max_job_memory_bytes");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("worker w-1: job needs " + std::to_string(n->total) + " bytes"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("limit is 8589934592 bytes (8.6 GB, --max_job_memory_bytes)"),
            std::string::npos)
      << s;
  EXPECT_TRUE(CheckJobMemory(*n, 0, "w", "none").ok());  // no limit
}

TEST(JobMemoryTest, OverflowIsOutOfRangeNotAWrap) {
  TrainSpec spec;
  spec.model = "mlp:1000000,1000000,1000000";
  spec.optimizer.kind = "adam";
  auto n = ComputeJobMemoryNeed(spec, 1000000, 10, 1);
  // 3e12 parameters fit int64 but not kMaxModelParams (2^40): the model
  // spec is refused before any size is computed.
  EXPECT_FALSE(n.ok());
}

TEST(JobMemoryTest, DefaultLimitIsPositive) { EXPECT_GT(DefaultMaxJobMemoryBytes(), 0); }

}  // namespace
}  // namespace lockstep
