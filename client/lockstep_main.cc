// lockstep: the command-line client of the coordinator.
//
//   lockstep [--coordinator=HOST:PORT] submit [job flags] [--follow] [--no_wait]
//   lockstep status JOB | sync JOB | jobs | workers | cancel JOB
//   lockstep resume JOB [--from_step=N] [--follow]   (client/resume_command.h)
//   lockstep export JOB --out=weights.npz     (or .npy: one flat array)
//   lockstep scale [job flags] --steps=N [--workers_list=1,2,4,8 ...]
//       (client/scale_command.h: the scaling-efficiency curve, CSV + SVG)
//   lockstep --coordinator=ANY_DAEMON health [--service=NAME] [--timeout_ms=N]
//       (exit 0 when SERVING, 1 otherwise: for container health checks)
//   every command takes --json
//
// This file parses the flags and picks the command; the coordinator commands
// are client/client_commands.h.
//
// Exit codes: 0 ok (a followed job SUCCEEDED), 1 an RPC failed, 2 bad usage
// or a rejected job, 3 a followed job FAILED, 4 it was CANCELLED.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "client/client_commands.h"
#include "client/health_command.h"
#include "client/scale_command.h"
#include "common/flags_usage.h"
#include "common/grpcutil/tls.h"
#include "common/train/job_flags.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address host:port");
ABSL_FLAG(bool, json, false, "Machine-readable JSON output");
ABSL_FLAG(bool, follow, false, "submit, resume: show live progress until the job ends");
ABSL_FLAG(int64_t, from_step, 0,
          "resume: the checkpoint to start from, by step (0 = the newest valid one)");
ABSL_FLAG(bool, no_wait, false,
          "submit: fail at once instead of waiting PENDING when too few workers are idle");
ABSL_FLAG(int64_t, max_entries, 20,
          "sync: most recent checks to list (0 = as many as one reply holds, a few thousand)");
ABSL_FLAG(bool, all, false,
          "sync: list every check from step 0, page by page (older ones from the coordinator's "
          "--state_dir database); jobs: every evicted job the state database holds too, page "
          "by page (else the newest 1000)");
ABSL_FLAG(std::string, out, "",
          "export: output file (.npz: one array per tensor; .npy: flat); scale: output prefix "
          "(PREFIX.csv, PREFIX.model.csv, PREFIX.svg; default \"scale\")");
ABSL_FLAG(int32_t, timeout_s, 10, "Deadline of each RPC in seconds (not of --follow)");
ABSL_FLAG(std::string, service, "",
          "health: the service to ask about (\"\" = the whole daemon, or e.g. "
          "lockstep.v1.Coordinator)");
ABSL_FLAG(int64_t, timeout_ms, 2000, "health: deadline of the health check, ms (> 0)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the coordinator's bearer token, sent with every call (submit, cancel "
          "and resume need it under TLS); default: $LOCKSTEP_TOKEN. Needs --tls_*");

