#include "bench/local_cluster.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/bench_process.h"

namespace lockstep::bench {
namespace {

constexpr absl::Duration kRpcDeadline = absl::Seconds(10);

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

bool Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const ClusterConfig& config) {
  std::unique_ptr<LocalCluster> c(new LocalCluster(config));
  absl::Status s = c->StartAll();
  if (!s.ok()) return s;  // the destructor stops what started
  return c;
}

LocalCluster::~LocalCluster() {
  stub_.reset();
  Stop(pids_, absl::Seconds(10));
}

absl::StatusOr<pid_t> LocalCluster::StartDaemon(const std::string& name,
                                               std::vector<std::string> argv, int* port) {
  const std::string port_file = absl::StrCat(config_.log_dir, "/", name, ".port");
  const std::string log = absl::StrCat(config_.log_dir, "/", name, ".log");
  argv.push_back("--listen=127.0.0.1:0");
  argv.push_back(absl::StrCat("--port_file=", port_file));
  // Metrics stay on (as a user runs the daemons) on an OS-chosen port.
  argv.push_back("--metrics_port=0");
  absl::StatusOr<pid_t> pid = Spawn(argv, {{"OPENBLAS_NUM_THREADS", "1"}}, log, log);
  if (!pid.ok()) return pid.status();
  pids_.push_back(*pid);
  if (port != nullptr) {
    absl::StatusOr<int> p = WaitPortFile(port_file, *pid, config_.start_timeout, name, log);
    if (!p.ok()) return p.status();
    *port = *p;
  }
  return *pid;
}

absl::Status LocalCluster::StartAll() {
  const std::string& root = config_.root;
  std::vector<std::string> ps_addresses;
  for (int s = 0; s < config_.ps_servers; ++s) {
    std::vector<std::string> argv = {absl::StrCat(root, "/server/ps/lockstep-server"),
                                     "--role=ps", "--insecure"};
    argv.insert(argv.end(), config_.ps_flags.begin(), config_.ps_flags.end());
    int port = 0;
    absl::StatusOr<pid_t> pid = StartDaemon(absl::StrCat("ps", s), argv, &port);
    if (!pid.ok()) return pid.status();
    ps_addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  // Plain text on loopback, said explicitly (--insecure), as every local
  // bench cluster does.
  std::vector<std::string> argv = {absl::StrCat(root, "/server/lockstep-coordinator"),
                                   "--insecure"};
  if (!ps_addresses.empty()) {
    argv.push_back(absl::StrCat("--ps_addresses=", absl::StrJoin(ps_addresses, ",")));
  }
  argv.insert(argv.end(), config_.coordinator_flags.begin(), config_.coordinator_flags.end());
  int port = 0;
  absl::StatusOr<pid_t> coordinator = StartDaemon("coordinator", argv, &port);
  if (!coordinator.ok()) return coordinator.status();
  address_ = absl::StrCat("127.0.0.1:", port);
  stub_ = v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));

  std::vector<std::string> worker_ports;
  for (int w = 0; w < config_.workers; ++w) {
    std::vector<std::string> wargv = {absl::StrCat(root, "/worker/lockstep-worker"),
                                      absl::StrCat("--coordinator=", address_),
                                      "--blas_threads=1", "--insecure"};
    wargv.insert(wargv.end(), config_.worker_flags.begin(), config_.worker_flags.end());
    absl::StatusOr<pid_t> pid = StartDaemon(absl::StrCat("worker", w), wargv, nullptr);
    if (!pid.ok()) return pid.status();
  }
  return WaitWorkersIdle();
}

absl::Status LocalCluster::WaitWorkersIdle() {
  const absl::Time deadline = absl::Now() + config_.start_timeout;
  int idle = 0;
  for (;;) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::WorkerList list;
    grpc::Status s = stub_->ListWorkers(&ctx, v1::ListRequest(), &list);
    idle = 0;
    if (s.ok()) {
      for (const v1::WorkerInfo& w : list.workers()) idle += w.state() == v1::IDLE;
      if (idle >= config_.workers) return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          idle, " of ", config_.workers, " workers idle at coordinator ", address_, " after ",
          absl::FormatDuration(config_.start_timeout), " (logs in ", config_.log_dir, ")"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<JobRun> LocalCluster::RunJob(const std::vector<std::string>& job_flags,
                                           absl::Duration timeout, absl::Duration poll) {
  const int n = ++jobs_;
  const std::string out = absl::StrCat(config_.log_dir, "/submit", n, ".out");
  const std::string err = absl::StrCat(config_.log_dir, "/submit", n, ".err");
  std::vector<std::string> argv = {absl::StrCat(config_.root, "/client/lockstep"),
                                   absl::StrCat("--coordinator=", address_), "--insecure",
                                   "submit"};
  argv.insert(argv.end(), job_flags.begin(), job_flags.end());
  absl::StatusOr<pid_t> pid = Spawn(argv, {}, out, err);
  if (!pid.ok()) return pid.status();
  absl::StatusOr<int> rc = WaitExit(*pid, absl::Seconds(60), "lockstep submit");
  if (!rc.ok()) {
    Stop({*pid}, absl::Seconds(1));
    return rc.status();
  }
  absl::StatusOr<std::string> text = ReadFile(out);
  uint64_t id = 0;
  if (*rc != 0 || !text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &id)) {
    absl::StatusOr<std::string> why = ReadFile(err);
    return absl::InvalidArgumentError(
        absl::StrCat("lockstep submit ", absl::StrJoin(job_flags, " "), " exited ", *rc, ": ",
                     absl::StripAsciiWhitespace(why.ok() ? *why : "")));
  }
  const absl::Time deadline = absl::Now() + timeout;
  JobRun run;
  for (;;) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::JobRef ref;
    ref.set_job_id(id);
    v1::JobStatus status;
    const absl::Time sent = absl::Now();
    absl::Status s = FromGrpc(stub_->GetJob(&ctx, ref, &status), absl::StrCat("GetJob ", id));
    if (!s.ok()) return s;
    if (Terminal(status.state())) {
      run.status = std::move(status);
      return run;
    }
    if (status.state() == v1::RUNNING) {
      // The midpoint of the call: the step count is exact at some instant
      // between sending and the reply (loopback, well under a millisecond).
      run.progress.push_back({sent + (absl::Now() - sent) / 2, status.step()});
    }
    if (absl::Now() > deadline) {
      grpc::ClientContext cctx;
      SetDeadline(&cctx);
      v1::JobStatus ignored;
      stub_->CancelJob(&cctx, ref, &ignored);
      return absl::DeadlineExceededError(absl::StrCat("job ", id, " still ",
                                                      v1::JobState_Name(status.state()), " at step ",
                                                      status.step(), " after ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(poll);
  }
}

}  // namespace lockstep::bench
