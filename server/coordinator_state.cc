// Coordinator facade: the state database (AttachStateDb, restoring after a
// restart, recording changes) and the paged sync history. Contracts:
// coordinator.h ("State database and restarts"), server/state/state_db.h.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/coordinator_state.pb.h"
#include "server/coordinator.h"
#include "server/job_series.h"
#include "server/membership.h"
#include "server/stored_series.h"
#include "server/weights_store.h"

namespace lockstep {

namespace {

// Heartbeats (200 ms apart by default) of a restored rank's worker saying
// it runs no job that are answered with resend_done_job_id before the rank
// counts as having abandoned the job.
constexpr int kDoneAsksAfterRestart = 25;

double UnixSeconds(absl::Time t) {
  return t == absl::InfinitePast() ? 0.0 : absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

absl::Time FromUnixSeconds(double s) {
  return s <= 0 ? absl::InfinitePast() : absl::UnixEpoch() + absl::Seconds(s);
}

// A cheap fingerprint of a started job's membership (generation, group,
// held steps, events), so the persistence hook, which runs on every report,
// writes the membership tables only when it changed. Never 0.
uint64_t MembershipFingerprint(const JobRecord& job) {
  const MembershipState& m = job.membership;
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(m.generation));
  mix(m.regrouping ? 1 : 2);
  mix(static_cast<uint64_t>(m.start_step));
  mix(static_cast<uint64_t>(m.source_rank));
  mix(static_cast<uint64_t>(job.k));
  mix(m.events.size());
  if (!m.events.empty()) mix(static_cast<uint64_t>(m.events.back().step()));
  mix(m.vacant.size());
  mix(static_cast<uint64_t>(absl::ToUnixMillis(m.waiting_since)));
  for (const RankRecord& r : job.ranks) {
    mix(std::hash<std::string>()(r.worker_id));
    mix(static_cast<uint64_t>(r.held_generation));
    mix(static_cast<uint64_t>(r.held_step));
    mix(r.holds_replica ? 3 : 4);  // a joiner's first step: stored at once
  }
  return h == 0 ? 1 : h;
}

StoredMembership MembershipOf(const JobRecord& job) {
  const MembershipState& m = job.membership;
  StoredMembership out;
  out.generation = m.generation;
  out.world = job.k;
  out.regrouping = m.regrouping;
  out.start_step = m.start_step;
  out.source_rank = m.source_rank;
  for (const RankRecord& r : job.ranks) {
    StoredMember x;
    x.worker_id = r.worker_id;
    x.address = r.address;
    x.data_address = r.data_address;
    x.hostname = r.hostname;
    x.held_generation = r.held_generation;
    x.held_step = r.held_step;
    out.members.push_back(std::move(x));
  }
  out.events.assign(m.events.begin(), m.events.end());
  out.waiting_since_unix_s = UnixSeconds(m.waiting_since);
  out.waiting_for = m.waiting_for;
  return out;
}

// The job's membership after a restart: the stored generation, members and
// events (schema v2); from a version 1 database (no membership tables), what
// its JobStatus showed (generation, regrouping, events; the ranks are the
// current generation's already).
void RestoreMembership(const StoredJob& stored, JobRecord* job, absl::Time now) {
  MembershipState& m = job->membership;
  const v1::JobStatus& st = stored.status;
  if (!stored.membership) {
    m.generation = st.generation();
    m.regrouping = st.regrouping();
    m.events.assign(st.membership_events().begin(), st.membership_events().end());
    if (m.generation > 0 && !m.regrouping && !m.events.empty()) {
      m.start_step = m.events.back().step();
    }
    return;
  }
  const StoredMembership& sm = *stored.membership;
  m.generation = sm.generation;
  m.regrouping = sm.regrouping;
  m.start_step = sm.start_step;
  m.source_rank = sm.source_rank;
  m.events.assign(sm.events.begin(), sm.events.end());
  while (m.events.size() > kMaxMembershipEvents) m.events.pop_front();
  RestoreDroppedWorkers(job);
  m.waiting_since = FromUnixSeconds(sm.waiting_since_unix_s);
  m.waiting_for = sm.waiting_for;
  m.vacant.clear();  // "wait": the ranks without a worker
  for (size_t r = 0; r < sm.members.size(); ++r) {
    if (sm.members[r].worker_id.empty()) m.vacant.push_back(static_cast<int>(r));
  }
  if (sm.members.empty()) return;
  // The members by rank; what the JobStatus kept of each (steps, hashes,
  // done) follows its worker.
  std::vector<RankRecord> ranks;
  for (const StoredMember& x : sm.members) {
    RankRecord r;
    for (RankRecord& old : job->ranks) {
      if (old.worker_id == x.worker_id) {
        r = std::move(old);
        break;
      }
    }
    r.worker_id = x.worker_id;
    r.address = x.address;
    r.data_address = x.data_address;
    r.hostname = x.hostname;
    r.held_generation = x.held_generation;
    r.held_step = x.held_step;
    r.last_heartbeat = now;
    ranks.push_back(std::move(r));
  }
  job->ranks = std::move(ranks);
}

}  // namespace

absl::Status Coordinator::AttachStateDb(StateDb* db) {
  absl::StatusOr<StateDb::Loaded> loaded = db->Load();
  if (!loaded.ok()) return loaded.status();
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes the log lines after unlocking
  state_db_ = db;
  constexpr uint64_t kMaxIncarnation = (uint64_t{1} << 43) - 1;
  if (loaded->counters.incarnation != 0) {
    incarnation_ = loaded->counters.incarnation & kMaxIncarnation;
  }
  if (loaded->counters.data_plane_key.size() == dataauth::kSecretBytes) {
    data_plane_key_ = loaded->counters.data_plane_key;
  }
  workers_.SetNextSeq(loaded->counters.next_worker_seq);
  jobs_.SetNextId(loaded->counters.next_job_id);
  for (const StoredWorker& s : loaded->workers) {
    Worker w;
    w.seq = s.seq;
    w.id = s.id;
    w.address = s.address;
    w.data_address = s.data_address;
    w.hostname = s.hostname;
    w.pid = s.pid;
    w.max_job_memory_bytes = s.max_job_memory_bytes;  // SubmitJob's check
    // Not heard from since the restart: LOST (never scheduled) until its
    // first heartbeat makes it IDLE ("worker back"), so no job starts on,
    // and no shrunk job grows onto, a worker that died meanwhile. Bound to
    // a RUNNING job: BUSY below, lost_after from the restart to come back.
    w.state = v1::LOST;
    w.last_seen = now;
    workers_.SetNextSeq(s.seq + 1);
    workers_.Add(std::move(w));
  }
  // Installed first: a job failed while restoring is stored as FAILED.
  jobs_.SetChangeHook([this](const JobRecord& job) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PersistJobLocked(job);  // the hook runs under mu_
  });
  // A RUNNING job continues: its ranks' workers are bound to it again (a
  // rank whose worker is gone fails it); a rank without a committed
  // ReportDone is asked for it again when its worker says it runs nothing
  // (Heartbeat); a ps job on this coordinator's own shard regroups, since
  // the shard's sums are gone (membership.h RegroupAfterRestart).
  auto restore_running = [this, now](Job* j) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::string missing;
    for (size_t r = 0; r < j->ranks.size(); ++r) {
      Rank& rank = j->ranks[r];
      if (rank.worker_id.empty()) continue;  // a vacant rank (wait)
      if (rank.acknowledged && !rank.done) rank.done_asks_left = kDoneAsksAfterRestart;
      Worker* w = workers_.Find(rank.worker_id);
      if (w == nullptr) {
        missing = WorkerInJob(rank.worker_id, static_cast<int>(r), rank.hostname, rank.address);
        continue;
      }
      w->state = v1::BUSY;
      w->job_id = j->id;
      w->rank = static_cast<int>(r);
    }
    if (!missing.empty()) {
      FailJobLocked(j, absl::StrCat(missing,
                                    " is unknown after the coordinator restarted (it left)"));
      return;
    }
    if (!j->coordinator_ps_shard) return;
    // The old generation's reports of the steps after the ranks' last
    // recorded ones come again from the workers (the database had not
    // committed their checks): the job takes them as late reports.
    std::vector<int64_t> last_steps;
    for (const Rank& rank : j->ranks) last_steps.push_back(rank.last_step);
    const int64_t generation = j->membership.generation;
    if (!RegroupAfterRestart(
            j, now,
            "this coordinator's parameter-server shard lost the job's in-flight sums in the "
            "restart: the ranks continue from the newest step one of them completed (step 0 "
            "when none had; the final state of a rank that had finished)")) {
      return;  // every rank had finished: their done reports come again
    }
    j->sync.OpenLate(generation, std::move(last_steps));
    LogLocked(LogLevel::kWarn, "ps job regrouping after the restart",
              {{"job", j->id},
               {"generation", j->membership.generation},
               {"world", j->k},
               {"reason", "its shard on this coordinator lost the in-flight sums"}});
  };
  int64_t running = 0;
  for (StoredJob& stored : loaded->jobs) {
    const v1::JobStatus& st = stored.status;
    v1::StoredJobState extra;
    if (!extra.ParseFromString(stored.extra)) {
      return absl::DataLossError(absl::StrCat(db->path(), ": job ", st.job_id(),
                                              ": stored job state does not parse"));
    }
    auto job = std::make_unique<Job>();
    job->id = st.job_id();
    job->spec = st.spec();
    job->state = st.state();
    job->reason = st.reason();
    job->k = st.spec().num_workers();
    // The addresses the job started with (its --ps_addresses or the
    // coordinator's own shard), whatever this coordinator's flags say.
    job->ps_addresses.assign(extra.ps_addresses().begin(), extra.ps_addresses().end());
    job->coordinator_ps_shard = extra.coordinator_ps_shard();
    // The checks table is committed every flush interval, the job row at
    // most every kPersistProgressEvery: the newer of the two counts.
    job->restored_checked = std::max(st.checked_steps(), stored.stored_checks);
    job->restored_mismatched = std::max(st.mismatched_steps(), stored.stored_mismatches);
    // The smaller of the two: late checks are committed out of step order.
    job->restored_first_mismatch =
        EarlierStep(stored.first_mismatch_step, stored.stored_first_mismatch);
    job->steps_done = std::max(st.step(), stored.stored_last_step + 1);
    job->epoch = st.epoch();
    job->total_steps = st.total_steps();
    job->examples = extra.examples();
    job->first_step_time = FromUnixSeconds(extra.first_step_unix_s());
    job->first_step_examples = extra.first_step_examples();
    job->loss = st.loss();
    job->examples_per_second = st.examples_per_second();
    job->test_accuracy = st.test_accuracy();
    job->test_loss = st.test_loss();
    job->out_of_sync = st.out_of_sync();
    job->skipped_steps = st.skipped_steps();  // non-finite gradients skipped
    job->last_skipped_step = st.skipped_steps() > 0 ? st.last_skipped_step() : -1;
    job->last_nonfinite_ranks.assign(st.last_nonfinite_ranks().begin(),
                                     st.last_nonfinite_ranks().end());
    job->submitted = FromUnixSeconds(st.submitted_unix_s());
    job->started = FromUnixSeconds(st.started_unix_s());
    job->finished = FromUnixSeconds(st.finished_unix_s());
    job->final_hash = st.final_hash();
    const int64_t stored_generation =
        stored.membership ? stored.membership->generation : st.generation();
    // The step every rank had reported when the job row was written (the
    // row is written at most every second, so a rank's own step there can
    // be past the newest stored check: its reports of the steps between are
    // resent after the restart and must not be taken for duplicates).
    int64_t every_rank_reported = std::numeric_limits<int64_t>::max();
    for (const v1::RankStatus& rs : st.ranks()) {
      every_rank_reported = std::min(every_rank_reported, rs.step() - 1);
    }
    for (int r = 0; r < st.ranks_size(); ++r) {
      const v1::RankStatus& rs = st.ranks(r);
      Rank rank;
      rank.worker_id = rs.worker_id();
      rank.address = rs.address();
      rank.hostname = rs.hostname();
      rank.data_address = rs.data_address();
      // Every rank reported the newest stored check's step and
      // every_rank_reported: a report of either (or older) sent again after
      // the restart is a duplicate; a later one is checked.
      rank.last_step = std::max(every_rank_reported, stored.stored_last_step);
      rank.last_hash = rs.last_hash();
      rank.in_sync = rs.in_sync();
      rank.last_heartbeat = now;
      rank.resident_bytes = rs.resident_bytes();
      if (r < extra.ranks_size()) {
        const v1::StoredRankState& x = extra.ranks(r);
        // A stored check means every rank reported a step: it started.
        rank.acknowledged = x.acknowledged() || rs.step() > 0 || stored.stored_last_step >= 0;
        rank.done = x.done();
        // A database from before done_generation was stored: the rank
        // finished in the generation the job was stored at (exact unless
        // the job regrouped after that done under the old code).
        rank.done_generation = x.has_done_generation() ? x.done_generation()
                               : x.done()              ? stored_generation
                                                       : 0;
        rank.done_hash = x.done_hash();
        rank.done_test_accuracy = x.done_test_accuracy();
        rank.done_test_loss = x.done_test_loss();
        rank.holds_replica = !x.lacks_replica();
      }
      job->ranks.push_back(std::move(rank));
    }
    RestoreMembership(stored, job.get(), now);
    // K of the current generation (a shrunk job runs below spec.num_workers).
    if (!job->ranks.empty()) job->k = static_cast<int>(job->ranks.size());
    job->sync = jobs_.NewSyncChecker(job->k);
    if (stored.series) {
      JobSeriesSnapshot series;
      if (!DecodeStoredSeries(*stored.series, &series)) {
        return absl::DataLossError(absl::StrCat(db->path(), ": job ", st.job_id(),
                                                ": stored curves do not parse"));
      }
      job->series.Restore(series);
    }
    Job* j = jobs_.Restore(std::move(job));
    PersistMark& mark = persisted_[j->id];
    mark.state = j->state;
    mark.at = now;
    mark.membership = stored.membership ? MembershipFingerprint(*j) : 0;
    mark.series_at = stored.series ? now : absl::InfinitePast();
    mark.series_final = stored.series && IsTerminalJobState(j->state);
    if (j->state == v1::RUNNING) {
      ++running;
      restore_running(j);
    }
    versions_.StateChanged(&j->watch, StatusLocked(*j, now));
  }
  // Final weights the store still keeps (oldest job first: eviction
  // order); rows it does not keep (a smaller max_jobs_with_weights) go.
  for (const StoredWeights& sw : loaded->weights) {
    Job* j = jobs_.Find(sw.job_id);
    // A RUNNING job's weights: published before the kill, whose SUCCEEDED
    // row was not committed yet (its ReportDone comes again).
    if (j == nullptr || (j->state != v1::SUCCEEDED && j->state != v1::RUNNING)) {
      state_db_->DeleteWeights(sw.job_id);
      continue;
    }
    FinalWeights w;
    w.job_id = sw.job_id;
    w.total = sw.total;
    w.data = *sw.data;
    w.block_names = sw.block_names;
    w.block_shapes = sw.block_shapes;
    v1::WeightsChunk all = MakeWeightsChunk(w, 0, w.total);
    all.set_worker_id(j->ranks.empty() ? "" : j->ranks[0].worker_id);
    absl::StatusOr<std::vector<uint64_t>> changed = weights_.AddChunk(all);
    if (!changed.ok()) {
      return absl::DataLossError(absl::StrCat(db->path(), ": job ", sw.job_id,
                                              ": stored weights: ", changed.status().message()));
    }
    for (uint64_t id : *changed) {
      PersistMark& mark = persisted_[id];
      if (std::shared_ptr<const FinalWeights> kept = weights_.Get(id); kept != nullptr) {
        mark.weights_stored = true;
        mark.weights = kept;
      } else {
        mark.weights_stored = false;
        mark.weights.reset();
        state_db_->DeleteWeights(id);
      }
    }
  }
  PersistCountersLocked();
  LogLocked(LogLevel::kInfo, "state restored",
            {{"state_db", db->path()},
             {"workers", static_cast<int64_t>(loaded->workers.size())},
             {"jobs", static_cast<int64_t>(loaded->jobs.size())},
             {"running", running},
             {"incarnation", incarnation_}});
  ScheduleLocked();
  return absl::OkStatus();
}

