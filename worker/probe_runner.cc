#include "worker/probe_runner.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "worker/net/reach_probe.h"

namespace lockstep {

ProbeRunner::ProbeRunner(ProbeFn probe)
    : probe_(probe ? std::move(probe) : ProbeFn(ProbeReachable)) {}

ProbeRunner::~ProbeRunner() {
  if (thread_.joinable()) thread_.join();
}

void ProbeRunner::Start(const v1::PeerProbe& p) {
  if (p.id() == 0 || (p.job_id() == started_job_ && p.id() == started_id_ &&
                      p.generation() == started_generation_)) {
    return;
  }
  if (p.addresses_size() > kMaxAddresses) return;
  for (const std::string& a : p.addresses()) {
    if (a.size() > kMaxAddressBytes) return;
  }
  if (thread_.joinable()) thread_.join();  // ends by its own deadline
  started_job_ = p.job_id();
  started_id_ = p.id();
  started_generation_ = p.generation();
  {
    absl::MutexLock l(&mu_);
    done_ = false;
  }
  const absl::Duration timeout =
      std::clamp(absl::Milliseconds(p.timeout_ms()), kMinTimeout, kMaxTimeout);
  std::vector<std::string> addresses(p.addresses().begin(), p.addresses().end());
  thread_ = std::thread([this, addresses = std::move(addresses), timeout, job = p.job_id(),
                         id = p.id(), generation = p.generation()] {
    const std::vector<bool> ok = probe_(addresses, absl::Now() + timeout);
    std::vector<int32_t> reachable;
    for (size_t r = 0; r < ok.size(); ++r) {
      if (ok[r]) reachable.push_back(static_cast<int32_t>(r));
    }
    absl::MutexLock l(&mu_);
    done_ = true;
    job_ = job;
    id_ = id;
    generation_ = generation;
    reachable_ = std::move(reachable);
  });
}

void ProbeRunner::Fill(uint64_t job_id, int64_t generation, v1::HeartbeatRequest* req) {
  absl::MutexLock l(&mu_);
  if (!done_ || job_ != job_id || generation_ != generation) return;
  req->set_probe_id(id_);
  for (int32_t r : reachable_) req->add_reachable_ranks(r);
}

bool ProbeRunner::AwaitAnswer(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
}

}  // namespace lockstep
