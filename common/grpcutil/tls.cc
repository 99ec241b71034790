#include "common/grpcutil/tls.h"

#include <functional>
#include <utility>
#include <vector>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpcutil/call_policy.h"
#include "common/token_file.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this process for mutual TLS on every gRPC server and "
          "channel; needs --tls_key and --tls_ca. Role in a URI SAN lockstep://role/<role> "
          "(deploy/certs.sh)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the CA that signs every lockstep certificate: servers require "
          "and verify callers' certificates against it, channels verify servers' against it");
ABSL_FLAG(bool, insecure, false,
          "plain-text gRPC with no authentication (logs a warning); cannot be combined with "
          "--tls_*. One of the two is required: with neither the process refuses to start");

namespace lockstep {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;
absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path,
                                    absl::string_view what) {
  absl::StatusOr<std::string> data = ReadSmallFile(flag, path, kMaxPemBytes);
  if (!data.ok()) return data.status();
  if (!absl::StrContains(*data, "-----BEGIN ") || !absl::StrContains(*data, what)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM ", what,
                                                   " (no \"-----BEGIN ...", what, "\" line)"));
  }
  return data;
}

// The call_policy.h check on every call of a TLS server. Non-blocking: it
// runs inline in gRPC's auth filter (no thread hop per call).
class PolicyProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit PolicyProcessor(std::string token) : token_(std::move(token)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata*) override {
    absl::string_view method;
    absl::string_view authorization;
    for (const auto& [key, value] : auth_metadata) {
      const absl::string_view k(key.data(), key.size());
      if (k == ":path") method = absl::string_view(value.data(), value.size());
      if (k == "authorization") authorization = absl::string_view(value.data(), value.size());
    }
    std::vector<std::string> sans;
    for (const char* property : {GRPC_PEER_URI_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
      for (const grpc::string_ref& v : context->FindPropertyValues(property)) {
        sans.emplace_back(v.data(), v.size());
      }
    }
    absl::StatusOr<PeerRole> role = RoleFromSubjectAltNames(sans);
    absl::Status s = role.ok() ? AuthorizeCall(method, *role, authorization, token_)
                               : absl::PermissionDeniedError(role.status().message());
    if (!s.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
    }
    if (!authorization.empty()) {
      consumed->emplace("authorization", std::string(authorization));
    }
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
};

// What a channel checks of the server it reached, after gRPC verified the
// certificate chain against --tls_ca: the certificate carries the role the
// channel means to reach (CheckServerRole; lockstep://role/<role>), so a
// stolen worker key cannot pose as the coordinator or a ps shard. Not the
// host name: workers are dialed at the address the coordinator saw their
// calls come from (container and pod addresses no certificate can list in
// advance), so any certificate signed by the cluster's CA with the expected
// role is accepted.
class ServerRoleVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit ServerRoleVerifier(RoleSet expected) : expected_(expected) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>, grpc::Status* sync_status) override {
    std::vector<std::string> sans;
    for (const grpc::string_ref& v : request->uri_names()) sans.emplace_back(v.data(), v.size());
    const absl::Status s = CheckServerRole(sans, expected_);
    *sync_status = s.ok() ? grpc::Status::OK
                          : grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(s.message()));
    return true;  // synchronous
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const RoleSet expected_;
};

}  // namespace

TlsFiles TlsFilesFromFlags() {
  TlsFiles f;
  f.cert = absl::GetFlag(FLAGS_tls_cert);
  f.key = absl::GetFlag(FLAGS_tls_key);
  f.ca = absl::GetFlag(FLAGS_tls_ca);
  f.insecure = absl::GetFlag(FLAGS_insecure);
  return f;
}

absl::StatusOr<GrpcSecurity> GrpcSecurity::Load(const TlsFiles& files) {
  GrpcSecurity sec;
  const bool any = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
  if (files.insecure) {
    if (any) {
      return absl::InvalidArgumentError(
          "--insecure: cannot be combined with --tls_cert/--tls_key/--tls_ca (pick one)");
    }
    sec.explicitly_insecure_ = true;
    return sec;
  }
  if (!any) {
    return absl::InvalidArgumentError(
        "no transport security chosen: pass --tls_cert, --tls_key and --tls_ca for mutual TLS "
        "(certificates from deploy/certs.sh), or --insecure for plain text with no "
        "authentication");
  }
  for (const auto& [flag, value] : {std::pair<absl::string_view, const std::string*>{
                                        "--tls_cert", &files.cert},
                                    {"--tls_key", &files.key},
                                    {"--tls_ca", &files.ca}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": missing; mutual TLS needs --tls_cert, --tls_key and --tls_ca together"));
    }
  }
  absl::StatusOr<std::string> cert = ReadPem("--tls_cert", files.cert, "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("--tls_key", files.key, "PRIVATE KEY");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem("--tls_ca", files.ca, "CERTIFICATE");
  if (!ca.ok()) return ca.status();
  sec.cert_path_ = files.cert;
  sec.ca_path_ = files.ca;
  sec.cert_pem_ = *std::move(cert);
  sec.key_pem_ = *std::move(key);
  sec.ca_pem_ = *std::move(ca);
  return sec;
}

absl::StatusOr<GrpcSecurity> GrpcSecurity::FromFlags() { return Load(TlsFilesFromFlags()); }

std::string GrpcSecurity::Describe() const {
  if (tls()) {
    return absl::StrCat("mutual TLS (CA ", ca_path_, ", certificate ", cert_path_, ")");
  }
  return explicitly_insecure_ ? "plain text (--insecure): no authentication, no encryption"
                              : "plain text (in process): no authentication, no encryption";
}

std::shared_ptr<grpc::ServerCredentials> GrpcSecurity::ServerCredentials(std::string token) const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(options);
  creds->SetAuthMetadataProcessor(std::make_shared<PolicyProcessor>(std::move(token)));
  return creds;
}

std::shared_ptr<grpc::ChannelCredentials> GrpcSecurity::ChannelCredentials(
    RoleSet expected_server_roles, std::string token) const {
  if (!tls()) return grpc::InsecureChannelCredentials();
  // The chain is verified against the CA, then ServerRoleVerifier checks the
  // server's role (the one this channel means to reach) instead of its host
  // name (see there); the per-call host
  // check, which compares the dialed name with the certificate's, is off
  // for the same reason.
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(
      std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
          ca_pem_,
          std::vector<grpc::experimental::IdentityKeyCertPair>{{key_pem_, cert_pem_}}));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_check_call_host(false);
  options.set_certificate_verifier(
      grpc::experimental::ExternalCertificateVerifier::Create<ServerRoleVerifier>(
          expected_server_roles));
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::experimental::TlsCredentials(options);
  if (token.empty()) return creds;
  return grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(token));
}

}  // namespace lockstep
