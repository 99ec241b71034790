// The `lockstep` client's coordinator commands (submit, resume, follow,
// status, sync, jobs, workers, cancel, export): each makes its RPCs through
// client/coordinator_client.h, prints text (or, with options.json, the
// messages as JSON) on stdout and errors on stderr, and returns the
// process exit code: 0 ok (a followed job SUCCEEDED), 1 an RPC failed, 2 bad
// usage or a rejected job (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
// RESOURCE_EXHAUSTED), 3 a followed job FAILED, 4 it was CANCELLED.
// client/lockstep_main.cc parses the flags into ClientCommandOptions and
// picks the command; submit also reads the job flags
// (common/train/job_flags.h) given on the command line.
//
// Threading: one thread; a command runs to completion (--follow until the
// job ends) before it returns.
#ifndef LOCKSTEP_CLIENT_CLIENT_COMMANDS_H_
#define LOCKSTEP_CLIENT_CLIENT_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"

namespace lockstep {

struct ClientCommandOptions {
  bool json = false;         // --json
  bool follow = false;       // --follow (submit, resume)
  bool no_wait = false;      // --no_wait (submit, resume)
  int64_t from_step = 0;     // --from_step (resume)
  int64_t max_entries = 20;  // --max_entries (sync)
  bool all = false;          // --all (sync, jobs)
  std::string out;           // --out (export)
  absl::Duration rpc_timeout = absl::Seconds(10);  // each RPC's (>= 1 s)
};

class ClientCommands {
 public:
  // `credentials`: the coordinator channel's (common/grpcutil/tls.h).
  ClientCommands(const std::string& address,
                 std::shared_ptr<grpc::ChannelCredentials> credentials,
                 ClientCommandOptions options);
  ~ClientCommands();

  // `given`: the flags given on the command line (FlagsGivenOnCommandLine).
  int Submit(const std::set<std::string>& given);
  int Resume(uint64_t job);
  int Follow(uint64_t job);
  int Status(uint64_t job);
  int Sync(uint64_t job);
  int Jobs();
  int Workers();
  int Cancel(uint64_t job);
  int Export(uint64_t job);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_CLIENT_COMMANDS_H_
