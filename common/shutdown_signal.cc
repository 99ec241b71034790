#include "common/shutdown_signal.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace lockstep {
namespace {

// The pipe: a signal handler can reach nothing but globals.
int g_pipe[2] = {-1, -1};

void OnShutdownSignal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (write(g_pipe[1], &byte, 1) < 0) {
    // The pipe never fills in practice (one byte per signal).
  }
  errno = saved_errno;
}

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

absl::Status InstallShutdownSignalHandlers() {
  if (g_pipe[0] < 0 && pipe2(g_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError("cannot create the signal pipe");
  }
  struct sigaction action = {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Threads started from here on (gRPC's, ours) inherit the block: the
  // signals go to the thread in WaitForShutdownSignal (which unblocks them)
  // or, until one waits, to a thread started before main (OpenBLAS), whose
  // handler call writes the pipe all the same.
  const sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return absl::OkStatus();
}

int WaitForShutdownSignal() {
  const sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  // A poll with a timeout, not one blocking read: ThreadSanitizer defers a
  // signal that arrives outside a call it treats as blocking until the
  // thread's next intercepted call, and a read that never returns never
  // gets there (the daemons then ignored SIGTERM under TSan).
  unsigned char sig = 0;
  for (;;) {
    struct pollfd p = {g_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 200) == 1 && read(g_pipe[0], &sig, 1) == 1) return sig;
  }
}

const char* ShutdownSignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

}  // namespace lockstep
