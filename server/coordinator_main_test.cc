// Runs the lockstep-coordinator binary: flags, port file, exit codes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string BinaryPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "lockstep",
                      "/server/lockstep-coordinator");
}

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 2);  // dup2 clears O_CLOEXEC on the new descriptor
      std::vector<std::string> argv_s = {BinaryPath()};
      argv_s.insert(argv_s.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    err_fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (err_fd_ >= 0) close(err_fd_);
  }

  // Reads stderr until it contains `needle` (true) or EOF / the deadline.
  bool ReadUntil(const std::string& needle, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (stderr_.find(needle) == std::string::npos) {
      if (!ReadSome(deadline)) return false;
    }
    return true;
  }

  // Waits (with a deadline) for the process to exit; returns its exit code,
  // or -1 on timeout / abnormal termination.
  int WaitExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (ReadSome(deadline)) {
    }
    if (absl::Now() >= deadline) return -1;  // still running: the destructor kills it
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) {
      stderr_ += absl::StrCat("[waitpid failed: errno ", errno, "]");
      return -1;
    }
    reaped_ = true;
    if (WIFSIGNALED(status)) stderr_ += absl::StrCat("[killed by signal ", WTERMSIG(status), "]");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Reads whatever stderr has next; false on EOF or timeout.
  bool ReadMore(absl::Duration timeout) { return ReadSome(absl::Now() + timeout); }

  pid_t pid() const { return pid_; }
  const std::string& err() const { return stderr_; }

 private:
  // One read of stderr; false on EOF or at the deadline.
  bool ReadSome(absl::Time deadline) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p = {err_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(err_fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    stderr_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int err_fd_ = -1;
  bool reaped_ = false;
  std::string stderr_;
};

constexpr absl::Duration kTimeout = absl::Seconds(8);

TEST(CoordinatorMainTest, UnknownFlagExits2) {
  Child c({"--bogus=1"});
  EXPECT_EQ(c.WaitExit(kTimeout), 2) << c.err();
  EXPECT_NE(c.err().find("unknown flag --bogus"), std::string::npos) << c.err();
}

TEST(CoordinatorMainTest, BadFlagValuesExit2) {
  for (const char* arg : {"--heartbeat_ms=abc", "--listen=nope", "--lost_after_ms=0",
                          "--ps_addresses=a:1,b", "positional"}) {
    Child c({"--insecure", arg});
    EXPECT_EQ(c.WaitExit(kTimeout), 2) << arg << ": " << c.err();
  }
}

TEST(CoordinatorMainTest, ServesWritesPortFileAndExits0OnSignal) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string port_file = absl::StrCat(TmpDir(), "/port.", sig);
    Child c({"--insecure", "--listen=127.0.0.1:0", absl::StrCat("--port_file=", port_file),
             "--lost_after_ms=500"});
    const std::string prefix = "INFO  coordinator: listening address=127.0.0.1:";
    ASSERT_TRUE(c.ReadUntil(prefix, kTimeout)) << c.err();
    const size_t start = c.err().find(prefix) + prefix.size();
    while (c.err().find('\n', start) == std::string::npos) {
      ASSERT_TRUE(c.ReadMore(kTimeout)) << c.err();
    }
    const size_t end = c.err().find_first_not_of("0123456789", start);
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(c.err().substr(start, end - start), &port)) << c.err();
    EXPECT_GT(port, 0);
    std::ifstream in(port_file);
    int file_port = 0;
    in >> file_port;
    EXPECT_EQ(file_port, port);

    // Something accepts connections on that port.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);

    ASSERT_EQ(kill(c.pid(), sig), 0);
    EXPECT_EQ(c.WaitExit(kTimeout), 0) << c.err();
    EXPECT_NE(c.err().find("shutting down"), std::string::npos) << c.err();
  }
}

TEST(CoordinatorMainTest, PortInUseExits1) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  Child c({"--insecure", absl::StrCat("--listen=127.0.0.1:", port)});
  EXPECT_EQ(c.WaitExit(kTimeout), 1) << c.err();
  EXPECT_NE(c.err().find(absl::StrCat("cannot listen: the address is in use or not available "
                                      "listen=127.0.0.1:",
                                      port)),
            std::string::npos)
      << c.err();
  close(fd);
}

}  // namespace
}  // namespace lockstep
