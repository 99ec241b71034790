// Real mutual-TLS handshakes with certificates from deploy/certs.sh: what a
// channel accepts of the server it reaches (common/grpcutil/tls.h). A server
// certificate signed by the CA with the role the channel means to reach is
// accepted at an address it does not name (workers are dialed at the IP the
// coordinator saw); another server role (a stolen worker key posing as the
// coordinator or a ps shard), the role "client", or no lockstep role is
// refused even when it names the host and is valid for serverAuth; another
// CA's is refused.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpcutil/health_service.h"
#include "common/grpcutil/tls.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

std::string CertsScript() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "lockstep", "/deploy/certs.sh");
}

int Shell(const std::string& cmd) { return std::system(cmd.c_str()); }

// DIR made by certs.sh, plus DIR/<name>.{pem,key} for a serverAuth
// certificate from the same CA with URI SAN `uri` ("" = none) naming
// 127.0.0.1.
void IssueExtra(const std::string& dir, const std::string& name, const std::string& uri) {
  const std::string san = uri.empty() ? "IP:127.0.0.1" : absl::StrCat("URI:", uri, ",IP:127.0.0.1");
  const std::string cmd = absl::StrCat(
      "set -e; cd '", dir, "'; ",
      "openssl ecparam -name prime256v1 -genkey -noout -out ", name, ".ec 2>/dev/null; ",
      "openssl pkcs8 -topk8 -nocrypt -in ", name, ".ec -out ", name, ".key 2>/dev/null; ",
      "openssl req -new -key ", name, ".key -subj /O=lockstep/CN=", name, " -out ", name,
      ".csr 2>/dev/null; ",
      "printf 'subjectAltName=", san,
      "\\nbasicConstraints=critical,CA:FALSE\\nkeyUsage=critical,digitalSignature,"
      "keyEncipherment\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ",
      name, ".ext; ",
      "openssl x509 -req -in ", name, ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-sha256 -extfile ",
      name, ".ext -out ", name, ".pem 2>/dev/null");
  ASSERT_EQ(Shell(cmd), 0) << cmd;
}

GrpcSecurity Load(const std::string& dir, const std::string& role) {
  TlsFiles f;
  f.cert = absl::StrCat(dir, "/", role, ".pem");
  f.key = absl::StrCat(dir, "/", role, ".key");
  f.ca = absl::StrCat(dir, "/ca.pem");
  absl::StatusOr<GrpcSecurity> s = GrpcSecurity::Load(f);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : GrpcSecurity();
}

class TlsHandshakeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new std::string(TmpDir() + "/pki");
    other_ = new std::string(TmpDir() + "/other");
    ASSERT_EQ(Shell(absl::StrCat("bash '", CertsScript(), "' --out='", *pki_, "' 2>/dev/null")), 0);
    ASSERT_EQ(Shell(absl::StrCat("bash '", CertsScript(), "' --out='", *other_, "' 2>/dev/null")),
              0);
    IssueExtra(*pki_, "client_as_server", "lockstep://role/client");
    IssueExtra(*pki_, "no_role", "");
  }
  static void TearDownTestSuite() {
    delete pki_;
    delete other_;
  }

  // Serves grpc.health.v1 on 0.0.0.0 with `server_role`'s certificate from
  // `dir`, asks it once through a channel with `client_role`'s certificate
  // from the test's CA dialing `host` and expecting a server of a role in
  // `expected`; the status of that call.
  grpc::Status Ask(const std::string& dir, const std::string& server_role,
                   const std::string& client_role, const std::string& host,
                   RoleSet expected = kServerRoles) {
    HealthService health({});
    health.SetAllServing(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("0.0.0.0:0", Load(dir, server_role).ServerCredentials(), &port);
    builder.RegisterService(&health);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (server == nullptr || port == 0) return grpc::Status(grpc::StatusCode::INTERNAL, "no server");
    auto channel = grpc::CreateChannel(absl::StrCat(host, ":", port),
                                       Load(*pki_, client_role).ChannelCredentials(expected));
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = stub->Check(&ctx, req, &resp);
    if (s.ok() && resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      s = grpc::Status(grpc::StatusCode::INTERNAL, "not SERVING");
    }
    health.Shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return s;
  }

  static std::string* pki_;
  static std::string* other_;
};

