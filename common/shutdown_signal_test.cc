// The daemons' SIGINT/SIGTERM wait (shutdown_signal.h). One process-wide
// installation, so the cases run in order in one test.
#include "common/shutdown_signal.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

bool Blocks(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

TEST(ShutdownSignalTest, ThreadsStartedAfterInstallBlockItAndTheWaiterGetsIt) {
  ASSERT_TRUE(InstallShutdownSignalHandlers().ok());
  EXPECT_TRUE(Blocks(SIGTERM));
  EXPECT_TRUE(Blocks(SIGINT));

  // A thread started after Install inherits the block.
  std::atomic<bool> helper_blocks{false};
  std::thread([&] { helper_blocks = Blocks(SIGTERM) && Blocks(SIGINT); }).join();
  EXPECT_TRUE(helper_blocks);

  // A signal sent while nobody waits stays pending and reaches the next
  // Wait (called here on the installing thread).
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_EQ(WaitForShutdownSignal(), SIGINT);
  // Wait leaves them unblocked on its thread; block them here again so the
  // next one goes to the next waiter (a daemon waits once, on one thread).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  // A waiter on another thread gets SIGTERM sent to the process while it
  // waits (the daemons' case; under ThreadSanitizer a read that never
  // returned used to keep it forever). Bounded: a waiter that never returns
  // fails the test instead of hanging it (the thread is detached).
  auto got = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<absl::Notification>();
  auto started = std::make_shared<absl::Notification>();
  std::thread([got, done, started] {
    started->Notify();
    *got = WaitForShutdownSignal();
    done->Notify();
  }).detach();
  started->WaitForNotification();
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  ASSERT_TRUE(done->WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "WaitForShutdownSignal did not return within 10 s of SIGTERM";
  EXPECT_EQ(got->load(), SIGTERM);
  EXPECT_STREQ(ShutdownSignalName(SIGTERM), "SIGTERM");
}

}  // namespace
}  // namespace lockstep
