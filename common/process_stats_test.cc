#include "common/process_stats.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ProcessStatsTest, ParsesStatm) {
  EXPECT_EQ(ResidentBytesFromStatm("1000 250 30 4 0 500 0\n", 4096),
            250 * 4096);
  EXPECT_EQ(ResidentBytesFromStatm("  7 3", 100), 300);
  EXPECT_EQ(ResidentBytesFromStatm("", 4096), 0);
  EXPECT_EQ(ResidentBytesFromStatm("12", 4096), 0);
  EXPECT_EQ(ResidentBytesFromStatm("12 x", 4096), 0);
  EXPECT_EQ(ResidentBytesFromStatm("12 5", 0), 0);
}

TEST(ProcessStatsTest, ResidentBytesFollowsTouchedPages) {
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  // 64 MiB of fresh anonymous memory counts only once touched.
  const size_t bytes = 64 << 20;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  const int64_t faults_before = ThreadMinorPageFaults();
  std::memset(mem, 1, bytes);
  const int64_t faults_after = ThreadMinorPageFaults();
  const int64_t touched = ResidentBytes();
  // Other threads (gtest has none running) could only add; allow a little
  // slack downward for pages the kernel reclaimed elsewhere.
  EXPECT_GE(touched - before, static_cast<int64_t>(bytes) - 4 * page);
  // Each touched page faulted at least once on this thread, unless the
  // kernel handed out huge pages (then at least one fault per 2 MiB).
  EXPECT_GE(faults_after - faults_before,
            static_cast<int64_t>(bytes / (2 << 20)));
  ASSERT_EQ(::munmap(mem, bytes), 0);
  EXPECT_LT(ResidentBytes(), touched - static_cast<int64_t>(bytes) / 2);
}

TEST(ProcessStatsTest, MajorFaultsReadable) {
  EXPECT_GE(ThreadMajorPageFaults(), 0);
}

}  // namespace
}  // namespace lockstep
