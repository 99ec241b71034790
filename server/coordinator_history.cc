// Coordinator facade: the sync history queries (GetSyncHistory,
// GetSyncHistoryPage) across memory and the state database, and the bound
// on finished jobs in memory (EvictFinishedJobsLocked, and the answers for
// an evicted job: its status, checks, curves, final watch event and the
// ListJobs rows, from the state database). Contracts: coordinator.h ("Sync
// history" and "Finished jobs"), server/state/sync_history.h,
// server/job_store.h.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/coordinator.h"
#include "server/stored_series.h"

namespace lockstep {

namespace {

// Keeps the newest checks of `h` that fit the reply caps.
void CapReply(v1::SyncHistory* h) {
  auto* checks = h->mutable_checks();
  size_t bytes = 0;
  int keep = 0;
  for (int i = checks->size() - 1; i >= 0; --i) {
    const size_t size = (*checks)[i].ByteSizeLong();
    if (keep >= Coordinator::kMaxSyncReplyChecks ||
        (keep > 0 && bytes + size > Coordinator::kMaxSyncReplyBytes)) {
      break;
    }
    bytes += size;
    ++keep;
  }
  if (keep < checks->size()) checks->DeleteSubrange(0, checks->size() - keep);
}

int64_t Want(int64_t max_entries) {
  return max_entries == 0 ? Coordinator::kMaxSyncReplyChecks
                          : std::min(max_entries, Coordinator::kMaxSyncReplyChecks);
}

void SetCounters(const v1::JobStatus& s, v1::SyncHistory* h) {
  h->set_checked_steps(s.checked_steps());
  h->set_mismatched_steps(s.mismatched_steps());
  // A stored JobStatus has no first mismatch field: the checks have it.
  h->set_first_mismatch_step(-1);
}

}  // namespace

void Coordinator::EvictFinishedJobsLocked() {
  if (jobs_.finished_in_memory() <= static_cast<size_t>(jobs_.limits().max_finished_jobs)) {
    return;
  }
  // A worker still bound to a finished job (it has not gone idle yet)
  // keeps the job in memory until it lets go.
  std::set<uint64_t> bound;
  for (const auto& [seq, w] : workers_.all()) {
    if (w.job_id != 0) bound.insert(w.job_id);
  }
  for (uint64_t id :
       jobs_.EvictFinished([&](uint64_t id) { return bound.count(id) == 0; })) {
    // Its final weights stay where they are (the weights store keeps at
    // most max_jobs_with_weights jobs' anyway, and their stored copies):
    // GetWeights still serves them, and when the store evicts them
    // UploadWeightsChunk deletes the stored copy.
    persisted_.erase(id);
  }
}

void Coordinator::AddEvictedJobs(v1::JobList* list, uint64_t before) {
  StateDb* db = nullptr;
  std::set<uint64_t> in_memory;
  uint64_t next_id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_db_ == nullptr || jobs_.evicted() == 0) return;
    db = state_db_;
    for (const auto& [id, job] : jobs_.all()) in_memory.insert(id);
    next_id = jobs_.next_id();
  }
  // Ids handed out before this call and not in memory then: evicted (a job
  // evicted since is listed twice at worst, never missed).
  bool more = false;
  absl::StatusOr<std::vector<v1::JobStatus>> stored = db->ReadJobStatuses(
      before > 0 ? std::min<uint64_t>(before, next_id) : next_id,
      [&](uint64_t id) { return in_memory.count(id) == 0; }, options_.max_listed_evicted_jobs,
      kMaxListedEvictedBytes, &more);
  if (!stored.ok() || stored->empty()) return;  // listed as not listed
  {
    absl::MutexLock lock(&mu_);
    for (v1::JobStatus& s : *stored) s.set_has_weights(weights_.Has(s.job_id()));
  }
  list->set_evicted_listed(static_cast<int64_t>(stored->size()));
  if (more) list->set_evicted_next_before(stored->front().job_id());  // the oldest listed
  auto* jobs = list->mutable_jobs();
  for (v1::JobStatus& s : *stored) *jobs->Add() = std::move(s);
  std::sort(jobs->begin(), jobs->end(), [](const v1::JobStatus& a, const v1::JobStatus& b) {
    return a.job_id() < b.job_id();
  });
}

absl::StatusOr<JobSeriesSnapshot> Coordinator::EvictedJobSeries(uint64_t job_id,
                                                                const absl::Status& not_found) {
  absl::StatusOr<v1::JobStatus> status = EvictedJobStatus(job_id, not_found);
  if (!status.ok()) return status.status();
  StateDb* db = nullptr;
  {
    absl::MutexLock lock(&mu_);
    db = state_db_;
  }
  JobSeriesSnapshot series;  // none stored (it never ran): empty curves
  absl::StatusOr<std::optional<std::string>> blob = db->ReadJobSeries(job_id);
  if (!blob.ok()) return blob.status();
  if (blob->has_value() && !DecodeStoredSeries(**blob, &series)) {
    return absl::DataLossError(
        absl::StrCat(db->path(), ": job ", job_id, ": stored curves do not parse"));
  }
  return series;
}

