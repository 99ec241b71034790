// Plain HTTP/1.1 request and response values shared by the daemons' small
// HTTP server (metrics, status page) and the handlers that fill them in.
// No gRPC, no I/O here: handlers are pure functions of a request, so they
// are tested without a socket.
#ifndef LOCKSTEP_COMMON_HTTP_HTTP_H_
#define LOCKSTEP_COMMON_HTTP_HTTP_H_

#include <functional>
#include <map>
#include <string>

namespace lockstep {

struct HttpRequest {
  std::string method;                         // "GET", "HEAD", ...
  std::string path;                           // "/metrics" (no query string)
  std::map<std::string, std::string> query;   // decoded ?a=1&b=2
  std::map<std::string, std::string> headers; // names lower-cased
};

struct HttpResponse {
  int status = 200;                           // 200, 404, 400, 405, 500, ...
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers; // extra headers (e.g. Cache-Control)
};

// A handler is called on one of the server's threads; it must not block for
// long (no RPCs with unbounded deadlines) and must be thread-safe.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_HTTP_HTTP_H_
