// The byte stream of one raw-TCP data-plane connection (the peer ring's,
// worker/net/tcp_*.h, and the parameter servers', common/psnet/): a socket,
// and with --data_plane_tls a TLS 1.3 session over it. The framing code of
// both planes reads and writes through Recv / Sendv below and never learns
// which one it has, so the collectives do not change.
//
// TLS (DataTls): mutual, from the daemon's own --tls_cert/--tls_key/--tls_ca
// files; the peer's chain must verify against the CA and its certificate must
// carry one of the expected roles (URI SAN lockstep://role/<role>, as the
// gRPC channels check): worker for the ring, worker for a ps server's
// callers, server or coordinator for a worker's ps connections. The HMAC
// hello (data_auth.h) still runs inside the session: TLS proves the peer is a
// cluster member, the hello that it belongs to this job.
//
// Contract:
//   * Recv / Sendv behave like recv(MSG_DONTWAIT) / sendmsg(MSG_DONTWAIT |
//     MSG_NOSIGNAL): > 0 bytes, 0 = end of stream (Recv), -1 with errno set
//     (EAGAIN: wait for the descriptor with poll, then call again). With TLS
//     a Sendv that returned EAGAIN must be called again with the same bytes
//     at the same stream position (what every caller does: it resumes where
//     the stream stands); each SSL_write takes at most one record (16 KiB).
//   * No allocation per call: TLS records go through OpenSSL's per-session
//     buffers, allocated once at the handshake.
//   * One reader and one writer at a time per connection (the planes'
//     locks already ensure it); a TLS session is not used by two threads at
//     once: the ring's connections carry data one way after the hello.
//   * TLS sockets are non-blocking (OpenSSL reads and writes the descriptor
//     itself); plain ones keep their mode (every call here passes
//     MSG_DONTWAIT).
#ifndef LOCKSTEP_COMMON_NET_DATA_CONN_H_
#define LOCKSTEP_COMMON_NET_DATA_CONN_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct ssl_st;
struct ssl_ctx_st;

namespace lockstep {
namespace dataconn {

// A TLS context for one data plane: this process's certificate and key, the
// CA, and the roles a peer may hold. Immutable once made; thread-safe.
class DataTls {
 public:
  // Reads the PEM files. InvalidArgumentError naming the file when one
  // cannot be read or does not fit (key not matching the certificate).
  // `peer_roles`: "worker", "server", "coordinator" (at least one).
  static absl::StatusOr<std::shared_ptr<const DataTls>> Create(
      const std::string& cert_file, const std::string& key_file, const std::string& ca_file,
      std::vector<std::string> peer_roles);
  // A server-only context (the daemons' HTTPS pages, --http_tls): this
  // process's certificate and key; clients present no certificate (a
  // browser, Prometheus) and are not checked here (the HTTP token is). TLS
  // 1.2 or 1.3. peer_roles() is empty.
  static absl::StatusOr<std::shared_ptr<const DataTls>> CreateServerOnly(
      const std::string& cert_file, const std::string& key_file);
  // The same, but clients must present a certificate from `client_ca`
  // whose role (URI SAN lockstep://role/<role>) is one of `client_roles`
  // (--http_client_certs: "metrics" or "client"); a client without one, of
  // another CA or role fails the handshake. Errors name --http_client_certs
  // and the file.
  static absl::StatusOr<std::shared_ptr<const DataTls>> CreateServerWithClientCerts(
      const std::string& cert_file, const std::string& key_file, const std::string& client_ca,
      std::vector<std::string> client_roles);
  ~DataTls();
  DataTls(const DataTls&) = delete;
  DataTls& operator=(const DataTls&) = delete;

  ssl_ctx_st* ctx() const { return ctx_; }
  const std::vector<std::string>& peer_roles() const { return peer_roles_; }
  // A context of the HTTPS pages (CreateServerOnly / WithClientCerts).
  bool https() const { return https_; }

 private:
  DataTls(ssl_ctx_st* ctx, std::vector<std::string> peer_roles, bool https = false)
      : ctx_(ctx), peer_roles_(std::move(peer_roles)), https_(https) {}
  ssl_ctx_st* const ctx_;
  const std::vector<std::string> peer_roles_;
  const bool https_;
};

// One connection: the socket and, with TLS, its session. A plain value (16
// bytes); Close releases both. fd < 0: no connection.
struct Conn {
  int fd = -1;
  ssl_st* ssl = nullptr;
  bool valid() const { return fd >= 0; }
};

inline Conn Plain(int fd) { return Conn{fd, nullptr}; }

// Like recv(MSG_DONTWAIT) / sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL); see above.
ssize_t Recv(const Conn& c, void* p, size_t n);
ssize_t Sendv(const Conn& c, const iovec* iov, int iovcnt);
inline ssize_t Send(const Conn& c, const void* p, size_t n) {
  iovec v{const_cast<void*>(p), n};
  return Sendv(c, &v, 1);
}
// True when nothing at all has arrived on a TLS session (not one byte of
// a handshake): its peer connected and closed, e.g. a reachability probe.
// False for a plain connection.
bool NothingReceived(const Conn& c);
// True when a TLS session holds bytes not read yet, decrypted or read ahead
// (poll on the descriptor would not show them). Recv returns EAGAIN only
// when they do not complete a record, so a caller that reads until EAGAIN
// before it polls never waits on bytes already here.
bool Pending(const Conn& c);
// Frees the session (no close_notify: the planes' framing knows where its
// streams end) and closes the socket. c becomes invalid.
void Close(Conn& c);
// Ends this side's stream: with TLS a close_notify (best effort, never
// waits), then shutdown(SHUT_WR) of the socket.
void ShutdownWrite(const Conn& c);

// Starts a TLS session on fd (made non-blocking). `server`: the accepting
// side. The handshake is run by HandshakeStep / Handshake.
absl::StatusOr<Conn> StartTls(const DataTls& tls, int fd, bool server);

// One non-blocking step of the handshake: OK(true) when done (and the peer's
// role checked, unless the context has no peer roles: CreateServerOnly),
// OK(false) to be called again once fd is readable (or writable:
// *want_write). UnavailableError naming what failed ("TLS handshake:
// certificate verify failed", "peer certificate has role client, expected
// worker").
absl::StatusOr<bool> HandshakeStep(const DataTls& tls, Conn& c, bool* want_write);

// The whole handshake, waiting with poll until `deadline`; wake_fd (>= 0)
// readable: CancelledError.
absl::Status Handshake(const DataTls& tls, Conn& c, int wake_fd, absl::Time deadline);

// The role in a certificate's URI SAN lockstep://role/<role> ("" if none).
std::string PeerRole(const Conn& c);

}  // namespace dataconn
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_NET_DATA_CONN_H_
