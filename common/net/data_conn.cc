// Data-plane connection streams, plain or TLS: see data_conn.h.
#include "common/net/data_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace dataconn {
namespace {

// One TLS record's plaintext: each SSL_write takes at most this much, so a
// write retried after EAGAIN always covers the record OpenSSL holds.
constexpr size_t kRecordBytes = 16384;
constexpr char kRolePrefix[] = "lockstep://role/";
constexpr size_t kReadAheadBytes = 256 << 10;

// OpenSSL's error queue of this thread as text (and cleared).
std::string SslErrors() {
  std::string out;
  char buf[256];
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("no detail") : out;
}

// Loads this process's certificate chain and key into ctx and checks that
// they match; InvalidArgumentError "<flag>: <what> \"<file>\": <OpenSSL>".
absl::Status UseCertificateAndKey(SSL_CTX* ctx, const std::string& cert_file,
                                  const std::string& key_file, absl::string_view flag) {
  auto fail = [&](const std::string& what, const std::string& file) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", what, " \"", file, "\": ", SslErrors()));
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return fail("cannot use the certificate (--tls_cert)", cert_file);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return fail("cannot use the private key (--tls_key)", key_file);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return fail("the private key does not match the certificate (--tls_key)", key_file);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const DataTls>> DataTls::Create(
    const std::string& cert_file, const std::string& key_file, const std::string& ca_file,
    std::vector<std::string> peer_roles) {
  if (peer_roles.empty()) {
    return absl::InvalidArgumentError("data-plane TLS: no peer role to accept");
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("data-plane TLS: SSL_CTX_new: ", SslErrors()));
  }
  auto fail = [&](const std::string& what, const std::string& file) {
    const std::string e = SslErrors();
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane TLS: ", what, " \"", file, "\": ", e));
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // AES-128-GCM first: the cheapest AEAD with AES-NI.
  SSL_CTX_set_ciphersuites(ctx,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  if (absl::Status s = UseCertificateAndKey(ctx, cert_file, key_file, "data-plane TLS");
      !s.ok()) {
    SSL_CTX_free(ctx);
    return s;
  }
  if (SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) != 1) {
    return fail("cannot load the CA (--tls_ca)", ca_file);
  }
  // Mutual: both ends present a certificate the other verifies against the
  // CA (purposes: serverAuth for the acceptor, clientAuth for the connector).
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);  // nothing arrives after the handshake
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read ahead into a 256 KiB buffer (allocated once per session): one
  // read(2) takes many records, instead of two per 16 KiB record.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kReadAheadBytes);
  return std::shared_ptr<const DataTls>(new DataTls(ctx, std::move(peer_roles)));
}

absl::StatusOr<std::shared_ptr<const DataTls>> DataTls::CreateServerOnly(
    const std::string& cert_file, const std::string& key_file) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("HTTPS: SSL_CTX_new: ", SslErrors()));
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (absl::Status s = UseCertificateAndKey(ctx, cert_file, key_file, "--http_tls"); !s.ok()) {
    SSL_CTX_free(ctx);
    return s;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);  // one request per connection: nothing to resume
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return std::shared_ptr<const DataTls>(new DataTls(ctx, {}, /*https=*/true));
}

absl::StatusOr<std::shared_ptr<const DataTls>> DataTls::CreateServerWithClientCerts(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca,
    std::vector<std::string> client_roles) {
  if (client_roles.empty()) {
    return absl::InvalidArgumentError("--http_client_certs: no client role to accept");
  }
  absl::StatusOr<std::shared_ptr<const DataTls>> base = CreateServerOnly(cert_file, key_file);
  if (!base.ok()) return base.status();
  SSL_CTX* ctx = (*base)->ctx();
  SSL_CTX_up_ref(ctx);  // the new DataTls owns a reference; `base` frees its own
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr) != 1) {
    const std::string e = SslErrors();
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat(
        "--http_client_certs: cannot load the CA (--tls_ca) \"", client_ca, "\": ", e));
  }
  // The CA's name is sent in the CertificateRequest, so a client with
  // several certificates (a browser) offers the right one.
  if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str())) {
    SSL_CTX_set_client_CA_list(ctx, names);
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return std::shared_ptr<const DataTls>(new DataTls(ctx, std::move(client_roles), /*https=*/true));
}

DataTls::~DataTls() { SSL_CTX_free(ctx_); }

