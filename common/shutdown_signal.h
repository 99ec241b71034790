// Waiting for SIGINT / SIGTERM in a daemon's main().
//
// A handler writes the signal number to a self-pipe and Wait() reads it.
// (Not sigwait with blocked signals: OpenBLAS starts threads before main,
// and a signal delivered to one of those, which never blocked it, would
// kill the process.) SIGPIPE is ignored.
//
// Install blocks SIGINT and SIGTERM in the calling thread, so every thread
// it starts afterwards blocks them too; Wait() unblocks them in its own
// thread, which then receives them (a thread started before Install, such
// as OpenBLAS's, may still run the handler: the pipe carries it).
//
// Process-wide by nature: install once, from main, before starting other
// threads. Wait() may be called from any one thread started after Install
// (or main itself); that thread keeps them unblocked afterwards.
#ifndef LOCKSTEP_COMMON_SHUTDOWN_SIGNAL_H_
#define LOCKSTEP_COMMON_SHUTDOWN_SIGNAL_H_

#include "absl/status/status.h"

namespace lockstep {

// Installs the handlers. Internal error if the pipe cannot be created.
absl::Status InstallShutdownSignalHandlers();

// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForShutdownSignal();

// "SIGINT" / "SIGTERM" / "signal N".
const char* ShutdownSignalName(int sig);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SHUTDOWN_SIGNAL_H_
