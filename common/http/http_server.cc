#include "common/http/http_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/token_file.h"

namespace lockstep {
namespace {

// RFC 9110 token characters (method and header names).
bool IsTchar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), IsTchar);
}

// A header value: visible characters, spaces and tabs (obs-text allowed).
bool IsFieldValue(absl::string_view s) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\t') continue;
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

HttpResponse ErrorResponse(int status, absl::string_view detail) {
  HttpResponse r;
  r.status = status;
  r.body = absl::StrCat(status, " ", HttpReason(status), ": ", detail, "\n");
  return r;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int MillisLeft(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

enum class WaitResult { kReady, kTimeout, kWoken, kError };

// Waits until `fd` has `events`, the deadline passes or `wake_fd` fires.
WaitResult WaitFor(int fd, short events, int wake_fd, absl::Time deadline) {
  while (true) {
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int ms = MillisLeft(deadline);
    const int n = ::poll(fds, 2, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return WaitResult::kError;
    }
    if (fds[1].revents != 0) return WaitResult::kWoken;
    if (fds[0].revents != 0) return WaitResult::kReady;  // incl. POLLHUP/POLLERR
    if (n == 0 && ms == 0) return WaitResult::kTimeout;
    if (absl::Now() >= deadline) return WaitResult::kTimeout;
  }
}

// Writes all of `data` before the deadline; false if it could not. (With
// TLS a write that returned EAGAIN is retried with the same bytes, as
// dataconn::Sendv asks.)
bool WriteAll(const dataconn::Conn& c, absl::string_view data, int wake_fd,
              absl::Time deadline) {
  const int fd = c.fd;
  while (!data.empty()) {
    const ssize_t n = dataconn::Send(c, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (WaitFor(fd, POLLOUT, wake_fd, deadline) != WaitResult::kReady) return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string Serialize(const HttpResponse& r, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", HttpReason(r.status), "\r\n");
  absl::StrAppend(&out, "Content-Type: ", r.content_type, "\r\n");
  absl::StrAppend(&out, "Content-Length: ", r.body.size(), "\r\n");
  absl::StrAppend(&out, "Connection: close\r\n");
  for (const auto& [name, value] : r.headers) {
    const std::string lower = absl::AsciiStrToLower(name);
    // The server owns framing; a handler cannot override it.
    if (lower == "content-length" || lower == "connection" || lower == "transfer-encoding" ||
        lower == "content-type") {
      continue;
    }
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

// Where the request head ends in `buf` (index one past the blank line), or
// npos. Accepts CRLF and bare LF line ends.
size_t HeadEnd(absl::string_view buf) {
  for (size_t i = buf.find('\n'); i != absl::string_view::npos; i = buf.find('\n', i + 1)) {
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return absl::string_view::npos;
}

}  // namespace

const char* HttpReason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

bool PercentDecode(absl::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      const char decoded = static_cast<char>(hi * 16 + lo);
      if (decoded == '\0') return false;
      out->push_back(decoded);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(absl::string_view host, int port,
                                                              HttpServerOptions options) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http server port: expected 0..65535, got ", port));
  }
  if (options.max_connections < 1 || options.max_header_bytes < 16 ||
      options.read_deadline <= absl::ZeroDuration() ||
      options.write_deadline <= absl::ZeroDuration() || options.backlog < 1) {
    return absl::InvalidArgumentError(
        "http server options: max_connections >= 1, max_header_bytes >= 16, positive "
        "deadlines and backlog expected");
  }
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "0.0.0.0";
  const std::string where = absl::StrCat(
      h.find(':') != std::string::npos ? absl::StrCat("[", h, "]") : h, ":", port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  if (int rc = ::getaddrinfo(h.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("http server: cannot resolve ", where, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, options.backlog) == 0) {
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("http server: cannot listen on ", where, ": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  int bound_port = port;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    if (bound.ss_family == AF_INET) {
      bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else if (bound.ss_family == AF_INET6) {
      bound_port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    }
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("http server: eventfd: ", err));
  }
  std::unique_ptr<HttpServer> server(new HttpServer(fd, wake, bound_port, options));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpServer::HttpServer(int listen_fd, int wake_fd, int port, HttpServerOptions options)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), options_(options) {}

HttpServer::~HttpServer() {
  Shutdown();
  ::close(wake_fd_);
}

void HttpServer::Handle(std::string path, HttpHandler handler) {
  auto h = std::make_shared<const HttpHandler>(std::move(handler));
  absl::MutexLock lock(&routes_mu_);
  exact_[std::move(path)] = std::move(h);
}

void HttpServer::HandlePrefix(std::string prefix, HttpHandler handler) {
  auto h = std::make_shared<const HttpHandler>(std::move(handler));
  absl::MutexLock lock(&routes_mu_);
  prefix_[std::move(prefix)] = std::move(h);
}

std::shared_ptr<const HttpHandler> HttpServer::Route(const std::string& path) const {
  absl::MutexLock lock(&routes_mu_);
  if (auto it = exact_.find(path); it != exact_.end()) return it->second;
  // Longest prefix: walk the prefixes that sort at or before `path`.
  std::shared_ptr<const HttpHandler> best;
  size_t best_len = 0;
  for (const auto& [prefix, handler] : prefix_) {
    if (prefix.size() >= best_len && absl::StartsWith(path, prefix)) {
      best = handler;
      best_len = prefix.size();
    }
  }
  return best;
}

bool HttpAuthorizationCarries(absl::string_view authorization, absl::string_view token) {
  if (token.empty()) return false;
  absl::string_view v = absl::StripAsciiWhitespace(authorization);
  const size_t space = v.find(' ');
  if (space == absl::string_view::npos) return false;
  const std::string scheme = absl::AsciiStrToLower(v.substr(0, space));
  const absl::string_view credentials = absl::StripAsciiWhitespace(v.substr(space + 1));
  if (scheme == "bearer") return ConstantTimeEquals(credentials, token);
  if (scheme != "basic") return false;
  std::string user_pass;
  if (!absl::Base64Unescape(credentials, &user_pass)) return false;
  const size_t colon = user_pass.find(':');
  if (colon == std::string::npos) return false;
  return ConstantTimeEquals(absl::string_view(user_pass).substr(colon + 1), token);
}

HttpResponse HttpServer::Dispatch(absl::string_view head, bool* head_only) {
  *head_only = false;
  std::vector<absl::string_view> lines = absl::StrSplit(head, '\n');
  for (absl::string_view& l : lines) absl::ConsumeSuffix(&l, "\r");
  // Drop the empty lines that end the head.
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return ErrorResponse(400, "empty request");

  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3) {
    return ErrorResponse(400, "request line: expected \"METHOD /path HTTP/1.1\"");
  }
  const absl::string_view method = parts[0], target = parts[1], version = parts[2];
  if (!IsToken(method)) return ErrorResponse(400, "request line: malformed method");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (absl::StartsWith(version, "HTTP/") && version.size() == 8 && version[6] == '.') {
      return ErrorResponse(505, "expected HTTP/1.0 or HTTP/1.1");
    }
    return ErrorResponse(400, "request line: malformed version");
  }
  if (target.empty() || target[0] != '/') {
    return ErrorResponse(400, "request target: expected a path starting with '/'");
  }
  for (char ch : target) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) return ErrorResponse(400, "request target: invalid character");
  }

  HttpRequest req;
  req.method = std::string(method);
  for (size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    if (line.empty()) return ErrorResponse(400, "header: empty line inside the header block");
    if (line[0] == ' ' || line[0] == '\t') {
      return ErrorResponse(400, "header: folded (obs-fold) lines are not accepted");
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return ErrorResponse(400, "header: missing ':'");
    const absl::string_view name = line.substr(0, colon);
    if (!IsToken(name)) return ErrorResponse(400, "header: malformed field name");
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (!IsFieldValue(value)) return ErrorResponse(400, "header: control character in value");
    std::string key = absl::AsciiStrToLower(name);
    auto [it, inserted] = req.headers.emplace(key, std::string(value));
    if (!inserted) absl::StrAppend(&it->second, ", ", value);
  }

  absl::string_view path = target, query;
  if (size_t hash = path.find('#'); hash != absl::string_view::npos) path = path.substr(0, hash);
  if (size_t q = path.find('?'); q != absl::string_view::npos) {
    query = path.substr(q + 1);
    path = path.substr(0, q);
  }
  if (!PercentDecode(path, /*plus_is_space=*/false, &req.path)) {
    return ErrorResponse(400, "request target: malformed percent escape in the path");
  }
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    std::string k, v;
    if (!PercentDecode(pair.substr(0, eq), true, &k) ||
        (eq != absl::string_view::npos && !PercentDecode(pair.substr(eq + 1), true, &v))) {
      return ErrorResponse(400, "request target: malformed percent escape in the query");
    }
    req.query[std::move(k)] = std::move(v);
  }

  if (req.method != "GET" && req.method != "HEAD") {
    HttpResponse r = ErrorResponse(405, absl::StrCat("method ", req.method, " not allowed"));
    r.headers["Allow"] = "GET, HEAD";
    return r;
  }
  *head_only = req.method == "HEAD";

  if (!options_.access_token.empty() &&
      std::find(options_.open_paths.begin(), options_.open_paths.end(), req.path) ==
          options_.open_paths.end()) {
    auto auth = req.headers.find("authorization");
    if (auth == req.headers.end() || !HttpAuthorizationCarries(auth->second, options_.access_token)) {
      HttpResponse r = ErrorResponse(
          401, auth == req.headers.end()
                   ? "this page needs the daemon's HTTP token (--http_token_file): send "
                     "\"Authorization: Bearer <token>\", or Basic with the token as password"
                   : "the Authorization header does not carry this daemon's HTTP token "
                     "(--http_token_file)");
      r.headers["WWW-Authenticate"] = "Basic realm=\"lockstep\", charset=\"UTF-8\"";
      return r;
    }
  }

  std::shared_ptr<const HttpHandler> handler = Route(req.path);
  if (handler == nullptr) return ErrorResponse(404, absl::StrCat("no page at ", req.path));
  HttpResponse r;
  try {
    r = (*handler)(req);
  } catch (const std::exception& e) {
    return ErrorResponse(500, absl::StrCat("handler for ", req.path, " failed: ", e.what()));
  } catch (...) {
    return ErrorResponse(500, absl::StrCat("handler for ", req.path, " failed"));
  }
  if (r.status < 100 || r.status > 599) {
    return ErrorResponse(500, absl::StrCat("handler for ", req.path,
                                           " returned status ", r.status));
  }
  bool headers_ok = IsFieldValue(r.content_type);
  for (const auto& [name, value] : r.headers) {
    headers_ok = headers_ok && IsToken(name) && IsFieldValue(value);
  }
  if (!headers_ok) {
    return ErrorResponse(500, absl::StrCat("handler for ", req.path,
                                           " returned an invalid header"));
  }
  return r;
}

void HttpServer::AcceptLoop() {
  while (!shutting_down_.load()) {
    ReapFinished();
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, 1000);
    if (n < 0 && errno != EINTR) {
      ABSL_RAW_LOG(WARNING, "http server: poll: %s", std::strerror(errno));
      ::poll(fds + 1, 1, 100);
      continue;
    }
    if (n <= 0 || fds[1].revents != 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: back off instead of spinning on the ready socket.
        ::poll(fds + 1, 1, 100);
      }
      continue;
    }
    absl::MutexLock lock(&conns_mu_);
    if (active_ >= options_.max_connections) {
      // Best effort and non-blocking: the accept thread never waits on a
      // client. No plain-text answer on an HTTPS port: just the close.
      if (options_.tls == nullptr) {
        const std::string r =
            Serialize(ErrorResponse(503, absl::StrCat("more than ", options_.max_connections,
                                                      " connections in progress")),
                      false);
        (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
        ::shutdown(fd, SHUT_WR);
      }
      ::close(fd);
      continue;
    }
    ++active_;
    conns_.emplace_back();
    Conn* conn = &conns_.back();
    conn->fd = fd;
    conn->thread = std::thread([this, conn] { Serve(conn); });
  }
}

void HttpServer::ReapFinished() {
  std::list<Conn> finished;
  {
    absl::MutexLock lock(&conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), conns_, it);
      it = next;
    }
  }
  for (Conn& c : finished) c.thread.join();
}

void HttpServer::Serve(Conn* conn) {
  const int fd = conn->fd;
  const absl::Time read_deadline = absl::Now() + options_.read_deadline;
  dataconn::Conn io = dataconn::Plain(fd);
  bool respond = true, head_only = false;
  if (options_.tls != nullptr) {
    // HTTPS: the handshake first, within the request's read deadline. A
    // client that fails it (plain HTTP, no common version) gets no answer.
    absl::StatusOr<dataconn::Conn> started = dataconn::StartTls(*options_.tls, fd, true);
    if (started.ok()) {
      io = *started;
      respond = dataconn::Handshake(*options_.tls, io, wake_fd_, read_deadline).ok();
    } else {
      respond = false;
    }
  }
  std::string buf;
  const size_t limit = options_.max_header_bytes;
  size_t head_len = absl::string_view::npos;
  HttpResponse response;
  char chunk[4096];
  while (respond) {
    // Read no further than the limit (plus one byte to detect overflow):
    // bytes past the head are a body this server never reads.
    const size_t want = std::min(sizeof(chunk), limit + 1 - buf.size());
    const ssize_t n = dataconn::Recv(io, chunk, want);
    if (n > 0) {
      const size_t scan_from = buf.size() >= 2 ? buf.size() - 2 : 0;
      buf.append(chunk, static_cast<size_t>(n));
      const size_t end = HeadEnd(absl::string_view(buf).substr(scan_from));
      if (end != absl::string_view::npos) {
        head_len = scan_from + end;
        break;
      }
      if (buf.size() > limit) {
        response = ErrorResponse(431, absl::StrCat("request line and headers exceed ", limit,
                                                   " bytes"));
        break;
      }
      continue;
    }
    if (n == 0) {  // the client closed before finishing its request
      respond = false;
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      respond = false;
      break;
    }
    const WaitResult w = WaitFor(fd, POLLIN, wake_fd_, read_deadline);
    if (w == WaitResult::kReady) continue;
    if (w == WaitResult::kTimeout) {
      response = ErrorResponse(408, absl::StrCat("request head not received within ",
                                                 absl::FormatDuration(options_.read_deadline)));
    } else {
      respond = false;  // shutting down or poll failed
    }
    break;
  }
  if (head_len != absl::string_view::npos) {
    if (head_len > limit) {
      response = ErrorResponse(431, absl::StrCat("request line and headers exceed ", limit,
                                                 " bytes"));
    } else {
      response = Dispatch(absl::string_view(buf).substr(0, head_len), &head_only);
    }
  }
  bool linger = false;
  if (respond && !shutting_down_.load()) {
    const absl::Time write_deadline = absl::Now() + options_.write_deadline;
    linger = WriteAll(io, Serialize(response, head_only), wake_fd_, write_deadline);
  }
  {
    // The request is done: free its slot now, so a client that reconnects
    // as soon as it has read the response is not refused. The lingering
    // close below has its own cap (as many as max_connections at once).
    absl::MutexLock lock(&conns_mu_);
    --active_;
    linger = linger && lingering_ < options_.max_connections;
    if (linger) ++lingering_;
  }
  if (linger) {
    // Lingering close: tell the client we are done, then drain what it
    // still sends (at most 500 ms and 1 MiB), so an unread request body does
    // not turn the close into a reset that could destroy the response in
    // flight.
    dataconn::ShutdownWrite(io);
    const absl::Time drain_deadline = absl::Now() + absl::Milliseconds(500);
    size_t drained = 0;
    while (drained < (1 << 20)) {
      const ssize_t n = dataconn::Recv(io, chunk, sizeof(chunk));
      if (n > 0) {
        drained += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) break;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) ||
          WaitFor(fd, POLLIN, wake_fd_, drain_deadline) != WaitResult::kReady) {
        break;
      }
    }
  }
  dataconn::Close(io);  // the session (if any) and the socket
  absl::MutexLock lock(&conns_mu_);
  if (linger) --lingering_;
  conn->fd = -1;
  conn->done = true;
}

void HttpServer::Shutdown() {
  if (shutdown_started_.exchange(true)) return;
  shutting_down_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (accept_thread_.joinable()) accept_thread_.join();
  // Only the accept thread used it; from now on connecting is refused.
  ::close(listen_fd_);
  listen_fd_ = -1;
  std::list<Conn> all;
  {
    absl::MutexLock lock(&conns_mu_);
    all.splice(all.end(), conns_);
  }
  for (Conn& c : all) c.thread.join();
}

}  // namespace lockstep
