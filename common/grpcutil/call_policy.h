// Who may call which lockstep RPC: the authorization table of every lockstep
// gRPC server, and the pure checks behind it (no gRPC types, so they are
// unit-tested without a server; common/grpcutil/tls.h applies them to each
// call through grpc::AuthContext).
//
// Roles come from the caller's certificate: a URI subject alternative name
// lockstep://role/<role> (deploy/certs.sh writes one per certificate):
//   coordinator  lockstep-coordinator's certificate (it also serves ps shards)
//   server       lockstep-server's (parameter-server shards)
//   worker       lockstep-worker's: it calls the coordinator's worker-facing
//                RPCs, its peers' PeerService and ReplicaState, ps shards
//   client       the lockstep CLI's and the Python client's: user-facing RPCs
//
// Table (deny by default: a method not listed is refused PERMISSION_DENIED):
//   Coordinator RegisterWorker, DeregisterWorker, Heartbeat, ReportStep,
//     ReportEval, ReportDone, UploadWeights                        worker
//   Coordinator SubmitJob, CancelJob                     client + bearer token
//   Coordinator GetJob, ListJobs, ListWorkers, GetSyncHistory, WatchJob,
//     GetWeights                                                   client
//   ParameterServer Push, Pull, DataAddress                        worker
//   ParameterServer Control                                        coordinator
//   PeerService Stream, ReplicaState FetchState                    worker
//   grpc.health.v1.Health *, grpc.reflection.v1alpha.ServerReflection *
//                                                                  any role
// Refusals: PERMISSION_DENIED for a role the method does not admit (or a
// certificate with no lockstep role), UNAUTHENTICATED for a missing or wrong
// bearer token. The token is compared in constant time.
#ifndef LOCKSTEP_COMMON_GRPCUTIL_CALL_POLICY_H_
#define LOCKSTEP_COMMON_GRPCUTIL_CALL_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/token_file.h"

namespace lockstep {

enum class PeerRole { kNone = 0, kCoordinator, kServer, kWorker, kClient };

// "coordinator", "server", "worker", "client", "none".
absl::string_view PeerRoleName(PeerRole role);

// The URI prefix of a role SAN: "lockstep://role/".
inline constexpr absl::string_view kRoleUriPrefix = "lockstep://role/";

// The role named by the first lockstep://role/<role> entry among `sans`
// (URI SANs, or entries of any kind: others are skipped). INVALID_ARGUMENT
// naming the entry for lockstep://role/<unknown>; kNone when there is none.
absl::StatusOr<PeerRole> RoleFromSubjectAltNames(const std::vector<std::string>& sans);

// Bitmask of roles; kAnyRole admits every known role.
using RoleSet = unsigned;
constexpr RoleSet RoleBit(PeerRole r) { return 1u << static_cast<unsigned>(r); }
inline constexpr RoleSet kAnyRole = RoleBit(PeerRole::kCoordinator) | RoleBit(PeerRole::kServer) |
                                    RoleBit(PeerRole::kWorker) | RoleBit(PeerRole::kClient);

// Roles that serve gRPC (a channel's server): coordinator, server, worker.
inline constexpr RoleSet kServerRoles = RoleBit(PeerRole::kCoordinator) |
                                        RoleBit(PeerRole::kServer) | RoleBit(PeerRole::kWorker);

// "coordinator", "server or coordinator", ...: the roles of `roles` joined by
// " or " (for messages).
std::string RoleSetName(RoleSet roles);

// What a channel checks of the server it reached (after the chain was
// verified against the CA): `server_sans` (its certificate's URI SANs) name a
// role in `expected` (the role the channel means to reach). UNAUTHENTICATED
// naming the role found and the one expected otherwise, also for a
// certificate with no lockstep role or an unknown one.
absl::Status CheckServerRole(const std::vector<std::string>& server_sans, RoleSet expected);

struct MethodRule {
  RoleSet roles = 0;
  bool needs_token = false;
};

// The rule for a full method name ("/lockstep.v1.Coordinator/SubmitJob");
// nullptr when the method is not in the table.
const MethodRule* FindMethodRule(absl::string_view method);

// ConstantTimeEquals (the bearer token's check) is in common/token_file.h.

// The decision for one call: `method` the full method name, `role` the
// caller's certificate role, `authorization` the value of its
// "authorization" metadata ("" if absent), `token` the coordinator's token
// ("" = no token configured: token methods are refused, since submitting
// and cancelling always need one under TLS).
absl::Status AuthorizeCall(absl::string_view method, PeerRole role,
                           absl::string_view authorization, absl::string_view token);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_CALL_POLICY_H_