namespace lockstep {
namespace {

// The channel's credentials: --tls_* (common/grpcutil/tls.h) and the bearer
// token from --token_file, else $LOCKSTEP_TOKEN (TLS only). The server must
// present a certificate of a role in `server_roles`.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentialsFromFlags(
    RoleSet server_roles) {
  absl::StatusOr<GrpcSecurity> security = GrpcSecurity::FromFlags();
  if (!security.ok()) return security.status();
  if (security->explicitly_insecure()) {
    std::fprintf(stderr, "lockstep: warning: --insecure: plain text, no authentication\n");
  }
  std::string token;
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    if (!security->tls()) {
      return absl::InvalidArgumentError(
          "--token_file: needs mutual TLS (--tls_cert, --tls_key, --tls_ca)");
    }
    absl::StatusOr<std::string> read = ReadTokenFile("--token_file", file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  } else if (const char* env = std::getenv("LOCKSTEP_TOKEN");
             env != nullptr && *env != '\0' && security->tls()) {
    token = std::string(absl::StripAsciiWhitespace(env));
  }
  return security->ChannelCredentials(server_roles, token);
}

int Usage() {
  std::fprintf(stderr,
               "usage: lockstep [--coordinator=HOST:PORT] COMMAND [flags]\n"
               "  submit [job flags] [--follow] [--no_wait]   submit a job, print its id\n"
               "  status JOB       job state, progress and per-rank sync\n"
               "  sync JOB         per-step hash agreement history\n"
               "  jobs [--all]     all jobs (--all: every evicted one the state database holds)\n"
               "  workers          registered workers\n"
               "  cancel JOB       cancel a job\n"
               "  resume JOB [--from_step=N] [--follow]   a new job that continues JOB from\n"
               "                   its newest valid checkpoint (or step N); prints its id\n"
               "  export JOB --out=F.npz|F.npy   download the final weights\n"
               "  health [--service=S] [--timeout_ms=N]   any daemon's gRPC health (the\n"
               "                   --coordinator address may be a worker's or ps server's);\n"
               "                   prints SERVING etc., exit 0 only when SERVING\n"
               "  scale [job flags] --steps=N [--workers_list=1,2,4,8] [--scaling=weak|strong]\n"
               "        [--threshold=0.8] [--out=PREFIX] [--link_gbps=10 --link_latency_us=50]\n"
               "                   run the job at each K, write the scaling-efficiency curve\n"
               "                   (PREFIX.csv, PREFIX.svg) and the cost model's extrapolation\n"
               "every command takes --json; `lockstep --help` lists the job flags\n");
  return 2;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  // --help lists the client's flags and the job flags `submit` takes
  // (common/train/job_flags.cc), and exits 0.
  lockstep::ConfigureFlagsUsage(
      "lockstep [--coordinator=HOST:PORT] "
      "submit|status|sync|jobs|workers|cancel|resume|export|health|scale ...\n"
      "  submit takes the job flags listed below (the same as lockstep-train's); so does scale");
  std::vector<char*> args = lockstep::ParseFlagsOrExit(argc, argv);
  if (args.size() < 2) return lockstep::Usage();
  const std::string cmd = args[1];
  // Mutual TLS with a client certificate and the bearer token
  // (common/grpcutil/tls.h): --tls_*, --token_file or $LOCKSTEP_TOKEN. Every
  // command talks to the coordinator and expects its role, except `health`,
  // which probes any daemon (the probes of deploy/k8s and Compose).
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      lockstep::ClientCredentialsFromFlags(
          cmd == "health" ? lockstep::kServerRoles
                          : lockstep::RoleBit(lockstep::PeerRole::kCoordinator));
  if (!credentials.ok()) {
    std::fprintf(stderr, "lockstep: %s\n", std::string(credentials.status().message()).c_str());
    return 2;
  }
  lockstep::ClientCommandOptions options;
  options.json = absl::GetFlag(FLAGS_json);
  options.follow = absl::GetFlag(FLAGS_follow);
  options.no_wait = absl::GetFlag(FLAGS_no_wait);
  options.from_step = absl::GetFlag(FLAGS_from_step);
  options.max_entries = absl::GetFlag(FLAGS_max_entries);
  options.all = absl::GetFlag(FLAGS_all);
  options.out = absl::GetFlag(FLAGS_out);
  options.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  lockstep::ClientCommands client(absl::GetFlag(FLAGS_coordinator), *credentials, options);
  auto job_arg = [&](uint64_t* id) {
    return args.size() == 3 && absl::SimpleAtoi(args[2], id) && *id > 0;
  };
  uint64_t id = 0;
  if (cmd == "submit" && args.size() == 2) {
    return client.Submit(lockstep::FlagsGivenOnCommandLine(argc, argv));
  }
  if (cmd == "scale" && args.size() == 2) {
    return lockstep::ScaleCommand(absl::GetFlag(FLAGS_coordinator),
                                  lockstep::FlagsGivenOnCommandLine(argc, argv),
                                  absl::GetFlag(FLAGS_out), absl::GetFlag(FLAGS_timeout_s),
                                  *credentials, absl::GetFlag(FLAGS_json));
  }
  if (cmd == "health" && args.size() == 2) {
    return lockstep::HealthCommand(absl::GetFlag(FLAGS_coordinator), absl::GetFlag(FLAGS_service),
                                   absl::GetFlag(FLAGS_timeout_ms), absl::GetFlag(FLAGS_json),
                                   *credentials);
  }
  if (cmd == "jobs" && args.size() == 2) return client.Jobs();
  if (cmd == "workers" && args.size() == 2) return client.Workers();
  if (cmd == "status" || cmd == "sync" || cmd == "cancel" || cmd == "export" ||
      cmd == "follow" || cmd == "resume") {
    if (!job_arg(&id)) {
      std::fprintf(stderr, "lockstep %s: expected one job id (a positive integer)\n", cmd.c_str());
      return 2;
    }
    if (cmd == "status") return client.Status(id);
    if (cmd == "sync") return client.Sync(id);
    if (cmd == "cancel") return client.Cancel(id);
    if (cmd == "follow") return client.Follow(id);
    if (cmd == "resume") return client.Resume(id);
    return client.Export(id);
  }
  return lockstep::Usage();
}
