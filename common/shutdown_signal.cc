#include "common/shutdown_signal.h"

#include <fcntl.h>
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
  return absl::OkStatus();
}

int WaitForShutdownSignal() {
  unsigned char sig = 0;
  while (read(g_pipe[0], &sig, 1) != 1) {  // EINTR: retry
  }
  return sig;
}

const char* ShutdownSignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

}  // namespace lockstep
