// Transport security of every lockstep gRPC server and channel, in one place:
// mutual TLS from PEM files, the per-call role/token check
// (common/grpcutil/call_policy.h), and the flags every daemon and the CLI
// share (defined in tls.cc):
//   --tls_cert=F   this process's certificate chain (PEM)
//   --tls_key=F    its private key (PEM)
//   --tls_ca=F     the CA that signs every lockstep certificate (PEM)
//   --insecure     plain text, no authentication (logs a warning)
// The three --tls_* flags go together. Secure by default: with none of them
// and no --insecure a process refuses to start (Load fails naming both
// choices; every *_main exits 2).
//
// TLS mode:
//   * servers require a client certificate signed by the CA
//     (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY): a caller
//     with no certificate or one from another CA fails the handshake, so its
//     call ends UNAVAILABLE and never reaches a handler;
//   * every call is then checked against call_policy.h's table by an
//     AuthMetadataProcessor installed on the server credentials, before any
//     handler runs (PERMISSION_DENIED / UNAUTHENTICATED; nothing changes on
//     the server); the role is the certificate's lockstep://role/<role> URI
//     SAN, read from grpc::AuthContext;
//   * channels verify the server's certificate chain against the CA and that
//     it carries the role the channel means to reach (ChannelCredentials'
//     expected_server_roles: a worker's coordinator channel expects the
//     coordinator, its ps channels a ps server (or the coordinator's own
//     shard), its peer channels a worker), not the host name: workers are dialed at the IP address the coordinator saw, which
//     no certificate can list in advance in Compose or Kubernetes. They
//     present this process's certificate; with a bearer token they send
//     "authorization: Bearer <token>" on every call.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_TLS_H_
#define LOCKSTEP_COMMON_GRPCUTIL_TLS_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grpcutil/call_policy.h"
#include "common/token_file.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(bool, insecure);

namespace lockstep {

struct TlsFiles {
  std::string cert;  // --tls_cert
  std::string key;   // --tls_key
  std::string ca;    // --tls_ca
  bool insecure = false;
};

// The four flags' values.
TlsFiles TlsFilesFromFlags();

// ReadTokenFile (bearer token files) lives in common/token_file.h.

class GrpcSecurity {
 public:
  // Plain text (what InsecureServerCredentials/InsecureChannelCredentials
  // give), for in-process tests and benches.
  GrpcSecurity() = default;

  // Loads the PEM files. Plain text when files.insecure; INVALID_ARGUMENT
  // when neither --insecure nor any --tls_* flag is given (naming both
  // choices), naming the flag (and file) when only some are given, when
  // --insecure comes with --tls_* flags, or when a file cannot be read, is
  // empty or is not PEM.
  static absl::StatusOr<GrpcSecurity> Load(const TlsFiles& files);
  // Load(TlsFilesFromFlags()).
  static absl::StatusOr<GrpcSecurity> FromFlags();

  bool tls() const { return !cert_pem_.empty(); }
  // True when --insecure was given explicitly (the caller logs a warning).
  bool explicitly_insecure() const { return explicitly_insecure_; }
  // One line for the start-up log: "mutual TLS (CA ca.pem, certificate
  // worker.pem)" or "plain text (...)".
  std::string Describe() const;

  // Server credentials. TLS: mutual TLS plus the call_policy.h check, with
  // `token` the coordinator's bearer token ("" = token methods are refused).
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials(std::string token = "") const;
  // Channel credentials. TLS: the server must present a certificate from the
  // CA whose role is in `expected_server_roles` (e.g.
  // RoleBit(PeerRole::kCoordinator)); any other role, or none, fails the
  // handshake (the call ends UNAVAILABLE). Ignored in plain text. With a
  // non-empty `token` (TLS only) every call carries "authorization: Bearer
  // <token>".
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(RoleSet expected_server_roles,
                                                               std::string token = "") const;

 private:
  std::string cert_path_, ca_path_;
  std::string cert_pem_, key_pem_, ca_pem_;
  bool explicitly_insecure_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_TLS_H_
