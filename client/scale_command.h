// `lockstep scale`: the scaling-efficiency curve of one job as one command.
//
//   lockstep --coordinator=HOST:PORT scale [job flags] --steps=N
//       [--workers_list=1,2,4,8] [--scaling=weak|strong] [--threshold=0.8]
//       [--repeats=1] [--out=PREFIX] [--link_gbps=10 --link_latency_us=50
//       --extrapolate=16,32,...,1024 --max_ps_shards=64] [--job_timeout_s=600]
//
// Runs the job (the job flags as for `submit`; --workers is replaced by each
// K) at every K of --workers_list up to the number of idle workers, writes
// PREFIX.csv, PREFIX.model.csv and PREFIX.svg, and prints the table, the K
// at which efficiency falls below --threshold and the model's
// extrapolation. The driver is client/scale_runner.h, the arithmetic
// common/scaling_model.h, the files client/scale_report.h; this file holds
// the flags and the gRPC adapter.
#ifndef LOCKSTEP_CLIENT_SCALE_COMMAND_H_
#define LOCKSTEP_CLIENT_SCALE_COMMAND_H_

#include <memory>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

namespace lockstep {

// Returns the process exit code: 0 done, 1 an RPC or a file write failed
// or a job did not succeed, 2 bad usage (a flag's value, no idle workers).
// `given`: the flags given on the command line (FlagsGivenOnCommandLine).
// `credentials`: the coordinator channel's (common/grpcutil/tls.h); nullptr =
// plain text. `json` (--json): stdout gets ScaleJson (client/scale_report.h)
// instead of the table; the files are written either way.
int ScaleCommand(const std::string& coordinator, const std::set<std::string>& given,
                 const std::string& out_prefix, int rpc_timeout_s,
                 std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
                 bool json = false);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_SCALE_COMMAND_H_
