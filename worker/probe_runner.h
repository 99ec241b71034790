// The worker's side of the coordinator's reachability probe of a stuck
// ring or ps job (HeartbeatReply.probe; README "Two workers that cannot
// reach each other"): runs the probe (worker/net/reach_probe.h) on a thread of
// its own, so heartbeats keep going while connections are tried, and
// keeps the answer, which the next heartbeats carry
// (HeartbeatRequest.probe_id, reachable_ranks).
//
// Threading: Start, Fill and the destructor are called from one thread
// (the daemon's heartbeat thread); the probe thread only writes the
// answer, under mu_. The destructor and Start join the previous probe
// thread, so they may block until its deadline (the probe's timeout_ms,
// 1 s from the coordinator, at most kMaxTimeout); no lock is held across
// the join. Fill takes mu_ and nothing else, so a caller may hold its own
// lock around it (the daemon holds its mu_: order daemon mu_, then this
// mu_).
#ifndef LOCKSTEP_WORKER_PROBE_RUNNER_H_
#define LOCKSTEP_WORKER_PROBE_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

class ProbeRunner {
 public:
  // The probe itself: reach_probe.h's ProbeReachable unless a test
  // passes another.
  using ProbeFn =
      std::function<std::vector<bool>(const std::vector<std::string>&, absl::Time deadline)>;
  // Bounds on what a probe from the network may ask (checked before
  // anything is started): addresses (the job's K) and their length, and
  // the time each may take (timeout_ms is clamped to [kMinTimeout,
  // kMaxTimeout]).
  static constexpr int kMaxAddresses = 4096;
  static constexpr size_t kMaxAddressBytes = 512;
  static constexpr absl::Duration kMinTimeout = absl::Milliseconds(100);
  static constexpr absl::Duration kMaxTimeout = absl::Seconds(5);

  explicit ProbeRunner(ProbeFn probe = nullptr);
  ~ProbeRunner();
  ProbeRunner(const ProbeRunner&) = delete;
  ProbeRunner& operator=(const ProbeRunner&) = delete;

  // Starts `p` unless it is the probe started last (same job, generation
  // and id) or it
  // asks more than the bounds above (then it is ignored: the coordinator's
  // own deadline fails the job as before). A probe still running is
  // joined first.
  void Start(const v1::PeerProbe& p);
  // Sets req's probe_id and reachable_ranks to the finished answer for
  // (job_id, generation), if there is one.
  void Fill(uint64_t job_id, int64_t generation, v1::HeartbeatRequest* req);
  // Tests: waits up to `timeout` for the probe started last to answer;
  // whether it has.
  bool AwaitAnswer(absl::Duration timeout);

 private:
  ProbeFn probe_;
  std::thread thread_;  // the caller's thread only
  uint64_t started_job_ = 0, started_id_ = 0;  // the caller's thread only
  int64_t started_generation_ = -1;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t job_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int32_t> reachable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_PROBE_RUNNER_H_
