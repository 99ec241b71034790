#include "bench/bench_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace lockstep::bench {
namespace {

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

void RedirectOrDie(const std::string& path, int fd) {
  if (path.empty()) return;
  const int f = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (f < 0 || dup2(f, fd) < 0) _exit(126);
  close(f);
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const Env& env,
                            const std::string& out_path, const std::string& err_path) {
  if (argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Dies with the benchmark (also when it is killed), so no daemon outlives it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(125);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    RedirectOrDie(out_path, 1);
    RedirectOrDie(err_path, 2);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

absl::StatusOr<int> WaitExit(pid_t pid, absl::Duration timeout, const std::string& what) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t p = waitpid(pid, &status, WNOHANG);
    if (p == pid) return ExitCode(status);
    if (p < 0) return absl::InternalError(absl::StrCat(what, ": waitpid: ", std::strerror(errno)));
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " (pid ", pid, ") still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void Stop(const std::vector<pid_t>& pids, absl::Duration grace) {
  std::vector<pid_t> alive;
  for (pid_t p : pids) {
    if (p > 0 && kill(p, SIGTERM) == 0) alive.push_back(p);
  }
  const absl::Time deadline = absl::Now() + grace;
  while (!alive.empty()) {
    for (auto it = alive.begin(); it != alive.end();) {
      int status;
      const pid_t r = waitpid(*it, &status, WNOHANG);
      it = (r == *it || r < 0) ? alive.erase(it) : it + 1;
    }
    if (alive.empty()) break;
    if (absl::Now() > deadline) {
      for (pid_t p : alive) kill(p, SIGKILL);
      for (pid_t p : alive) {
        int status;
        waitpid(p, &status, 0);
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::StatusOr<int> WaitPortFile(const std::string& path, pid_t pid, absl::Duration timeout,
                                 const std::string& what, const std::string& log_path) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<std::string> text = ReadFile(path);
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0 &&
        port < 65536) {
      return port;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " exited with code ", ExitCode(status), " before writing ", path, " (log: ",
          log_path, ")"));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " wrote no port to ", path, " within ",
                                                      absl::FormatDuration(timeout),
                                                      " (log: ", log_path, ")"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  std::string tmpl = absl::StrCat("/tmp/", prefix, "XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return tmpl;
}

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

absl::StatusOr<std::string> FindRunfilesRoot(const std::string& flag_dir,
                                             const std::string& probe) {
  std::vector<std::string> candidates;
  if (!flag_dir.empty()) {
    candidates.push_back(flag_dir);
  } else {
    if (const char* r = std::getenv("RUNFILES_DIR")) candidates.push_back(absl::StrCat(r, "/lockstep"));
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      candidates.push_back(absl::StrCat(self, ".runfiles/lockstep"));
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) candidates.push_back(cwd);
  }
  for (const std::string& c : candidates) {
    if (access(absl::StrCat(c, "/", probe).c_str(), R_OK) == 0) return c;
  }
  return absl::NotFoundError(absl::StrCat("no ", probe, " under any of: ",
                                          absl::StrJoin(candidates, ", "),
                                          " (build with bazel, or pass --bin_dir)"));
}

bool Succeeds(const std::vector<std::string>& argv, absl::Duration timeout) {
  absl::StatusOr<pid_t> pid = Spawn(argv, {}, "/dev/null", "/dev/null");
  if (!pid.ok()) return false;
  absl::StatusOr<int> rc = WaitExit(*pid, timeout, argv[0]);
  if (!rc.ok()) {
    Stop({*pid}, absl::Seconds(1));
    return false;
  }
  return *rc == 0;
}

}  // namespace lockstep::bench
