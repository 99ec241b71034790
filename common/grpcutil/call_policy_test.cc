#include "common/grpcutil/call_policy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

constexpr char kToken[] = "s3cret-token";

absl::StatusCode Code(absl::string_view method, PeerRole role, absl::string_view auth = "") {
  return AuthorizeCall(method, role, auth, kToken).code();
}

TEST(CallPolicyTest, RoleFromSubjectAltNames) {
  EXPECT_EQ(*RoleFromSubjectAltNames({"localhost", "127.0.0.1", "lockstep://role/worker"}),
            PeerRole::kWorker);
  EXPECT_EQ(*RoleFromSubjectAltNames({"lockstep://role/client"}), PeerRole::kClient);
  EXPECT_EQ(*RoleFromSubjectAltNames({"lockstep://role/coordinator"}), PeerRole::kCoordinator);
  EXPECT_EQ(*RoleFromSubjectAltNames({"lockstep://role/server"}), PeerRole::kServer);
  EXPECT_EQ(*RoleFromSubjectAltNames({"spiffe://x/y", "example.org"}), PeerRole::kNone);
  EXPECT_EQ(*RoleFromSubjectAltNames({}), PeerRole::kNone);
  absl::StatusOr<PeerRole> bad = RoleFromSubjectAltNames({"lockstep://role/admin"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lockstep://role/admin"), std::string::npos);
}

TEST(CallPolicyTest, WorkerCannotCallUserFacingRpcs) {
  for (const char* m :
       {"/lockstep.v1.Coordinator/SubmitJob", "/lockstep.v1.Coordinator/CancelJob",
        "/lockstep.v1.Coordinator/GetJob", "/lockstep.v1.Coordinator/ListJobs",
        "/lockstep.v1.Coordinator/GetWeights", "/lockstep.v1.Coordinator/WatchJob"}) {
    EXPECT_EQ(Code(m, PeerRole::kWorker, "Bearer s3cret-token"),
              absl::StatusCode::kPermissionDenied)
        << m;
  }
}

TEST(CallPolicyTest, ClientCannotCallWorkerRpcs) {
  for (const char* m :
       {"/lockstep.v1.Coordinator/RegisterWorker", "/lockstep.v1.Coordinator/Heartbeat",
        "/lockstep.v1.Coordinator/ReportStep", "/lockstep.v1.Coordinator/ReportSteps",
        "/lockstep.v1.Coordinator/ReportStream", "/lockstep.v1.Coordinator/ReportDone",
        "/lockstep.v1.Coordinator/UploadWeights", "/lockstep.v1.ParameterServer/Push",
        "/lockstep.v1.ParameterServer/Pull", "/lockstep.v1.PeerService/Stream",
        "/lockstep.v1.ReplicaState/FetchState", "/lockstep.v1.ReplicaState/FetchCheckpoint"}) {
    EXPECT_EQ(Code(m, PeerRole::kClient), absl::StatusCode::kPermissionDenied) << m;
    EXPECT_EQ(Code(m, PeerRole::kWorker), absl::StatusCode::kOk) << m;
    // A server or coordinator certificate is no worker either.
    EXPECT_EQ(Code(m, PeerRole::kServer), absl::StatusCode::kPermissionDenied) << m;
    EXPECT_EQ(Code(m, PeerRole::kCoordinator), absl::StatusCode::kPermissionDenied) << m;
  }
}

// Only the coordinator sets ps data-plane secrets and forgets job keys: a
// worker certificate (which may register a secret through DataAddress) may
// not, nor may a ps server's or a client's.
TEST(CallPolicyTest, OnlyTheCoordinatorControlsPsServers) {
  const char* m = "/lockstep.v1.ParameterServer/Control";
  EXPECT_EQ(Code(m, PeerRole::kCoordinator), absl::StatusCode::kOk);
  for (PeerRole r : {PeerRole::kWorker, PeerRole::kServer, PeerRole::kClient, PeerRole::kNone}) {
    EXPECT_EQ(Code(m, r, "Bearer s3cret-token"), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(Code("/lockstep.v1.ParameterServer/DataAddress", PeerRole::kWorker),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code("/lockstep.v1.ParameterServer/DataAddress", PeerRole::kCoordinator),
            absl::StatusCode::kPermissionDenied);
}

TEST(CallPolicyTest, SubmitAndCancelNeedTheToken) {
  for (const char* m :
       {"/lockstep.v1.Coordinator/SubmitJob", "/lockstep.v1.Coordinator/CancelJob"}) {
    EXPECT_EQ(Code(m, PeerRole::kClient, "Bearer s3cret-token"), absl::StatusCode::kOk);
    EXPECT_EQ(Code(m, PeerRole::kClient), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(Code(m, PeerRole::kClient, "Bearer s3cret-tokeN"),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(Code(m, PeerRole::kClient, "Bearer s3cret-token2"),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(Code(m, PeerRole::kClient, "Bearer "), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(Code(m, PeerRole::kClient, "Basic s3cret-token"), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(Code(m, PeerRole::kClient, "s3cret-token"), absl::StatusCode::kUnauthenticated);
    // No token configured: nobody may submit.
    EXPECT_EQ(AuthorizeCall(m, PeerRole::kClient, "Bearer x", "").code(),
              absl::StatusCode::kUnauthenticated);
  }
  // Read-only client calls need no token.
  EXPECT_EQ(Code("/lockstep.v1.Coordinator/ListJobs", PeerRole::kClient), absl::StatusCode::kOk);
  // The role is checked before the token: a worker with the right token is
  // still refused PERMISSION_DENIED.
  absl::Status s = AuthorizeCall("/lockstep.v1.Coordinator/SubmitJob", PeerRole::kWorker,
                                 "Bearer s3cret-token", kToken);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("a worker certificate may not call it (allowed: client)"),
            std::string::npos)
      << s.message();
}

TEST(CallPolicyTest, UnknownMethodsAndRolelessCertificatesAreDenied) {
  EXPECT_EQ(Code("/lockstep.v1.Coordinator/Nope", PeerRole::kClient),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code("", PeerRole::kClient), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code("/grpc.health.v1.Health/Check", PeerRole::kNone),
            absl::StatusCode::kPermissionDenied);
  for (PeerRole r :
       {PeerRole::kCoordinator, PeerRole::kServer, PeerRole::kWorker, PeerRole::kClient}) {
    EXPECT_EQ(Code("/grpc.health.v1.Health/Check", r), absl::StatusCode::kOk);
  }
}

TEST(CallPolicyTest, ServerRoleMustBeTheExpectedOne) {
  const std::vector<std::string> worker = {"spiffe://x", "lockstep://role/worker"};
  EXPECT_TRUE(CheckServerRole(worker, RoleBit(PeerRole::kWorker)).ok());
  EXPECT_TRUE(CheckServerRole(worker, kServerRoles).ok());
  const absl::Status s = CheckServerRole(worker, RoleBit(PeerRole::kCoordinator));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("has role worker, expected coordinator"), absl::string_view::npos)
      << s;
  const absl::Status ps =
      CheckServerRole(worker, RoleBit(PeerRole::kServer) | RoleBit(PeerRole::kCoordinator));
  EXPECT_NE(ps.message().find("expected coordinator or server"), absl::string_view::npos) << ps;
  EXPECT_EQ(CheckServerRole({}, kServerRoles).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckServerRole({"lockstep://role/client"}, kServerRoles).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckServerRole({"lockstep://role/boss"}, kServerRoles).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CallPolicyTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcabc"));
  EXPECT_FALSE(ConstantTimeEquals("abcabc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", ""));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace lockstep