absl::StatusOr<Coordinator::JobEvents> Coordinator::EvictedJobEvents(
    uint64_t job_id, uint64_t seen_version, const absl::Status& not_found) {
  absl::StatusOr<v1::JobStatus> status = EvictedJobStatus(job_id, not_found);
  if (!status.ok()) return status.status();
  // Its final state, once: the watch ends with it (it is terminal).
  JobEvents e;
  e.events.push_back(std::move(*status));
  e.version = seen_version + 1;
  e.sent = clock_->Now();
  return e;
}

absl::StatusOr<v1::JobStatus> Coordinator::EvictedJobStatus(uint64_t job_id,
                                                            const absl::Status& not_found) {
  StateDb* db = nullptr;
  {
    absl::MutexLock lock(&mu_);
    db = state_db_;
  }
  if (db == nullptr) return not_found;
  absl::StatusOr<std::optional<v1::JobStatus>> stored = db->ReadJobStatus(job_id);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) return not_found;
  v1::JobStatus s = std::move(**stored);
  absl::MutexLock lock(&mu_);
  s.set_has_weights(weights_.Has(job_id));  // kept while the weights store keeps them
  return s;
}

absl::StatusOr<v1::SyncHistory> Coordinator::GetSyncHistory(uint64_t job_id,
                                                            int64_t max_entries) {
  if (max_entries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_entries: expected >= 0 (0 = all), got ", max_entries));
  }
  const int64_t want = Want(max_entries);
  v1::SyncHistory h;
  StateDb* db = nullptr;
  int64_t window_from = -1;  // the oldest step of memory's window (-1: empty)
  absl::Status not_found;
  {
    absl::MutexLock lock(&mu_);
    db = state_db_;
    absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
    if (found.ok()) {
      const Job& job = **found;
      h = job.sync.Snapshot(job_id, want);  // runs, old events, window (capped)
      h.set_checked_steps(CheckedStepsOf(job));
      h.set_mismatched_steps(MismatchedStepsOf(job));
      h.set_first_mismatch_step(FirstMismatchOf(job));
      window_from = job.sync.history().OldestFullStep();
    } else if (db == nullptr || !jobs_.WasEvicted(job_id)) {
      return found.status();
    } else {
      not_found = found.status();
    }
  }
  if (!not_found.ok()) {  // evicted: the database has it
    absl::StatusOr<v1::JobStatus> stored = EvictedJobStatus(job_id, not_found);
    if (!stored.ok()) return stored.status();
    h.set_job_id(job_id);
    SetCounters(*stored, &h);
    absl::StatusOr<std::vector<v1::SyncCheck>> last =
        db->ReadLastSyncChecks(job_id, INT64_MAX, want);
    if (!last.ok()) return last.status();
    for (v1::SyncCheck& c : *last) *h.add_checks() = std::move(c);
    CapReply(&h);
    h.set_next_step(-1);
    return h;
  }
  // Memory holds fewer than asked (the checks before a restart, or older
  // than its window): the database has every check, so the older ones come
  // from there instead of memory's summary (runs older than them stay).
  int window_checks = 0;
  for (const v1::SyncCheck& c : h.checks()) window_checks += c.step() >= window_from ? 1 : 0;
  if (window_from < 0) window_checks = 0;
  if (db != nullptr && window_checks < want && h.checked_steps() > window_checks) {
    const int64_t before = window_checks > 0 ? window_from : INT64_MAX;
    absl::StatusOr<std::vector<v1::SyncCheck>> older =
        db->ReadLastSyncChecks(job_id, before, want - window_checks);
    if (!older.ok()) return older.status();
    if (!older->empty()) {
      const int64_t first_db = older->front().step();
      v1::SyncHistory merged = h;
      merged.clear_checks();
      merged.clear_runs();
      for (const v1::SyncRun& r : h.runs()) {
        if (r.last_step() < first_db) *merged.add_runs() = r;
      }
      for (v1::SyncCheck& c : *older) *merged.add_checks() = std::move(c);
      for (const v1::SyncCheck& c : h.checks()) {
        if (window_checks > 0 && c.step() >= window_from) *merged.add_checks() = c;
      }
      h = std::move(merged);
    }
  }
  CapReply(&h);  // outside the lock: sizes of up to kMaxSyncReplyChecks checks
  h.set_next_step(-1);
  return h;
}

