#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  return fd;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << strerror(errno);
    off += static_cast<size_t>(n);
  }
}

// Reads until EOF (or a reset); fails the test after 10 s.
std::string ReadToEof(int fd) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char buf[4096];
  while (true) {
    const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        deadline - std::chrono::steady_clock::now())
                                        .count());
    if (ms <= 0) {
      ADD_FAILURE() << "no EOF within 10 s; got so far: " << out;
      return out;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// One request on a fresh connection; returns the raw response.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  SendAll(fd, request);
  std::string r = ReadToEof(fd);
  ::close(fd);
  return r;
}

int StatusOf(const std::string& response) {
  // "HTTP/1.1 200 OK\r\n..."
  int code = 0;
  if (response.size() < 12 || !absl::SimpleAtoi(response.substr(9, 3), &code)) return -1;
  return code;
}

std::string BodyOf(const std::string& response) {
  const size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? "" : response.substr(p + 4);
}

std::unique_ptr<HttpServer> StartServer(HttpServerOptions o = {}) {
  auto s = HttpServer::Start("127.0.0.1", 0, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

HttpResponse Text(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

TEST(HttpServer, ServesAnExactPath) {
  auto server = StartServer();
  ASSERT_GT(server->port(), 0);
  server->Handle("/metrics", [](const HttpRequest& req) {
    HttpResponse r = Text("up 1\n");
    r.content_type = "text/plain; version=0.0.4";
    r.headers["Cache-Control"] = "no-store";
    return r;
  });
  const std::string r =
      Exchange(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r,
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: text/plain; version=0.0.4\r\n"
            "Content-Length: 5\r\n"
            "Connection: close\r\n"
            "Cache-Control: no-store\r\n"
            "\r\n"
            "up 1\n");
}

TEST(HttpServer, HeadSendsHeadersWithoutBody) {
  auto server = StartServer();
  server->Handle("/healthz", [](const HttpRequest& req) {
    EXPECT_EQ(req.method, "HEAD");
    return Text("ok\n");
  });
  const std::string r = Exchange(server->port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_TRUE(absl::StrContains(r, "Content-Length: 3\r\n")) << r;
  EXPECT_EQ(BodyOf(r), "");
}

TEST(HttpServer, UnknownPathIs404) {
  auto server = StartServer();
  server->Handle("/metrics", [](const HttpRequest&) { return Text("x"); });
  const std::string r = Exchange(server->port(), "GET /nope HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 404);
  EXPECT_EQ(BodyOf(r), "404 Not Found: no page at /nope\n");
}

TEST(HttpServer, OtherMethodsAre405WithAllow) {
  auto server = StartServer();
  server->Handle("/metrics", [](const HttpRequest&) { return Text("x"); });
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    const std::string r = Exchange(
        server->port(), absl::StrCat(method, " /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
    EXPECT_EQ(StatusOf(r), 405) << method;
    EXPECT_TRUE(absl::StrContains(r, "\r\nAllow: GET, HEAD\r\n")) << r;
  }
}

TEST(HttpServer, MalformedRequestsAre400) {
  auto server = StartServer();
  server->Handle("/", [](const HttpRequest&) { return Text("root"); });
  const std::vector<std::pair<std::string, int>> cases = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET / HTTP/1.1 extra\r\n\r\n", 400},
      {"GET noslash HTTP/1.1\r\n\r\n", 400},
      {"GET / FTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET /%zz HTTP/1.1\r\n\r\n", 400},
      {"GET /%00 HTTP/1.1\r\n\r\n", 400},
      {"GET /?a=%4 HTTP/1.1\r\n\r\n", 400},
      {std::string("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n"), 400},
  };
  for (const auto& [request, code] : cases) {
    EXPECT_EQ(StatusOf(Exchange(server->port(), request)), code) << request;
  }
  // The server keeps serving after all of them; bare LF line ends are fine.
  EXPECT_EQ(BodyOf(Exchange(server->port(), "GET / HTTP/1.0\n\n")), "root");
}

TEST(HttpServer, OversizeHeadIs431) {
  HttpServerOptions o;
  o.max_header_bytes = 1024;
  auto server = StartServer(o);
  server->Handle("/", [](const HttpRequest&) { return Text("root"); });
  const std::string big =
      absl::StrCat("GET / HTTP/1.1\r\nX-Big: ", std::string(2000, 'a'), "\r\n\r\n");
  EXPECT_EQ(StatusOf(Exchange(server->port(), big)), 431);
  // Just under the limit is fine.
  const std::string head = "GET / HTTP/1.1\r\nX-Big: \r\n\r\n";
  const std::string fits = absl::StrCat("GET / HTTP/1.1\r\nX-Big: ",
                                        std::string(1024 - head.size(), 'a'), "\r\n\r\n");
  ASSERT_EQ(fits.size(), 1024u);
  EXPECT_EQ(StatusOf(Exchange(server->port(), fits)), 200);
}

TEST(HttpServer, SlowClientGets408AtTheReadDeadline) {
  HttpServerOptions o;
  o.read_deadline = absl::Milliseconds(300);
  auto server = StartServer(o);
  server->Handle("/", [](const HttpRequest&) { return Text("root"); });
  const int fd = Connect(server->port());
  const auto t0 = std::chrono::steady_clock::now();
  // Slowloris: a head that never ends, one header at a time.
  SendAll(fd, "GET / HTTP/1.1\r\nHost: x\r\n");
  SendAll(fd, "X-A: 1\r\n");
  const std::string r = ReadToEof(fd);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_EQ(StatusOf(r), 408) << r;
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 5.0);
}

TEST(HttpServer, ConcurrentRequests) {
  auto server = StartServer();
  std::atomic<int> calls{0};
  server->Handle("/n", [&](const HttpRequest& req) {
    calls.fetch_add(1);
    return Text(req.query.count("i") ? req.query.at("i") : "none");
  });
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string id = absl::StrCat(t, "-", i);
        std::string r;
        // The server allows 16 at once; a slot is freed a moment after the
        // client has read the response, so 4 clients stay well below it.
        r = Exchange(server->port(), absl::StrCat("GET /n?i=", id, " HTTP/1.1\r\n\r\n"));
        if (StatusOf(r) == 200 && BodyOf(r) == id) {
          ok.fetch_add(1);
        } else {
          ADD_FAILURE() << r;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kEach);
  EXPECT_EQ(calls.load(), kThreads * kEach);
}

TEST(HttpServer, ConnectionsBeyondTheLimitGet503) {
  HttpServerOptions o;
  o.max_connections = 2;
  auto server = StartServer(o);
  server->Handle("/", [](const HttpRequest&) { return Text("root"); });
  // Two idle connections hold both slots (accepted in order, before the third).
  const int a = Connect(server->port());
  const int b = Connect(server->port());
  const std::string r = Exchange(server->port(), "");
  EXPECT_EQ(StatusOf(r), 503) << r;
  // Finishing one frees its slot.
  SendAll(a, "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(BodyOf(ReadToEof(a)), "root");
  ::close(a);
  // The slot is released after the response is written; poll until it is.
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    served = StatusOf(Exchange(server->port(), "GET / HTTP/1.1\r\n\r\n")) == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(served);
  ::close(b);
}

TEST(HttpServer, ShutdownWhileAClientIsConnected) {
  auto server = StartServer();  // 5 s read deadline
  server->Handle("/", [](const HttpRequest&) { return Text("root"); });
  const int fd = Connect(server->port());
  SendAll(fd, "GET / HTTP/1.1\r\n");  // incomplete head: the server waits for more
  // Make sure the connection is being served before shutting down.
  EXPECT_EQ(StatusOf(Exchange(server->port(), "GET / HTTP/1.1\r\n\r\n")), 200);
  const auto t0 = std::chrono::steady_clock::now();
  server->Shutdown();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 2.0);  // well under the 5 s read deadline
  EXPECT_EQ(ReadToEof(fd), "");  // closed without a response
  ::close(fd);
  server->Shutdown();  // idempotent
  // Nobody listens any more.
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(c);
}

TEST(HttpServer, PrefixRoutesAndExactPathsWin) {
  auto server = StartServer();
  server->HandlePrefix("/", [](const HttpRequest& r) { return Text("root:" + r.path); });
  server->HandlePrefix("/job/", [](const HttpRequest& r) { return Text("job:" + r.path); });
  server->Handle("/job/special", [](const HttpRequest&) { return Text("special"); });
  EXPECT_EQ(BodyOf(Exchange(server->port(), "GET /job/7 HTTP/1.1\r\n\r\n")), "job:/job/7");
  EXPECT_EQ(BodyOf(Exchange(server->port(), "GET /job/special HTTP/1.1\r\n\r\n")), "special");
  EXPECT_EQ(BodyOf(Exchange(server->port(), "GET /jobs HTTP/1.1\r\n\r\n")), "root:/jobs");
  // Handlers registered while serving replace earlier ones.
  server->Handle("/job/special", [](const HttpRequest&) { return Text("v2"); });
  EXPECT_EQ(BodyOf(Exchange(server->port(), "GET /job/special HTTP/1.1\r\n\r\n")), "v2");
}

TEST(HttpServer, DecodesPathQueryAndHeaders) {
  auto server = StartServer();
  HttpRequest seen;
  server->HandlePrefix("/", [&](const HttpRequest& r) {
    seen = r;
    return Text("");
  });
  Exchange(server->port(),
           "GET /a%20b?x=1&y=a+b%2Fc&flag&x=2 HTTP/1.1\r\nHost: h\r\nX-Two: 1\r\n"
           "x-two: 2\r\nAccept:   text/html  \r\n\r\n");
  EXPECT_EQ(seen.method, "GET");
  EXPECT_EQ(seen.path, "/a b");
  EXPECT_EQ(seen.query, (std::map<std::string, std::string>{
                            {"x", "2"}, {"y", "a b/c"}, {"flag", ""}}));
  EXPECT_EQ(seen.headers, (std::map<std::string, std::string>{
                              {"host", "h"}, {"x-two", "1, 2"}, {"accept", "text/html"}}));
}

TEST(HttpServer, HandlerFailuresAre500) {
  auto server = StartServer();
  server->Handle("/throw", [](const HttpRequest&) -> HttpResponse {
    throw std::runtime_error("boom");
  });
  server->Handle("/badheader", [](const HttpRequest&) {
    HttpResponse r = Text("x");
    r.headers["X-Evil"] = "a\r\nSet-Cookie: y";
    return r;
  });
  server->Handle("/badstatus", [](const HttpRequest&) {
    HttpResponse r = Text("x");
    r.status = 42;
    return r;
  });
  std::string r = Exchange(server->port(), "GET /throw HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 500);
  EXPECT_EQ(BodyOf(r), "500 Internal Server Error: handler for /throw failed: boom\n");
  r = Exchange(server->port(), "GET /badheader HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 500);
  EXPECT_FALSE(absl::StrContains(r, "Set-Cookie")) << r;
  EXPECT_EQ(StatusOf(Exchange(server->port(), "GET /badstatus HTTP/1.1\r\n\r\n")), 500);
}

TEST(HttpServer, RequestBodyIsIgnoredAndResponseArrives) {
  auto server = StartServer();
  server->Handle("/", [](const HttpRequest&) { return Text("root"); });
  const std::string r = Exchange(
      server->port(),
      absl::StrCat("GET / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", std::string(100000, 'b')));
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_EQ(BodyOf(r), "root");
}

TEST(HttpServer, StartErrors) {
  auto bad = HttpServer::Start("127.0.0.1", 70000);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto first = StartServer();
  auto taken = HttpServer::Start("127.0.0.1", first->port());
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(taken.status().message(),
                                absl::StrCat("127.0.0.1:", first->port())))
      << taken.status();
  auto unresolvable = HttpServer::Start("no-such-host.invalid", 0);
  EXPECT_EQ(unresolvable.status().code(), absl::StatusCode::kUnavailable);
}

TEST(HttpServer, Ipv6LoopbackWithBrackets) {
  auto server = HttpServer::Start("[::1]", 0);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  (*server)->Handle("/", [](const HttpRequest&) { return Text("v6"); });
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>((*server)->port()));
  a.sin6_addr = in6addr_loopback;
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  SendAll(fd, "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(BodyOf(ReadToEof(fd)), "v6");
  ::close(fd);
}

TEST(HttpServer, DispatchWithoutASocket) {
  auto server = StartServer();
  server->Handle("/x", [](const HttpRequest&) { return Text("x"); });
  bool head_only = true;
  EXPECT_EQ(server->Dispatch("GET /x HTTP/1.1\r\n\r\n", &head_only).body, "x");
  EXPECT_FALSE(head_only);
  EXPECT_EQ(server->Dispatch("HEAD /x HTTP/1.1\r\n\r\n", &head_only).status, 200);
  EXPECT_TRUE(head_only);
  EXPECT_EQ(server->Dispatch("\r\n", &head_only).status, 400);
}

TEST(PercentDecode, Cases) {
  std::string out;
  EXPECT_TRUE(PercentDecode("a%2fb%41+c", false, &out));
  EXPECT_EQ(out, "a/bA+c");
  EXPECT_TRUE(PercentDecode("a+b", true, &out));
  EXPECT_EQ(out, "a b");
  EXPECT_FALSE(PercentDecode("%", false, &out));
  EXPECT_FALSE(PercentDecode("%4", false, &out));
  EXPECT_FALSE(PercentDecode("%g0", false, &out));
  EXPECT_FALSE(PercentDecode("%00", false, &out));
}


// With an access token every page but the open ones asks for it, as Bearer
// or as a Basic password, and no handler runs for a refused request.
TEST(HttpServer, AccessTokenGuardsEveryPageButTheOpenOnes) {
  HttpServerOptions o;
  o.access_token = "s3cret-T0ken";
  auto server = StartServer(o);
  std::atomic<int> calls{0};
  server->Handle("/metrics", [&](const HttpRequest&) {
    ++calls;
    return Text("m");
  });
  server->Handle("/healthz", [](const HttpRequest&) { return Text("ok"); });
  const int port = server->port();
  auto get = [&](const std::string& path, const std::string& auth) {
    return Exchange(port, "GET " + path + " HTTP/1.1\r\n" +
                              (auth.empty() ? "" : "Authorization: " + auth + "\r\n") + "\r\n");
  };
  const std::string none = get("/metrics", "");
  EXPECT_EQ(StatusOf(none), 401) << none;
  EXPECT_TRUE(absl::StrContains(none, "WWW-Authenticate: Basic realm=\"lockstep\"")) << none;
  EXPECT_TRUE(absl::StrContains(BodyOf(none), "--http_token_file")) << none;
  EXPECT_EQ(StatusOf(get("/metrics", "Bearer s3cret-T0ken0")), 401);
  EXPECT_EQ(StatusOf(get("/metrics", "Bearer s3cret-T0ke")), 401);
  EXPECT_EQ(StatusOf(get("/metrics", "Token s3cret-T0ken")), 401);
  EXPECT_EQ(StatusOf(get("/metrics", "Bearer")), 401);
  // "u:wrong" and "s3cret-T0ken" without a user name, in base64.
  EXPECT_EQ(StatusOf(get("/metrics", "Basic dTp3cm9uZw==")), 401);
  EXPECT_EQ(StatusOf(get("/metrics", "Basic czNjcmV0LVQwa2Vu")), 401);
  EXPECT_EQ(StatusOf(get("/metrics", "Basic !!!")), 401);
  // Unknown paths are not told apart from known ones without the token.
  EXPECT_EQ(StatusOf(get("/no-such-page", "")), 401);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(BodyOf(get("/metrics", "Bearer s3cret-T0ken")), "m");
  EXPECT_EQ(BodyOf(get("/metrics", "bearer   s3cret-T0ken ")), "m");
  // "prometheus:s3cret-T0ken" and ":s3cret-T0ken" (any user name).
  EXPECT_EQ(BodyOf(get("/metrics", "Basic cHJvbWV0aGV1czpzM2NyZXQtVDBrZW4=")), "m");
  EXPECT_EQ(BodyOf(get("/metrics", "Basic OnMzY3JldC1UMGtlbg==")), "m");
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(StatusOf(get("/no-such-page", "Bearer s3cret-T0ken")), 404);
  EXPECT_EQ(BodyOf(get("/healthz", "")), "ok");  // liveness probes carry no token
}

TEST(HttpServer, AuthorizationCarries) {
  EXPECT_TRUE(HttpAuthorizationCarries("Bearer abc", "abc"));
  EXPECT_TRUE(HttpAuthorizationCarries("BASIC dTphYmM=", "abc"));  // u:abc
  EXPECT_FALSE(HttpAuthorizationCarries("Bearer abc", ""));
  EXPECT_FALSE(HttpAuthorizationCarries("Bearer abcd", "abc"));
  EXPECT_FALSE(HttpAuthorizationCarries("Basic YWJj", "abc"));  // "abc": no colon
  EXPECT_FALSE(HttpAuthorizationCarries("abc", "abc"));
}

}  // namespace
}  // namespace lockstep
