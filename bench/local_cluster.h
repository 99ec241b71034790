// A lockstep cluster of real processes on 127.0.0.1 for //bench:scaling:
// S parameter-server shards (lockstep-server --role=ps), one coordinator
// (hosting the ps shard itself when S = 0) and K worker daemons, every
// port chosen by the OS and read back from --port_file; jobs are submitted
// with the `lockstep` client (so any job flag passes through) and watched
// with GetJob polls. Benchmark support, like deploy/cluster.sh in C++.
#ifndef LOCKSTEP_BENCH_LOCAL_CLUSTER_H_
#define LOCKSTEP_BENCH_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"

namespace lockstep::bench {

struct ClusterConfig {
  std::string root;     // runfiles root holding server/, worker/, client/
  std::string log_dir;  // port files and one log per process go here
  int workers = 1;      // K
  int ps_servers = 0;   // S lockstep-server shards (0: the coordinator hosts one)
  // Appended to each daemon's command line.
  std::vector<std::string> coordinator_flags, worker_flags, ps_flags;
  absl::Duration start_timeout = absl::Seconds(60);
};

// A finished job: its final status and what the GetJob polls saw while it
// ran (the bench's clock, the coordinator's completed-step count).
struct JobRun {
  v1::JobStatus status;
  struct Progress {
    absl::Time at;
    int64_t step = 0;  // JobStatus.step: steps every rank completed
  };
  std::vector<Progress> progress;  // RUNNING polls only, in time order
};

class LocalCluster {
 public:
  // Starts the processes and waits until K workers are registered and idle.
  // Errors name the process and its log; whatever started is stopped.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const ClusterConfig& config);

  // Stops every process it started (SIGTERM, then SIGKILL after 10 s).
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // `lockstep --coordinator=ADDR submit <job_flags>`, then polls GetJob every
  // `poll` until the job ends and returns its final status (any end state:
  // the caller checks) and the polls' progress. Errors: the client failed
  // (its stderr quoted), an RPC failed, or the job did not end within
  // `timeout` (it is cancelled).
  absl::StatusOr<JobRun> RunJob(const std::vector<std::string>& job_flags,
                                       absl::Duration timeout,
                                       absl::Duration poll = absl::Milliseconds(50));

  const std::string& address() const { return address_; }

 private:
  explicit LocalCluster(ClusterConfig config) : config_(std::move(config)) {}
  absl::Status StartAll();
  absl::StatusOr<pid_t> StartDaemon(const std::string& name, std::vector<std::string> argv,
                                    int* port);
  absl::Status WaitWorkersIdle();

  ClusterConfig config_;
  std::vector<pid_t> pids_;
  std::string address_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  int jobs_ = 0;
};

}  // namespace lockstep::bench

#endif  // LOCKSTEP_BENCH_LOCAL_CLUSTER_H_