std::string* TlsHandshakeTest::pki_ = nullptr;
std::string* TlsHandshakeTest::other_ = nullptr;

TEST_F(TlsHandshakeTest, ServerRolesAcceptedAtTheNamedAddress) {
  for (const char* role : {"coordinator", "server", "worker"}) {
    grpc::Status s = Ask(*pki_, role, "client", "127.0.0.1");
    EXPECT_TRUE(s.ok()) << role << ": " << s.error_message();
  }
}

// The channels of lockstep-worker and the CLI (worker/worker_main.cc,
// client/lockstep_main.cc) each expect one role.
const RoleSet kCoordinatorOnly = RoleBit(PeerRole::kCoordinator);
const RoleSet kPsShard = RoleBit(PeerRole::kServer) | RoleBit(PeerRole::kCoordinator);
const RoleSet kPeerWorker = RoleBit(PeerRole::kWorker);

TEST_F(TlsHandshakeTest, TheRoleTheChannelMeansToReachIsAccepted) {
  EXPECT_TRUE(Ask(*pki_, "coordinator", "worker", "127.0.0.1", kCoordinatorOnly).ok());
  EXPECT_TRUE(Ask(*pki_, "coordinator", "client", "127.0.0.1", kCoordinatorOnly).ok());
  EXPECT_TRUE(Ask(*pki_, "server", "worker", "127.0.0.1", kPsShard).ok());
  EXPECT_TRUE(Ask(*pki_, "coordinator", "worker", "127.0.0.1", kPsShard).ok());  // its own shard
  EXPECT_TRUE(Ask(*pki_, "worker", "worker", "127.0.0.1", kPeerWorker).ok());
}

TEST_F(TlsHandshakeTest, AnotherServerRoleIsRefused) {
  // A stolen worker key posing as the coordinator or a ps shard, a ps key
  // posing as the coordinator or a worker, the coordinator's posing as a
  // worker: the handshake fails, the call never leaves the client.
  struct Case {
    const char* server;
    RoleSet expected;
    const char* what;
  };
  for (const Case& c : {Case{"worker", kCoordinatorOnly, "worker as coordinator"},
                        Case{"worker", kPsShard, "worker as ps shard"},
                        Case{"server", kCoordinatorOnly, "ps server as coordinator"},
                        Case{"server", kPeerWorker, "ps server as worker"},
                        Case{"coordinator", kPeerWorker, "coordinator as worker"},
                        Case{"client_as_server", kCoordinatorOnly, "client as coordinator"}}) {
    grpc::Status s = Ask(*pki_, c.server, "worker", "127.0.0.1", c.expected);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << c.what << ": " << s.error_message();
  }
}

TEST_F(TlsHandshakeTest, ServerRoleAcceptedAtAnAddressItsCertificateDoesNotName) {
  // certs.sh names localhost, 127.0.0.1 and ::1 only; 127.0.0.2 reaches the
  // same loopback server. A host-name check would refuse it.
  grpc::Status s = Ask(*pki_, "worker", "worker", "127.0.0.2");
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(TlsHandshakeTest, ClientRoleOrNoRoleServingIsRefused) {
  for (const char* server : {"client_as_server", "no_role"}) {
    grpc::Status s = Ask(*pki_, server, "worker", "127.0.0.1");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << server << ": " << s.error_message();
  }
}

TEST_F(TlsHandshakeTest, AnotherCasServerIsRefused) {
  grpc::Status s = Ask(*other_, "worker", "worker", "127.0.0.1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

}  // namespace
}  // namespace lockstep