void Coordinator::PersistCountersLocked() {
  if (state_db_ == nullptr) return;
  state_db_->PutCounters({workers_.next_seq(), jobs_.next_id(), incarnation_, data_plane_key_});
}

void Coordinator::PersistWorkerLocked(const Worker& w) {
  if (state_db_ == nullptr) return;
  state_db_->PutWorker(
      {w.seq, w.id, w.address, w.data_address, w.hostname, w.pid, w.max_job_memory_bytes});
  PersistCountersLocked();
}

void Coordinator::ForgetWorkerLocked(int64_t seq) {
  if (state_db_ == nullptr) return;
  state_db_->DeleteWorker(seq);
}

void Coordinator::PersistJobLocked(const Job& job) {
  if (state_db_ == nullptr) return;
  const absl::Time now = clock_->Now();
  PersistMark& mark = persisted_[job.id];
  if (mark.state == v1::JOB_STATE_UNSPECIFIED) PersistCountersLocked();  // a new id
  // Every new check goes to the database (one per completed step).
  const int64_t checked = job.sync.checked();
  if (checked > mark.checked) {
    const int64_t fresh = std::min<int64_t>(checked - mark.checked, kMaxSyncReplyChecks);
    v1::SyncHistory h = job.sync.History(job.id, fresh);
    for (const v1::SyncCheck& c : h.checks()) {
      // Held before the check is queued: that step's check is not committed.
      if (options_.fault_hold_state_from_step >= 0 &&
          c.step() >= options_.fault_hold_state_from_step && state_db_->HoldWrites()) {
        LogLocked(LogLevel::kWarn, "fault: the state database commits nothing from now on",
                  {{"job", job.id}, {"step", c.step()}});
      }
      state_db_->AddSyncCheck(job.id, c);
    }
    mark.checked = checked;
  }
  // Final weights: stored when published, deleted when dropped or evicted.
  {
    std::shared_ptr<const FinalWeights> w = weights_.Get(job.id);
    if (w != nullptr ? (!mark.weights_stored || mark.weights.lock() != w) : mark.weights_stored) {
      mark.weights_stored = false;
      mark.weights.reset();
      if (w == nullptr || w->data.size() > kMaxStoredWeightsBytes) {
        state_db_->DeleteWeights(job.id);
      } else {
        StoredWeights sw;
        sw.job_id = job.id;
        sw.total = w->total;
        sw.block_names = w->block_names;
        sw.block_shapes = w->block_shapes;
        sw.data = std::shared_ptr<const std::string>(w, &w->data);  // shared, not copied
        state_db_->PutWeights(std::move(sw));
        mark.weights_stored = true;
        mark.weights = w;
      }
    }
  }
  // Membership: at once when it changed (a shrink, a regroup's start).
  const uint64_t membership = job.ranks.empty() ? 0 : MembershipFingerprint(job);
  const bool membership_changed = membership != mark.membership;
  // Curves: at the end, and now and then while running.
  const bool terminal = IsTerminalJobState(job.state);
  const bool series_due = job.state != v1::PENDING && !mark.series_final &&
                          (terminal || now - mark.series_at >= kPersistSeriesEvery);
  if (job.state == mark.state && now - mark.at < kPersistProgressEvery && !membership_changed &&
      !(series_due && terminal)) {
    return;
  }
  mark.state = job.state;
  mark.at = now;
  StoredJob stored;
  if (membership_changed) {
    stored.membership = MembershipOf(job);
    mark.membership = membership;
  }
  if (series_due) {
    stored.series = EncodeStoredSeries(job.series.Snapshot());
    mark.series_at = now;
    mark.series_final = terminal;
  }
  stored.status = JobStatusOf(job, now, /*has_weights=*/false);
  stored.first_mismatch_step = FirstMismatchOf(job);
  v1::StoredJobState extra;
  for (const std::string& p : job.ps_addresses) extra.add_ps_addresses(p);
  for (const Rank& r : job.ranks) {
    v1::StoredRankState* x = extra.add_ranks();
    x->set_acknowledged(r.acknowledged);
    x->set_done(r.done);
    x->set_done_generation(r.done_generation);
    x->set_done_hash(r.done_hash);
    x->set_done_test_accuracy(r.done_test_accuracy);
    x->set_done_test_loss(r.done_test_loss);
    x->set_lacks_replica(!r.holds_replica);
  }
  extra.set_examples(job.examples);
  extra.set_first_step_unix_s(UnixSeconds(job.first_step_time));
  extra.set_first_step_examples(job.first_step_examples);
  extra.set_first_mismatch_step(FirstMismatchOf(job));
  extra.set_coordinator_ps_shard(job.coordinator_ps_shard);
  extra.SerializeToString(&stored.extra);
  state_db_->PutJob(std::move(stored));
}

// GetSyncHistory and GetSyncHistoryPage: coordinator_history.cc.

}  // namespace lockstep