ssize_t Recv(const Conn& c, void* p, size_t n) {
  if (c.ssl == nullptr) return recv(c.fd, p, n, MSG_DONTWAIT);
  ERR_clear_error();
  errno = 0;  // SSL_ERROR_SYSCALL below must not see a stale errno (EAGAIN)
  const int r = SSL_read(c.ssl, p, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  if (r > 0) return r;
  switch (SSL_get_error(c.ssl, r)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_SYSCALL:
      if (errno == 0) return 0;  // end of stream without close_notify
      return -1;                 // errno from the socket
    default:
      ERR_clear_error();
      errno = EPROTO;  // a record that does not authenticate, or an alert
      return -1;
  }
}

ssize_t Sendv(const Conn& c, const iovec* iov, int iovcnt) {
  if (c.ssl == nullptr) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = static_cast<size_t>(iovcnt);
    return sendmsg(c.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ssize_t total = 0;
  for (int i = 0; i < iovcnt; ++i) {
    const uint8_t* b = static_cast<const uint8_t*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      const size_t chunk = std::min(left, kRecordBytes);
      ERR_clear_error();
      const int w = SSL_write(c.ssl, b, static_cast<int>(chunk));
      if (w > 0) {
        total += w;
        b += w;
        left -= static_cast<size_t>(w);
        if (static_cast<size_t>(w) < chunk) return total;
        continue;
      }
      if (total > 0) return total;
      switch (SSL_get_error(c.ssl, w)) {
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE:
          errno = EAGAIN;
          return -1;
        case SSL_ERROR_SYSCALL:
          if (errno == 0) errno = EPIPE;
          return -1;
        default:
          ERR_clear_error();
          errno = EPROTO;
          return -1;
      }
    }
  }
  return total;
}

// SSL_has_pending: decrypted bytes, or read-ahead bytes not processed yet.
bool Pending(const Conn& c) { return c.ssl != nullptr && SSL_has_pending(c.ssl) == 1; }

void ShutdownWrite(const Conn& c) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    (void)SSL_shutdown(c.ssl);  // queues close_notify; non-blocking socket: never waits
    ERR_clear_error();
  }
  shutdown(c.fd, SHUT_WR);
}

void Close(Conn& c) {
  if (c.ssl != nullptr) SSL_free(c.ssl);
  if (c.fd >= 0) close(c.fd);
  c = Conn{};
}

absl::StatusOr<Conn> StartTls(const DataTls& tls, int fd, bool server) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat("fcntl: ", std::strerror(errno)));
  }
  ERR_clear_error();
  SSL* ssl = SSL_new(tls.ctx());
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    if (ssl != nullptr) SSL_free(ssl);
    return absl::UnavailableError(absl::StrCat("TLS session: ", SslErrors()));
  }
  if (server) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
  }
  return Conn{fd, ssl};
}

std::string PeerRole(const Conn& c) {
  if (c.ssl == nullptr) return "";
  X509* cert = SSL_get_peer_certificate(c.ssl);
  if (cert == nullptr) return "";
  std::string role;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names) && role.empty(); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
      if (g->type != GEN_URI) continue;
      const absl::string_view uri(
          reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.uniformResourceIdentifier)),
          static_cast<size_t>(ASN1_STRING_length(g->d.uniformResourceIdentifier)));
      if (uri.substr(0, sizeof(kRolePrefix) - 1) == kRolePrefix) {
        role = std::string(uri.substr(sizeof(kRolePrefix) - 1));
      }
    }
    GENERAL_NAMES_free(names);
  }
  X509_free(cert);
  return role;
}

bool NothingReceived(const Conn& c) {
  if (c.ssl == nullptr) return false;
  const BIO* rbio = SSL_get_rbio(c.ssl);
  return rbio != nullptr && BIO_number_read(const_cast<BIO*>(rbio)) == 0;
}

absl::StatusOr<bool> HandshakeStep(const DataTls& tls, Conn& c, bool* want_write) {
  *want_write = false;
  ERR_clear_error();
  errno = 0;
  const int r = SSL_do_handshake(c.ssl);
  if (r == 1) {
    if (tls.peer_roles().empty()) return true;  // HTTPS without client certificates
    const std::string role = PeerRole(c);
    if (std::find(tls.peer_roles().begin(), tls.peer_roles().end(), role) ==
        tls.peer_roles().end()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "TLS: the peer's certificate has role '", role.empty() ? "none" : role,
          "' (URI SAN lockstep://role/<role>), expected ", absl::StrJoin(tls.peer_roles(), " or ")));
    }
    return true;
  }
  const int e = SSL_get_error(c.ssl, r);
  if (e == SSL_ERROR_WANT_READ) return false;
  if (e == SSL_ERROR_WANT_WRITE) {
    *want_write = true;
    return false;
  }
  std::string why;
  const long verify = SSL_get_verify_result(c.ssl);
  if (verify != X509_V_OK) {
    why = absl::StrCat("certificate verify failed: ", X509_verify_cert_error_string(verify));
    ERR_clear_error();
  } else if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    why = errno == 0 ? std::string("the peer closed the connection")
                     : absl::StrCat("socket: ", std::strerror(errno));
  } else {
    why = SslErrors();
  }
  return absl::UnavailableError(absl::StrCat(
      "TLS handshake failed: ", why,
      !tls.https() ? " (--data_plane_tls must be on at both ends, with certificates from one CA)"
      : tls.peer_roles().empty()
          ? " (the client must speak HTTPS: --http_tls is on)"
          : " (the client must speak HTTPS with a certificate from the cluster's CA: "
            "--http_client_certs is on)"));
}

absl::Status Handshake(const DataTls& tls, Conn& c, int wake_fd, absl::Time deadline) {
  for (;;) {
    bool want_write = false;
    absl::StatusOr<bool> done = HandshakeStep(tls, c, &want_write);
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    pollfd p[2] = {{c.fd, static_cast<short>(want_write ? POLLOUT : POLLIN), 0},
                   {wake_fd, POLLIN, 0}};
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("TLS handshake: no answer before the deadline");
    }
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    const int n = poll(p, wake_fd >= 0 ? 2 : 1, ms);
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (n > 0 && wake_fd >= 0 && p[1].revents != 0) {
      return absl::CancelledError("transport shut down");
    }
  }
}

}  // namespace dataconn
}  // namespace lockstep
