// Child processes and files for the benchmarks that start real daemons
// (//bench:scaling): fork/exec with a log file, bounded waits, port files,
// and finding the binaries in the Bazel runfiles. Benchmark support only;
// nothing in the product links it.
#ifndef LOCKSTEP_BENCH_BENCH_PROCESS_H_
#define LOCKSTEP_BENCH_BENCH_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::bench {

using Env = std::vector<std::pair<std::string, std::string>>;

// fork + exec `argv` (argv[0] looked up on PATH if it has no '/') with
// `env` added to this process's environment; stdout goes to `out_path` and
// stderr to `err_path` (each "" = inherited). The child gets SIGTERM when
// this process dies (PR_SET_PDEATHSIG), so no daemon outlives the
// benchmark. Call from the main thread. Errors: fork failed.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const Env& env,
                            const std::string& out_path, const std::string& err_path);

// Waits until `pid` exits or `timeout` passes. Returns its exit code (0..255;
// 128 + signal if killed); DeadlineExceeded naming `what` on timeout (the
// process is left running: call Stop).
absl::StatusOr<int> WaitExit(pid_t pid, absl::Duration timeout, const std::string& what);

// SIGTERM to each pid, waits up to `grace` for all of them, then SIGKILL to
// the rest and reaps them. Only the given pids are signalled.
void Stop(const std::vector<pid_t>& pids, absl::Duration grace);

// Reads a whole file; NotFound naming it.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Polls `path` until it holds a port number (1..65535), or `timeout`
// passes, or `pid` exits (then FailedPrecondition naming `what` and the
// log `log_path`).
absl::StatusOr<int> WaitPortFile(const std::string& path, pid_t pid, absl::Duration timeout,
                                 const std::string& what, const std::string& log_path);

// mkdtemp under /tmp with `prefix`; Internal on failure.
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);

// Removes a directory tree (best effort).
void RemoveTree(const std::string& dir);

// The directory the workspace's files appear under at run time: `flag_dir`
// if not empty, else the first of $RUNFILES_DIR/lockstep,
// <this executable>.runfiles/lockstep and the current directory (`bazel
// run` starts there) that holds `probe` (a workspace-relative path).
// NotFound naming the candidates.
absl::StatusOr<std::string> FindRunfilesRoot(const std::string& flag_dir,
                                             const std::string& probe);

// True when `program` runs and exits 0 with `args` (output discarded),
// within `timeout`.
bool Succeeds(const std::vector<std::string>& argv, absl::Duration timeout);

}  // namespace lockstep::bench

#endif  // LOCKSTEP_BENCH_BENCH_PROCESS_H_
