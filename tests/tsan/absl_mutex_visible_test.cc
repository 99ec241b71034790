// Checks that ThreadSanitizer sees absl::Mutex and absl::Notification.
//
// Debian's libabsl is built without -fsanitize=thread: absl::Mutex's Lock and
// Unlock live in libabsl_synchronization.so and synchronise with atomics and
// futexes TSan never observes. Every ABSL_GUARDED_BY field would then be
// reported as a data race. tests/tsan/run_tsan.sh links the tsan build
// against an abseil rebuilt with TSan (same soname, via the binaries' rpath).
//
// Tagged manual: it runs only in the tsan set (run_tsan.sh names it), and it
// fails in any other build (it would prove nothing there). Under TSan it
// fails (1) when the file that absl::Mutex::Lock was loaded from does not
// call the TSan runtime's mutex hooks (`__tsan_mutex_pre_lock`: Debian's
// /usr/lib copy does not), and (2) with a "data race" report on `value` /
// `payload` (TSAN_OPTIONS halt_on_error=1) when the mutex is invisible.
#include <dlfcn.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_THREAD__)
#define LOCKSTEP_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOCKSTEP_UNDER_TSAN 1
#endif
#endif

namespace {

TEST(AbslMutexVisibleTest, BuiltWithThreadSanitizer) {
#ifndef LOCKSTEP_UNDER_TSAN
  FAIL() << "built without -fsanitize=thread: run it with "
            "`bash tests/tsan/run_tsan.sh` (--config=tsan)";
#endif
}

TEST(AbslMutexVisibleTest, LoadedAbslSynchronizationIsInstrumented) {
  // The shared object absl::Mutex::Lock resolved to in this process.
  void (absl::Mutex::*lock)() = &absl::Mutex::Lock;
  void* address = nullptr;
  static_assert(sizeof(lock) >= sizeof(address), "member pointer layout");
  std::memcpy(&address, &lock, sizeof(address));  // Itanium ABI: non-virtual
  Dl_info info{};
  ASSERT_NE(dladdr(address, &info), 0) << "dladdr found no object for Lock";
  ASSERT_NE(info.dli_fname, nullptr);
  const std::string path = info.dli_fname;
  std::ifstream file(path, std::ios::binary);
  ASSERT_TRUE(file) << "cannot open " << path;
  const std::string bytes((std::istreambuf_iterator<char>(file)),
                          std::istreambuf_iterator<char>());
  EXPECT_NE(path.find("libabsl_synchronization"), std::string::npos)
      << "absl::Mutex::Lock came from " << path
      << ", expected the shared libabsl_synchronization";
  EXPECT_NE(bytes.find("__tsan_mutex_pre_lock"), std::string::npos)
      << path << " (where absl::Mutex::Lock was loaded from) is not built "
      << "with -fsanitize=thread: TSan cannot see absl::Mutex. Expected the "
      << "rebuilt copy run_tsan.sh links in via RPATH";
}

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