absl::StatusOr<v1::SyncHistory> Coordinator::GetSyncHistoryPage(uint64_t job_id,
                                                                int64_t from_step,
                                                                int64_t max_entries) {
  if (max_entries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_entries: expected >= 0 (0 = the cap), got ", max_entries));
  }
  const int64_t want = Want(max_entries);
  from_step = std::max<int64_t>(0, from_step);
  v1::SyncHistory page;
  page.set_job_id(job_id);
  StateDb* db = nullptr;
  bool evicted = false;
  absl::Status not_found;
  int64_t window_from = -1;  // memory's window: every check with step >= it
  int64_t newest = -1;       // the newest completed step
  {
    absl::MutexLock lock(&mu_);
    db = state_db_;
    absl::StatusOr<Job*> found = jobs_.FindOrNotFound(job_id);
    if (found.ok()) {
      const Job& job = **found;
      window_from = job.sync.history().OldestFullStep();
      newest = job.steps_done - 1;
      page.set_checked_steps(CheckedStepsOf(job));
      page.set_mismatched_steps(MismatchedStepsOf(job));
      page.set_first_mismatch_step(FirstMismatchOf(job));
    } else if (db == nullptr || !jobs_.WasEvicted(job_id)) {
      return found.status();
    } else {
      evicted = true;
      not_found = found.status();
    }
  }
  if (evicted) {
    absl::StatusOr<v1::JobStatus> stored = EvictedJobStatus(job_id, not_found);
    if (!stored.ok()) return stored.status();
    SetCounters(*stored, &page);
    newest = stored->step() - 1;
  }
  // Steps below `upper` are not in memory's window.
  const int64_t upper = evicted || window_from < 0 ? INT64_MAX : window_from;
  int64_t next = from_step;
  size_t bytes = 0;
  auto add = [&](const v1::SyncCheck& c) {
    const size_t size = c.ByteSizeLong();
    if (page.checks_size() >= want ||
        (page.checks_size() > 0 && bytes + size > kMaxSyncReplyBytes)) {
      return false;
    }
    bytes += size;
    *page.add_checks() = c;
    next = c.step() + 1;
    return true;
  };
  bool full = false;
  int64_t from_db = 0;
  if (db != nullptr && from_step < upper) {  // older checks: the database (no lock held)
    absl::StatusOr<std::vector<v1::SyncCheck>> stored =
        db->ReadSyncChecks(job_id, from_step, want);
    if (!stored.ok()) return stored.status();
    for (const v1::SyncCheck& c : *stored) {
      if (c.step() >= upper) break;
      if (!add(c)) {
        full = true;
        break;
      }
      ++from_db;
    }
    if (!full && static_cast<int64_t>(stored->size()) >= want && !stored->empty() &&
        stored->back().step() < upper) {
      full = true;  // the database has more below the window
    }
  }
  if (evicted) {
    page.set_next_step(full && next <= newest ? next : -1);
    return page;
  }
  // Then memory: the summary of what left the window when nothing came
  // from a database for it, and the window itself.
  v1::SyncHistory memory;
  bool gone = false;
  {
    absl::MutexLock lock(&mu_);
    const Job* job = jobs_.Find(job_id);
    if (job == nullptr) {
      gone = true;  // evicted meanwhile
    } else {
      const SyncHistoryBuffer& history = job->sync.history();
      const int64_t window = history.OldestFullStep();
      const int64_t below = window >= 0 ? window : history.LastStep() + 1;
      if (!full && from_db == 0 && next < below && history.LastStep() >= 0) {
        v1::SyncHistory summary;
        history.Summary(next, below, &summary);
        if (summary.runs_size() > 0 || summary.checks_size() > 0) {
          int64_t matching = 0;
          for (const v1::SyncRun& r : summary.runs()) {
            *page.add_runs() = r;
            matching += r.checks();
          }
          int64_t events = 0;
          for (const v1::SyncCheck& c : summary.checks()) {
            if (!add(c)) {
              full = true;
              break;
            }
            ++events;
          }
          page.set_summarised_to_step(full ? next : below);
          page.set_summary(absl::StrCat(
              "steps ", from_step, "-", (full ? next : below) - 1,
              ": per-step checks are not kept (older than the newest ",
              history.limits().recent, " in memory",
              db == nullptr ? ", and no --state_dir database" : ", not in the database",
              "); summarised: ", matching, " matching step(s) in ", summary.runs_size(),
              " run(s), ", events, " older mismatch(es)/event(s) shown as checks (",
              MismatchedStepsOf(*job), " mismatched in all)"));
          if (!full) next = below;
        }
      }
      if (!full && window >= 0) {
        const int64_t room = want - page.checks_size();
        if (room > 0) history.Page(std::max(next, window), room, &memory);
      }
    }
  }
  if (!gone && !full) {
    for (const v1::SyncCheck& c : memory.checks()) {
      if (c.step() < next) continue;
      if (!add(c)) {
        full = true;
        break;
      }
    }
    if (!full && memory.next_step() >= 0) full = true;
  }
  page.set_next_step(full && next <= newest ? next : -1);
  return page;
}

}  // namespace lockstep
