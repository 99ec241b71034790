#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/flags/flag.h"
#include "common/metrics/http_token_flag.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// GET `path` from 127.0.0.1:port; the whole raw response.
std::string Get(int port, const std::string& path, const std::string& headers = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n", headers, "\r\n");
  EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(MetricsServer, ServesMetricsAndHealthzAndWritesThePortFile) {
  MetricsRegistry registry;
  registry.AddCounter("lockstep_test_total", "Test.")->Increment(3);
  MetricsServerConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  c.port_file = absl::StrCat(std::getenv("TEST_TMPDIR"), "/metrics.port");
  std::string note;
  auto server = StartMetricsServer(c, &registry, &note);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE(*server, nullptr);
  const int port = (*server)->port();
  EXPECT_EQ(note, absl::StrCat("metrics on http://127.0.0.1:", port,
                               "/metrics and /healthz (open: no --http_token_file)"));
  std::ifstream f(c.port_file);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), absl::StrCat(port, "\n"));
  const std::string m = Get(port, "/metrics");
  EXPECT_TRUE(absl::StartsWith(m, "HTTP/1.1 200 OK\r\n")) << m;
  EXPECT_TRUE(absl::StrContains(m, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_TRUE(absl::EndsWith(m, "\r\n\r\n# HELP lockstep_test_total Test.\n"
                                "# TYPE lockstep_test_total counter\n"
                                "lockstep_test_total 3\n"))
      << m;
  EXPECT_TRUE(absl::EndsWith(Get(port, "/healthz"), "\r\n\r\nok\n"));
  EXPECT_TRUE(absl::StartsWith(Get(port, "/other"), "HTTP/1.1 404"));
}

TEST(MetricsServer, OffAndBadPort) {
  MetricsRegistry registry;
  MetricsServerConfig c;
  c.port = -1;
  std::string note;
  auto off = StartMetricsServer(c, &registry, &note);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);
  EXPECT_EQ(note, "metrics off (--metrics_port=-1)");
  c.port = 70000;
  auto bad = StartMetricsServer(c, &registry, nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "--metrics_port")) << bad.status();
}

TEST(MetricsServer, TakenDefaultPortFallsBackButAnExplicitOneFails) {
  MetricsRegistry registry;
  MetricsServerConfig first;
  first.host = "127.0.0.1";
  first.port = 0;
  auto holder = StartMetricsServer(first, &registry, nullptr);
  ASSERT_TRUE(holder.ok());
  const int taken = (*holder)->port();

  MetricsServerConfig c;
  c.host = "127.0.0.1";
  c.port = taken;
  c.port_is_default = false;
  auto explicit_port = StartMetricsServer(c, &registry, nullptr);
  ASSERT_FALSE(explicit_port.ok());
  EXPECT_EQ(explicit_port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(explicit_port.status().message(), "--metrics_port: "))
      << explicit_port.status();

  c.port_is_default = true;
  std::string note;
  auto fallback = StartMetricsServer(c, &registry, &note);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_NE((*fallback)->port(), taken);
  EXPECT_TRUE(absl::StrContains(note, absl::StrCat("(default port ", taken, " unavailable: ")))
      << note;
}

TEST(MetricsServer, FlagOnCommandLine) {
  const char* argv[] = {"prog", "--metrics_port=5", "-other", "--metrics_port_file", "f",
                        "--", "--later"};
  char** a = const_cast<char**>(argv);
  EXPECT_TRUE(FlagOnCommandLine(7, a, "metrics_port"));
  EXPECT_TRUE(FlagOnCommandLine(7, a, "metrics_port_file"));
  EXPECT_TRUE(FlagOnCommandLine(7, a, "other"));
  EXPECT_FALSE(FlagOnCommandLine(7, a, "metrics"));
  EXPECT_FALSE(FlagOnCommandLine(7, a, "later"));
  EXPECT_FALSE(FlagOnCommandLine(1, a, "metrics_port"));
}

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << content;
  return path;
}

// An OS-chosen port on loopback.
MetricsServerConfig Loopback() {
  MetricsServerConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  return c;
}

TEST(MetricsServer, ATokenGuardsMetricsButNotHealthz) {
  MetricsRegistry registry;
  registry.AddCounter("lockstep_test_total", "Test.")->Increment(1);
  MetricsServerConfig c = Loopback();
  c.access_token = "tok-123";
  std::string note;
  auto server = StartMetricsServer(c, &registry, &note);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_TRUE(absl::EndsWith(note, " (token required except /healthz)")) << note;
  EXPECT_TRUE(absl::StartsWith(Get(port, "/metrics"), "HTTP/1.1 401 ")) << Get(port, "/metrics");
  EXPECT_TRUE(absl::EndsWith(Get(port, "/healthz"), "\r\n\r\nok\n"));
  const std::string m = Get(port, "/metrics", "Authorization: Bearer tok-123\r\n");
  EXPECT_TRUE(absl::EndsWith(m, "lockstep_test_total 1\n")) << m;
}

// --http_token_file is read once, at start; a bad file is refused naming
// the flag and the file.
TEST(MetricsServer, HttpTokenFromFlagReadsTheFileOrRefusesIt) {
  absl::StatusOr<std::string> none = HttpTokenFromFlag();  // no flag: no token
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, "");
  absl::SetFlag(&FLAGS_http_token_file, WriteFile("http.token", "  tok-123\n"));
  absl::StatusOr<std::string> token = HttpTokenFromFlag();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "tok-123");
  const std::string empty_path = WriteFile("empty.token", " \n");
  absl::SetFlag(&FLAGS_http_token_file, empty_path);
  absl::StatusOr<std::string> empty = HttpTokenFromFlag();
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(), "--http_token_file: " + empty_path + " is empty");
  absl::SetFlag(&FLAGS_http_token_file, "/nonexistent/http.token");
  absl::StatusOr<std::string> missing = HttpTokenFromFlag();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(missing.status().message(),
                               "--http_token_file: cannot read /nonexistent/http.token"))
      << missing.status();
  absl::SetFlag(&FLAGS_http_token_file, "");
}

}  // namespace
}  // namespace lockstep
