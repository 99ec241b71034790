#include "common/fifo.h"

#include <deque>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(FifoTest, FirstInFirstOutAcrossWrapAndGrowth) {
  Fifo<int> q;
  std::deque<int> ref;
  int next = 0;
  // Interleave pushes and pops so the ring wraps, grows while wrapped, and
  // shrinks back to empty several times.
  for (int round = 0; round < 50; ++round) {
    const int pushes = (round * 7) % 23 + 1;
    const int pops = (round * 5) % 19;
    for (int i = 0; i < pushes; ++i) {
      q.push_back(next);
      ref.push_back(next);
      ++next;
    }
    for (int i = 0; i < pops && !ref.empty(); ++i) {
      ASSERT_EQ(q.front(), ref.front());
      q.pop_front();
      ref.pop_front();
    }
    ASSERT_EQ(q.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(q[i], ref[i]) << "round " << round;
    if (!ref.empty()) {
      EXPECT_EQ(q.back(), ref.back());
    }
  }
  q.clear();
  EXPECT_TRUE(q.empty());
}

TEST(FifoTest, KeepsCapacityInASteadyStream) {
  Fifo<std::string> q;
  for (int i = 0; i < 5; ++i) q.push_back(std::string(40, 'a' + i));
  const size_t cap = q.capacity();
  EXPECT_GE(cap, 5u);
  for (int i = 0; i < 1000; ++i) {
    q.push_back(std::string(3, 'x'));
    q.pop_front();
  }
  EXPECT_EQ(q.capacity(), cap);
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(q.front(), "xxx");
}

TEST(FifoTest, PopReleasesWhatTheElementOwns) {
  Fifo<std::shared_ptr<int>> q;
  auto p = std::make_shared<int>(3);
  q.push_back(p);
  EXPECT_EQ(p.use_count(), 2);
  q.pop_front();
  EXPECT_EQ(p.use_count(), 1);
  q.push_back(p);
  q.clear();
  EXPECT_EQ(p.use_count(), 1);
}

}  // namespace
}  // namespace lockstep
