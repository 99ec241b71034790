#include "server/scheduler.h"

#include <algorithm>
#include <map>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/train/job_spec_convert.h"
#include "server/membership.h"

namespace lockstep {

std::vector<std::string> PsAddresses(const std::vector<std::string>& configured,
                                     const std::string& advertise) {
  if (!configured.empty()) return configured;
  if (!advertise.empty()) return {advertise};
  return {};
}

absl::Status CheckPsShardsAtSubmit(const v1::JobSpec& spec, const std::vector<std::string>& ps) {
  if (spec.sync_mode() != v1::PS) return absl::OkStatus();
  const int shards = PsShards(spec);
  if (shards > static_cast<int>(ps.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spec.ps_shards: job needs ", shards, " parameter-server shard(s), ", ps.size(),
        " address(es) are configured (", absl::StrJoin(ps, ", "), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckCanStartNow(int k, const std::vector<WorkerRecord*>& idle,
                              size_t pending_jobs) {
  if (static_cast<int>(idle.size()) >= k && pending_jobs == 0) return absl::OkStatus();
  std::vector<std::string> ids;
  for (const WorkerRecord* w : idle) ids.push_back(w->id);
  std::string msg = absl::StrCat("job needs ", k, " idle worker", k == 1 ? "" : "s", ", ",
                                 idle.size(), idle.size() == 1 ? " is" : " are", " idle");
  if (!ids.empty()) absl::StrAppend(&msg, " (", absl::StrJoin(ids, ", "), ")");
  if (pending_jobs != 0) {
    absl::StrAppend(&msg, "; ", pending_jobs, " earlier job(s) are pending");
  }
  return absl::ResourceExhaustedError(msg);
}

namespace {

// How many of `idle` registered each hostname.
std::map<std::string, int> PerHost(const std::vector<WorkerRecord*>& idle) {
  std::map<std::string, int> per_host;
  for (const WorkerRecord* w : idle) ++per_host[w->hostname];
  return per_host;
}

}  // namespace

StartPlan PlanStart(const JobRecord& job, const std::vector<WorkerRecord*>& idle,
                    const std::vector<std::string>& ps) {
  StartPlan plan;
  if (static_cast<int>(idle.size()) < job.k) return plan;  // kWait: strict FIFO
  if (job.spec.sync_mode() == v1::PS) {
    const int shards = PsShards(job.spec);
    if (static_cast<int>(ps.size()) < shards) {
      plan.kind = StartPlan::kFail;
      plan.fail_reason = absl::StrCat("spec.ps_shards: job needs ", shards,
                                      " parameter-server shards, ", ps.size(),
                                      " addresses are configured");
      return plan;
    }
    plan.ps_addresses.assign(ps.begin(), ps.begin() + shards);
  } else if (job.spec.peer_transport() == v1::TCP) {
    // Every rank dials its peers' raw-TCP hubs: a worker that registered
    // no data address (an older lockstep-worker) cannot take part.
    std::vector<std::string> missing;
    for (int r = 0; r < job.k; ++r) {
      if (idle[r]->data_address.empty()) {
        missing.push_back(absl::StrCat(idle[r]->id, " (", idle[r]->address, ")"));
      }
    }
    if (!missing.empty()) {
      const bool one = missing.size() == 1;
      plan.kind = StartPlan::kFail;
      plan.fail_reason = absl::StrCat(
          "spec.peer_transport: TCP needs every worker's data address; worker",
          one ? " " : "s ", absl::StrJoin(missing, ", "), one ? " has" : " have",
          " none (a lockstep-worker without a TCP data port; upgrade it or submit with "
          "--peer_transport=grpc)");
      return plan;
    }
  }
  if (job.spec.sync_mode() != v1::PS && job.spec.peer_transport() == v1::SHM) {
    // Every rank maps its peers' links in /dev/shm: one host.
    bool one_host = true;
    for (int r = 1; r < job.k; ++r) one_host &= idle[r]->hostname == idle[0]->hostname;
    if (!one_host) {
      std::vector<std::string> parts;
      for (const auto& [host, n] : PerHost(idle)) parts.push_back(absl::StrCat(host, " ", n));
      plan.kind = StartPlan::kFail;
      plan.fail_reason = absl::StrCat(
          "spec.peer_transport: SHM needs all ", job.k,
          " ranks on one host; idle workers per host: ", absl::StrJoin(parts, ", "),
          " (submit with --peer_transport=tcp across hosts)");
      return plan;
    }
  }
  plan.kind = StartPlan::kStart;
  return plan;
}

void PreferOneHost(int k, std::vector<WorkerRecord*>* idle) {
  std::map<std::string, int> per_host = PerHost(*idle);
  for (const WorkerRecord* w : *idle) {
    if (per_host[w->hostname] >= k) {
      const std::string host = w->hostname;
      std::stable_partition(idle->begin(), idle->end(),
                            [&](const WorkerRecord* x) { return x->hostname == host; });
      return;
    }
  }
}

void PreferAsRankZero(const std::string& writer, std::vector<WorkerRecord*>* idle) {
  if (writer.empty()) return;
  auto it = std::find_if(idle->begin(), idle->end(),
                         [&](const WorkerRecord* w) { return w->id == writer; });
  if (it != idle->end()) std::rotate(idle->begin(), it, it + 1);
}

bool CanTakeRank(const JobRecord& job, const WorkerRecord& w) {
  if (WasDropped(job, w.id)) return false;  // its peers could not reach it
  if (job.spec.sync_mode() == v1::PS) return true;
  switch (job.spec.peer_transport()) {
    case v1::TCP:
      return !w.data_address.empty();
    case v1::SHM:
      for (const RankRecord& r : job.ranks) {
        // A vacant rank has no worker (membership.cc VacateRank).
        if (!r.worker_id.empty() && r.hostname != w.hostname) return false;
      }
      return true;
    default:
      return true;
  }
}

void BindRanks(JobRecord* job, const std::vector<WorkerRecord*>& idle,
               std::vector<std::string> ps_addresses, absl::Time now) {
  job->ps_addresses = std::move(ps_addresses);
  job->ranks.assign(job->k, RankRecord());
  for (int r = 0; r < job->k; ++r) {
    WorkerRecord* w = idle[r];
    w->state = v1::BUSY;
    w->job_id = job->id;
    w->rank = r;
    RankRecord& rank = job->ranks[r];
    rank.worker_id = w->id;
    rank.address = w->address;
    rank.data_address = w->data_address;
    rank.hostname = w->hostname;
    rank.last_heartbeat = w->last_seen;
  }
  job->state = v1::RUNNING;
  job->started = now;
}

}  // namespace lockstep
