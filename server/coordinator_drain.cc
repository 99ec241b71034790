// Coordinator: workers leaving and the coordinator draining (SIGTERM). The
// contracts are at the top of coordinator.h ("Leaving and draining").
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/coordinator.h"

namespace lockstep {
namespace {

constexpr size_t kMaxLeaveReasonBytes = 256;

}  // namespace

absl::StatusOr<v1::DeregisterWorkerReply> Coordinator::DeregisterWorker(
    const v1::DeregisterWorkerRequest& request) {
  std::string reason = request.reason().substr(0, kMaxLeaveReasonBytes);
  if (reason.empty()) reason = "it deregistered";
  Locked lock(this);  // writes this call's log lines after unlocking
  v1::DeregisterWorkerReply reply;
  Worker* w = workers_.Find(request.worker_id());
  if (w == nullptr) return reply;
  if (w->job_id != 0) {
    Job* job = jobs_.Find(w->job_id);
    const bool finished_its_part = job != nullptr && w->rank >= 0 &&
                                   w->rank < static_cast<int>(job->ranks.size()) &&
                                   job->ranks[w->rank].worker_id == w->id &&
                                   job->ranks[w->rank].done;
    // A worker leaving mid-job is gone from it as a lost one is: the job's
    // on_worker_lost decides (shrink, wait, or fail).
    if (job != nullptr && job->state == v1::RUNNING && !finished_its_part &&
        !LoseWorkerLocked(job, *w,
                          absl::StrCat(WorkerInJob(*w), " left: ", reason))) {
      reply.set_failed_job_id(job->id);
    }
  }
  LogLocked(LogLevel::kInfo, "worker left",
            {{"worker", w->id}, {"address", w->address}, {"reason", reason}});
  ForgetWorkerLocked(w->seq);
  workers_.Remove(w->seq);
  ScheduleLocked();
  return reply;
}

std::vector<uint64_t> Coordinator::BeginDrain(const std::string& reason) {
  Locked lock(this);
  std::vector<uint64_t> failed;
  if (draining_) return failed;
  draining_ = true;
  for (const auto& [id, job] : jobs_.all()) {
    if (job->state == v1::PENDING || job->state == v1::RUNNING) {
      FailJobLocked(job.get(), reason);
      failed.push_back(id);
    }
  }
  jobs_.ClearPending();
  return failed;
}

bool Coordinator::draining() {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool Coordinator::WaitForWorkersIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none_busy = [this]() { return !workers_.AnyBusy(); };
  return mu_.AwaitWithDeadline(absl::Condition(&none_busy), deadline);
}

}  // namespace lockstep
