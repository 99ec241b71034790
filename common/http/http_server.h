// HttpServer: a small, bounded HTTP/1.1 server for the daemons' metrics
// (/metrics, /healthz) and the coordinator's status page. POSIX sockets,
// no gRPC, no external library.
//
// What it serves:
//   * GET and HEAD only; any other method gets 405 with "Allow: GET, HEAD".
//   * One request per connection: every response carries
//     "Connection: close" and the server closes the socket after writing it.
//     Request bodies are never read.
//   * Routing: an exact path registered with Handle() wins; otherwise the
//     longest prefix registered with HandlePrefix() ("/job/" matches
//     "/job/7"); otherwise 404. The path is percent-decoded; the query string
//     is split into `HttpRequest::query` (percent- and '+'-decoded, the last
//     value of a repeated key wins).
//   * Access token (optional, HttpServerOptions::access_token): every path
//     but the open ones (default "/healthz", for liveness probes) needs
//     "Authorization: Bearer <token>" (Prometheus' `authorization`) or
//     "Authorization: Basic" with the token as the password and any user
//     name (a browser's prompt; Prometheus' `basic_auth`). Otherwise 401
//     with "WWW-Authenticate: Basic realm=\"lockstep\"" and no handler
//     runs. The comparison (ConstantTimeEquals, common/token_file.h) takes
//     a time that depends on the lengths only.
//   * HTTPS (optional, HttpServerOptions::tls, a server-only context:
//     dataconn::DataTls::CreateServerOnly): every connection is a TLS
//     session first; its handshake must finish within `read_deadline` and a
//     client that does not speak TLS is closed without an answer. The
//     access token then travels encrypted.
//   * Errors it answers itself: 400 malformed request line, header or
//     escape; 408 when the request head has not arrived within
//     `read_deadline`; 431 when the request line plus headers exceed
//     `max_header_bytes`; 503 when `max_connections` requests are already in
//     progress; 500 when a handler throws or returns a header that is not a
//     valid HTTP token/value; 505 for a version other than HTTP/1.0 or 1.1.
//
// Threads and ownership:
//   * Start() binds, listens and starts one accept thread. Every accepted
//     connection gets its own thread (at most `max_connections` at once), on
//     which the request is read, the handler is called and the response is
//     written. Handlers therefore run concurrently with each other and with
//     Handle() calls: they must be thread-safe, and must return promptly (no
//     unbounded waits, see http.h).
//   * The server copies each handler (std::function) when it is registered
//     and owns the copies; whatever a handler captures must outlive the
//     server, or Shutdown() must be called before it is destroyed.
//   * Handle()/HandlePrefix() may be called at any time, before or after
//     Start(), from any thread; a later registration of the same path
//     replaces the earlier one.
//   * Shutdown() (idempotent, also run by the destructor) stops accepting,
//     wakes every connection waiting on its socket (reads and writes return
//     at once), waits for running handlers to return and joins every
//     thread. Its duration is bounded by the longest running handler; no
//     lock is held while joining.
#ifndef LOCKSTEP_COMMON_HTTP_HTTP_SERVER_H_
#define LOCKSTEP_COMMON_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http/http.h"
#include "common/net/data_conn.h"

namespace lockstep {

struct HttpServerOptions {
  // Request line plus headers, including the blank line that ends them.
  size_t max_header_bytes = 16 * 1024;
  // Requests being read, handled or written at once; one more is answered
  // 503 and closed. (After its response a connection may linger up to
  // 500 ms draining the client's unread bytes; at most this many linger, so
  // the server never runs more than 2 * max_connections + 1 threads.)
  int max_connections = 16;
  // The whole request head must arrive within this (slowloris guard).
  absl::Duration read_deadline = absl::Seconds(5);
  // The whole response must be written within this (a client that does
  // not read loses its connection).
  absl::Duration write_deadline = absl::Seconds(5);
  // listen(2) backlog.
  int backlog = 64;
  // Empty: every page is open. Otherwise see "Access token" above.
  std::string access_token;
  // Paths served without the token (exact match).
  std::vector<std::string> open_paths = {"/healthz"};
  // Null: plain HTTP. Otherwise HTTPS with this server-only context.
  std::shared_ptr<const dataconn::DataTls> tls;
};

// True when `authorization` (the header's value) carries `token`: "Bearer
// <token>", or "Basic <base64 of user:token>" for any user name. Scheme
// names are case-insensitive; the token is compared in constant time.
bool HttpAuthorizationCarries(absl::string_view authorization, absl::string_view token);

class HttpServer {
 public:
  // Binds `host`:`port` and starts serving. `host` may be a name, an IPv4
  // or IPv6 literal (brackets allowed: "[::1]"), or a wildcard ("",
  // "0.0.0.0", "::", "[::]"); port 0 picks a free port (see port()).
  // Errors: INVALID_ARGUMENT for a port outside 0..65535 or a bad option,
  // UNAVAILABLE naming host:port when it cannot be resolved or bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(absl::string_view host, int port,
                                                           HttpServerOptions options = {});

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Exact path ("/metrics").
  void Handle(std::string path, HttpHandler handler);
  // Every path that starts with `prefix` and has no exact handler; the
  // longest matching prefix wins.
  void HandlePrefix(std::string prefix, HttpHandler handler);

  // The bound port (the OS-chosen one for port 0).
  int port() const { return port_; }

  void Shutdown();

  // Exposed for tests: the response a request head (everything up to and
  // including the blank line) gets, without a socket. Thread-safe.
  HttpResponse Dispatch(absl::string_view head, bool* head_only);

 private:
  struct Conn {
    int fd = -1;
    std::thread thread;
    bool done = false;
  };

  HttpServer(int listen_fd, int wake_fd, int port, HttpServerOptions options);
  void AcceptLoop();
  void Serve(Conn* conn);
  // Joins connection threads that have finished.
  void ReapFinished();
  std::shared_ptr<const HttpHandler> Route(const std::string& path) const;

  int listen_fd_;  // closed (-1) by Shutdown()
  const int wake_fd_;  // eventfd; readable once Shutdown() begins
  const int port_;
  const HttpServerOptions options_;
  std::atomic<bool> shutting_down_{false};
  std::thread accept_thread_;

  mutable absl::Mutex routes_mu_;
  std::map<std::string, std::shared_ptr<const HttpHandler>> exact_ ABSL_GUARDED_BY(routes_mu_);
  std::map<std::string, std::shared_ptr<const HttpHandler>> prefix_ ABSL_GUARDED_BY(routes_mu_);

  absl::Mutex conns_mu_;
  std::list<Conn> conns_ ABSL_GUARDED_BY(conns_mu_);
  int active_ ABSL_GUARDED_BY(conns_mu_) = 0;     // requests being read/handled/written
  int lingering_ ABSL_GUARDED_BY(conns_mu_) = 0;  // responses sent, draining before close

  std::atomic<bool> shutdown_started_{false};  // the first Shutdown() call does the work
};

// Percent-decodes `in` ("%2F" -> "/"; with `plus_is_space`, '+' -> ' ').
// False for a malformed escape or a decoded NUL byte.
bool PercentDecode(absl::string_view in, bool plus_is_space, std::string* out);

// The reason phrase of an HTTP status code ("Not Found"); "Unknown" if none.
const char* HttpReason(int status);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_HTTP_HTTP_SERVER_H_
