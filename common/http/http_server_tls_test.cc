// HttpServer over HTTPS (HttpServerOptions::tls, the daemons' --http_tls):
// requests over TLS with the cluster's CA, the token still guarding, a
// plain-HTTP client and a client of another CA refused while the server
// keeps serving. Certificates: deploy/certs.sh (common/net/test_certs.h).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http/http_server.h"
#include "common/net/data_conn.h"
#include "common/net/test_certs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Waits (10 s at most) for fd to be readable or writable.
void WaitFor(int fd, short events) {
  pollfd p{fd, events, 0};
  ::poll(&p, 1, 10000);
}

// One request over TLS under `client` (a context that verifies the
// server's chain against its CA and role); the raw response, or
// "handshake: <why>".
std::string TlsExchange(int port, const dataconn::DataTls& client, const std::string& request) {
  absl::StatusOr<dataconn::Conn> c = dataconn::StartTls(client, Connect(port), /*server=*/false);
  if (!c.ok()) return absl::StrCat("start: ", c.status().message());
  dataconn::Conn io = *c;
  if (absl::Status hs = dataconn::Handshake(client, io, -1, absl::Now() + absl::Seconds(10));
      !hs.ok()) {
    dataconn::Close(io);
    return absl::StrCat("handshake: ", hs.message());
  }
  size_t off = 0;
  while (off < request.size()) {
    const ssize_t n = dataconn::Send(io, request.data() + off, request.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      WaitFor(io.fd, POLLOUT);
    } else {
      break;
    }
  }
  std::string out;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  char buf[4096];
  while (absl::Now() < deadline) {
    const ssize_t n = dataconn::Recv(io, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      WaitFor(io.fd, POLLIN);
    } else {
      break;  // end of stream
    }
  }
  dataconn::Close(io);
  return out;
}

std::string Get(const std::string& path, const std::string& token = "") {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n",
                      token.empty() ? "" : absl::StrCat("Authorization: Bearer ", token, "\r\n"),
                      "\r\n");
}

struct HttpsServer {
  HttpsServer() {
    const std::string dir = testcerts::Pki("https");
    auto tls = dataconn::DataTls::CreateServerOnly(dir + "/coordinator.pem",
                                                   dir + "/coordinator.key");
    EXPECT_TRUE(tls.ok()) << tls.status();
    HttpServerOptions o;
    o.tls = *tls;
    o.access_token = "tok-123";
    auto s = HttpServer::Start("127.0.0.1", 0, o);
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
    server->Handle("/x", [](const HttpRequest&) {
      HttpResponse r;
      r.body = "hello over tls\n";
      return r;
    });
    server->Handle("/healthz", [](const HttpRequest&) {
      HttpResponse r;
      r.body = "ok\n";
      return r;
    });
  }
  std::unique_ptr<HttpServer> server;
};

TEST(HttpServerTls, ServesOverTlsAndTheTokenStillGuards) {
  HttpsServer h;
  // A client that trusts the cluster's CA and expects the coordinator's role.
  auto client = testcerts::Tls("https", "client", {"coordinator"});
  std::string r = TlsExchange(h.server->port(), *client, Get("/x", "tok-123"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("hello over tls"));
  EXPECT_THAT(TlsExchange(h.server->port(), *client, Get("/x")),
              StartsWith("HTTP/1.1 401 Unauthorized\r\n"));
  EXPECT_THAT(TlsExchange(h.server->port(), *client, Get("/healthz")),
              StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST(HttpServerTls, PlainHttpAndAnotherCaAreRefusedAndServingGoesOn) {
  HttpsServer h;
  // Plain HTTP: the server reads a ClientHello it cannot parse and closes,
  // with no HTTP answer.
  const int fd = Connect(h.server->port());
  const std::string plain = Get("/healthz");
  ASSERT_EQ(::send(fd, plain.data(), plain.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(plain.size()));
  std::string got;
  char buf[1024];
  for (;;) {
    WaitFor(fd, POLLIN);
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  EXPECT_FALSE(absl::StartsWith(got, "HTTP/")) << got;
  // A client that trusts another CA: certificate verify failed.
  auto stranger = testcerts::Tls("https-other", "client", {"coordinator"});
  EXPECT_THAT(TlsExchange(h.server->port(), *stranger, Get("/healthz")),
              HasSubstr("certificate verify failed"));
  // Still serving.
  auto client = testcerts::Tls("https", "client", {"coordinator"});
  EXPECT_THAT(TlsExchange(h.server->port(), *client, Get("/healthz")),
              StartsWith("HTTP/1.1 200 OK\r\n"));
}

// --http_client_certs: a client must present a certificate of the
// cluster's CA with role metrics or client; none, another CA's or another
// role's is refused (also for /healthz), and serving goes on.
TEST(HttpServerTls, ClientCertificatesOfTheCaAndRoleOnly) {
  const std::string dir = testcerts::Pki("https");
  auto tls = dataconn::DataTls::CreateServerWithClientCerts(
      dir + "/coordinator.pem", dir + "/coordinator.key", dir + "/ca.pem", {"metrics", "client"});
  ASSERT_TRUE(tls.ok()) << tls.status();
  HttpServerOptions o;
  o.tls = *tls;
  auto s = HttpServer::Start("127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::unique_ptr<HttpServer> server = *std::move(s);
  server->Handle("/metrics", [](const HttpRequest&) {
    HttpResponse r;
    r.body = "up 1\n";
    return r;
  });
  const int port = server->port();
  for (const char* role : {"metrics", "client"}) {
    auto c = testcerts::Tls("https", role, {"coordinator"});
    EXPECT_THAT(TlsExchange(port, *c, Get("/metrics")), StartsWith("HTTP/1.1 200 OK\r\n"))
        << role;
  }
  // A worker's certificate (our CA, another role): the server ends the
  // connection after the handshake, before any request is read.
  auto worker = testcerts::Tls("https", "worker", {"coordinator"});
  EXPECT_THAT(TlsExchange(port, *worker, Get("/healthz")), Not(HasSubstr("HTTP/1.1")));
  // Another CA's metrics certificate: the server refuses it in the handshake.
  auto stranger = dataconn::DataTls::Create(testcerts::Pki("https-other") + "/metrics.pem",
                                            testcerts::Pki("https-other") + "/metrics.key",
                                            dir + "/ca.pem", {"coordinator"});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_THAT(TlsExchange(port, **stranger, Get("/healthz")), Not(HasSubstr("HTTP/1.1")));
  // (A client with no certificate at all: tests/metrics_https_e2e_test.)
  // Still serving.
  auto c = testcerts::Tls("https", "metrics", {"coordinator"});
  EXPECT_THAT(TlsExchange(port, *c, Get("/metrics")), StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(dataconn::DataTls::CreateServerWithClientCerts(dir + "/coordinator.pem",
                                                           dir + "/coordinator.key",
                                                           dir + "/no-ca.pem", {"metrics"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerTls, BadFilesNameTheFlagAndTheFile) {
  const std::string dir = testcerts::Pki("https");
  auto t = dataconn::DataTls::CreateServerOnly(dir + "/no-such.pem", dir + "/coordinator.key");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("--http_tls"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("no-such.pem"));
  t = dataconn::DataTls::CreateServerOnly(dir + "/coordinator.pem", dir + "/worker.key");
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("worker.key"));
}

}  // namespace
}  // namespace lockstep
