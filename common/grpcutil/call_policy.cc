#include "common/grpcutil/call_policy.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

constexpr RoleSet kWorker = RoleBit(PeerRole::kWorker);
constexpr RoleSet kClient = RoleBit(PeerRole::kClient);
constexpr RoleSet kCoordinator = RoleBit(PeerRole::kCoordinator);

struct Entry {
  absl::string_view method;
  MethodRule rule;
};

constexpr Entry kTable[] = {
    {"/lockstep.v1.Coordinator/RegisterWorker", {kWorker, false}},
    {"/lockstep.v1.Coordinator/DeregisterWorker", {kWorker, false}},
    {"/lockstep.v1.Coordinator/Heartbeat", {kWorker, false}},
    {"/lockstep.v1.Coordinator/ReportStep", {kWorker, false}},
    {"/lockstep.v1.Coordinator/ReportSteps", {kWorker, false}},
    {"/lockstep.v1.Coordinator/ReportStream", {kWorker, false}},
    {"/lockstep.v1.Coordinator/ReportEval", {kWorker, false}},
    {"/lockstep.v1.Coordinator/ReportDone", {kWorker, false}},
    {"/lockstep.v1.Coordinator/UploadWeights", {kWorker, false}},
    {"/lockstep.v1.Coordinator/SubmitJob", {kClient, true}},
    {"/lockstep.v1.Coordinator/CancelJob", {kClient, true}},
    {"/lockstep.v1.Coordinator/GetJob", {kClient, false}},
    {"/lockstep.v1.Coordinator/ListJobs", {kClient, false}},
    {"/lockstep.v1.Coordinator/ListWorkers", {kClient, false}},
    {"/lockstep.v1.Coordinator/GetSyncHistory", {kClient, false}},
    {"/lockstep.v1.Coordinator/WatchJob", {kClient, false}},
    {"/lockstep.v1.Coordinator/GetWeights", {kClient, false}},
    {"/lockstep.v1.ParameterServer/Push", {kWorker, false}},
    {"/lockstep.v1.ParameterServer/Pull", {kWorker, false}},
    {"/lockstep.v1.ParameterServer/DataAddress", {kWorker, false}},
    {"/lockstep.v1.ParameterServer/Control", {kCoordinator, false}},
    {"/lockstep.v1.PeerService/Stream", {kWorker, false}},
    {"/lockstep.v1.ReplicaState/FetchState", {kWorker, false}},
    {"/lockstep.v1.ReplicaState/FetchCheckpoint", {kWorker, false}},
    {"/grpc.health.v1.Health/Check", {kAnyRole, false}},
    {"/grpc.health.v1.Health/Watch", {kAnyRole, false}},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", {kAnyRole, false}},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", {kAnyRole, false}},
};

}  // namespace

std::string RoleSetName(RoleSet roles) {
  std::string out;
  for (PeerRole r : {PeerRole::kCoordinator, PeerRole::kServer, PeerRole::kWorker,
                     PeerRole::kClient}) {
    if ((roles & RoleBit(r)) == 0) continue;
    if (!out.empty()) out += " or ";
    out += std::string(PeerRoleName(r));
  }
  return out;
}

absl::string_view PeerRoleName(PeerRole role) {
  switch (role) {
    case PeerRole::kCoordinator:
      return "coordinator";
    case PeerRole::kServer:
      return "server";
    case PeerRole::kWorker:
      return "worker";
    case PeerRole::kClient:
      return "client";
    case PeerRole::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<PeerRole> RoleFromSubjectAltNames(const std::vector<std::string>& sans) {
  for (const std::string& san : sans) {
    if (!absl::StartsWith(san, kRoleUriPrefix)) continue;
    const absl::string_view name = absl::string_view(san).substr(kRoleUriPrefix.size());
    for (PeerRole r : {PeerRole::kCoordinator, PeerRole::kServer, PeerRole::kWorker,
                       PeerRole::kClient}) {
      if (name == PeerRoleName(r)) return r;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("certificate role \"", san,
                     "\": expected lockstep://role/ followed by coordinator, server, worker or "
                     "client"));
  }
  return PeerRole::kNone;
}

absl::Status CheckServerRole(const std::vector<std::string>& server_sans, RoleSet expected) {
  absl::StatusOr<PeerRole> role = RoleFromSubjectAltNames(server_sans);
  if (!role.ok()) return absl::UnauthenticatedError(role.status().message());
  if ((expected & RoleBit(*role)) == 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the server's certificate has role ", PeerRoleName(*role), ", expected ",
        RoleSetName(expected), " (", kRoleUriPrefix, "<role> URI SAN): not the server this "
        "channel means to reach"));
  }
  return absl::OkStatus();
}

const MethodRule* FindMethodRule(absl::string_view method) {
  for (const Entry& e : kTable) {
    if (e.method == method) return &e.rule;
  }
  return nullptr;
}

absl::Status AuthorizeCall(absl::string_view method, PeerRole role,
                           absl::string_view authorization, absl::string_view token) {
  const MethodRule* rule = FindMethodRule(method);
  if (rule == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, ": not a method this server lets any certificate call"));
  }
  if (role == PeerRole::kNone || (rule->roles & RoleBit(role)) == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, ": a ", PeerRoleName(role), " certificate may not call it (allowed: ",
        RoleSetName(rule->roles), ")"));
  }
  if (!rule->needs_token) return absl::OkStatus();
  if (token.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, ": this coordinator has no --token_file, so nobody may call it"));
  }
  constexpr absl::string_view kBearer = "Bearer ";
  if (authorization.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        method, ": needs a bearer token (authorization: Bearer <token>; lockstep "
                "--token_file or LOCKSTEP_TOKEN)"));
  }
  if (!absl::StartsWith(authorization, kBearer) ||
      !ConstantTimeEquals(authorization.substr(kBearer.size()), token)) {
    return absl::UnauthenticatedError(absl::StrCat(method, ": wrong bearer token"));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
