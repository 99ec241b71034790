// Refused requests in a daemon's log, naming the peer (issue 11: "a flood of
// malformed messages at each daemon ... the daemons' logs name the refused
// peer"). A server interceptor sees every RPC's final status on every
// service of a server (streams included, and requests gRPC could not parse,
// which never reach a handler); a refusal is logged as one warning line
//   WARN  <component>: request refused method=Push code=INVALID_ARGUMENT
//         peer=ipv4:127.0.0.1:51234 detail="ps: job 7 shard 0: ..."
// Refusals are the codes that say the request itself was bad or not allowed:
// INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
// RESOURCE_EXHAUSTED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED,
// INTERNAL, UNKNOWN, DATA_LOSS and UNAUTHENTICATED (not CANCELLED,
// DEADLINE_EXCEEDED, ABORTED or UNAVAILABLE, which end normal calls too).
//
// Bounded (common/log_budget.h, shared with the raw-TCP hubs' refusal lines):
// at most `max_lines` lines per `window` (on `clock`); the others are counted, and the first line of a later window carries
// not_logged=<how many were left out>. A flood cannot fill the disk or slow
// the server with logging. The detail is cut at 200 bytes.
//
// Thread-safety: Refused() may be called from any thread. `logger` and
// `clock` are not owned and must outlive the log (and the servers it is
// installed on).
#ifndef LOCKSTEP_COMMON_GRPCUTIL_REFUSAL_LOG_H_
#define LOCKSTEP_COMMON_GRPCUTIL_REFUSAL_LOG_H_

#include <cstdint>
#include <memory>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/log_budget.h"

namespace lockstep {

class RefusalLog {
 public:
  RefusalLog(const Logger* logger, Clock* clock, int max_lines = 20,
             absl::Duration window = absl::Seconds(10));

  static bool IsRefusal(grpc::StatusCode code);

  // Logs (or counts) a refusal; other codes are ignored.
  void Refused(absl::string_view method, grpc::StatusCode code, absl::string_view peer,
               absl::string_view detail);

  int64_t refused() const;     // refusals seen
  int64_t not_logged() const;  // of which over the line budget

  // For ServerBuilder::experimental().SetInterceptorCreators (append it to
  // the server's other factories).
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

 private:
  const Logger* const logger_;
  LogBudget budget_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_GRPCUTIL_REFUSAL_LOG_H_
