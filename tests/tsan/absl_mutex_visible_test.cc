// Checks that ThreadSanitizer sees absl::Mutex and absl::Notification.
//
// Debian's libabsl is built without -fsanitize=thread: absl::Mutex's Lock and
// Unlock live in libabsl_synchronization.so and synchronise with atomics and
// futexes TSan never observes. Every ABSL_GUARDED_BY field would then be
// reported as a data race. tests/tsan/run_tsan.sh links the tsan build
// against an abseil rebuilt with TSan (same soname, via the binaries' rpath).
// Under `--config=tsan` (TSAN_OPTIONS halt_on_error=1) this test fails with a
// "data race" report on `counter` / `payload` when the uninstrumented
// library is the one loaded; in other builds it checks the plain results.
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace {

struct Counter {
  absl::Mutex mu;
  long value ABSL_GUARDED_BY(mu) = 0;
};

TEST(AbslMutexVisibleTest, GuardedCounterFromTwoThreads) {
  Counter c;
  constexpr int kPerThread = 2000;
  auto work = [&c] {
    for (int i = 0; i < kPerThread; ++i) {
      absl::MutexLock lock(&c.mu);
      ++c.value;
    }
  };
  std::thread other(work);
  work();
  other.join();
  absl::MutexLock lock(&c.mu);
  EXPECT_EQ(c.value, 2 * kPerThread);
}

TEST(AbslMutexVisibleTest, NotificationPublishesPlainWrites) {
  std::vector<int> payload;  // written before Notify, read after the wait
  absl::Notification ready;
  std::thread producer([&] {
    payload.assign({4, 1, 7});
    ready.Notify();
  });
  ASSERT_TRUE(ready.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(payload, (std::vector<int>{4, 1, 7}));
  producer.join();
}

}  // namespace
