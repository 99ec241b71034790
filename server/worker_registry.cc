#include "server/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace lockstep {

std::string WorkerInJob(const std::string& id, int rank, const std::string& hostname,
                        const std::string& address) {
  return absl::StrFormat("worker %s (rank %d, %s%s)", id, rank,
                         hostname.empty() ? "" : "host " + hostname + ", ", address);
}

std::string WorkerInJob(const WorkerRecord& w) {
  return WorkerInJob(w.id, w.rank, w.hostname, w.address);
}

WorkerRecord* WorkerRegistry::Find(const std::string& id) {
  int64_t seq = 0;
  if (id.size() < 3 || id.compare(0, 2, "w-") != 0 ||
      !absl::SimpleAtoi(absl::string_view(id).substr(2), &seq)) {
    return nullptr;
  }
  auto it = workers_.find(seq);
  if (it == workers_.end() || it->second.id != id) return nullptr;
  return &it->second;
}

absl::Status WorkerRegistry::CheckAddress(const std::string& address,
                                          const std::string& hostname, int64_t pid,
                                          absl::Time now) const {
  for (const auto& [seq, old] : workers_) {
    if (old.address != address || old.state == v1::LOST) continue;
    if (SameProcess(old, hostname, pid)) continue;
    return absl::AlreadyExistsError(absl::StrFormat(
        "address %s is already registered by live worker %s (host %s, pid %d, last heartbeat "
        "%.1f s ago); refusing the worker on host %s, pid %d that claims it too. Give each "
        "worker its own address (--advertise=HOST, or leave --advertise unset on a wildcard "
        "--listen so the coordinator uses the caller's IP address); a restarted worker is "
        "accepted once the old one is LOST",
        address, old.id, old.hostname, old.pid, absl::ToDoubleSeconds(now - old.last_seen),
        hostname, pid));
  }
  return absl::OkStatus();
}

std::vector<const WorkerRecord*> WorkerRegistry::LiveAt(const std::string& address) const {
  std::vector<const WorkerRecord*> live;
  for (const auto& [seq, w] : workers_) {
    if (w.address == address && w.state != v1::LOST) live.push_back(&w);
  }
  return live;
}

std::vector<WorkerRecord> WorkerRegistry::RemoveAtAddress(const std::string& address) {
  std::vector<WorkerRecord> removed;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->second.address != address) {
      ++it;
      continue;
    }
    removed.push_back(std::move(it->second));
    it = workers_.erase(it);
  }
  return removed;
}

WorkerRecord* WorkerRegistry::Add(WorkerRecord w) {
  const int64_t seq = w.seq;
  return &workers_.insert_or_assign(seq, std::move(w)).first->second;
}

bool WorkerRegistry::Seen(WorkerRecord* w, absl::Time now) {
  w->last_seen = now;
  if (w->state != v1::LOST) return false;
  w->state = w->job_id != 0 ? v1::BUSY : v1::IDLE;
  return true;
}

void WorkerRegistry::Unbind(WorkerRecord* w) {
  w->job_id = 0;
  w->rank = -1;
  w->state = v1::IDLE;
}

std::vector<WorkerRegistry::Lost> WorkerRegistry::MarkLost(absl::Time now,
                                                           absl::Duration lost_after) {
  std::vector<Lost> lost;
  for (auto& [seq, w] : workers_) {
    if (w.state == v1::LOST) continue;
    const absl::Duration silent = now - w.last_seen;
    if (silent <= lost_after) continue;
    w.state = v1::LOST;
    ++lost_total_;
    lost.push_back(Lost{&w, silent});
  }
  return lost;
}

std::vector<WorkerRecord*> WorkerRegistry::Idle() {
  std::vector<WorkerRecord*> idle;
  for (auto& [seq, w] : workers_) {
    if (w.state == v1::IDLE) idle.push_back(&w);
  }
  return idle;
}

bool WorkerRegistry::AnyBusy() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& entry) { return entry.second.state == v1::BUSY; });
}

}  // namespace lockstep
