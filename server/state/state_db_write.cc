// StateDb's writer thread: WriterLoop takes the queued batch and Write
// applies it in one transaction (contracts: state_db.h).
#include <sqlite3.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/state/sqlite_util.h"
#include "server/state/state_db.h"

namespace lockstep {

using statedb::DataPlaneKeyName;
using statedb::Exec;
using statedb::kDataPlaneKeyWords;
using statedb::SqlError;
using statedb::Stmt;

void StateDb::WriterLoop() {
  for (;;) {
    Batch batch;
    uint64_t from_seq;  // the batch holds the puts at positions (from_seq, seq]
    uint64_t seq;
    bool stop;
    {
      absl::MutexLock l(&mu_);
      const int64_t soon = options_.max_queued_checks / 2;
      auto wake = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!held_ && (flush_requested_ ||
                                        static_cast<int64_t>(queued_.checks.size()) >= soon));
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.flush_interval);
      if (held_ && !stopping_) continue;  // HoldWrites: nothing is committed
      flush_requested_ = false;
      stop = stopping_;
      std::swap(batch, queued_);
      from_seq = committed_seq_;
      seq = enqueued_seq_;
      stats_.queued_checks = 0;
    }
    absl::Status s = absl::OkStatus();
    const absl::Time start = absl::Now();
    int64_t rows = 0;
    if (!batch.empty()) {
      rows = static_cast<int64_t>((batch.counters ? 3 : 0) + batch.workers.size() +
                                  batch.jobs.size() + batch.checks.size() +
                                  batch.weights.size());
      s = Write(batch);
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    {
      absl::MutexLock l(&mu_);
      if (rows > 0) {
        ++stats_.transactions;
        stats_.rows += rows;
        stats_.checks_written += static_cast<int64_t>(batch.checks.size());
        stats_.write_seconds += seconds;
      }
      if (!s.ok()) {
        stats_.last_error = std::string(s.message());
        failed_commits_.push_back({from_seq, seq, stats_.last_error});
        if (failed_commits_.size() > kFailedCommitsKept) failed_commits_.pop_front();
      }
      committed_seq_ = seq;
      if (stop && queued_.empty()) return;
    }
  }
}

namespace {

// The membership tables of one job, inside Write's transaction; `check`
// steps a statement and records the first error.
template <typename Check>
void WriteMembership(sqlite3* db, uint64_t job_id, const StoredMembership& m, Check& check) {
  const int64_t id = static_cast<int64_t>(job_id);
  Stmt put(db,
           "INSERT OR REPLACE INTO job_membership(job_id, generation, world, regrouping, "
           "start_step, source_rank, waiting_since_unix_s, waiting_for) "
           "VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
  put.Int(1, id);
  put.Int(2, m.generation);
  put.Int(3, m.world);
  put.Int(4, m.regrouping ? 1 : 0);
  put.Int(5, m.start_step);
  put.Int(6, m.source_rank);
  sqlite3_bind_double(put.get(), 7, m.waiting_since_unix_s);
  put.Text(8, m.waiting_for);
  check(put, "writing a job's membership");
  Stmt del_members(db, "DELETE FROM job_members WHERE job_id = ?");
  del_members.Int(1, id);
  check(del_members, "replacing a job's members");
  Stmt member(db,
              "INSERT INTO job_members(job_id, rank, worker_id, address, data_address, "
              "hostname, held_generation, held_step) VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
  for (size_t r = 0; r < m.members.size(); ++r) {
    const StoredMember& x = m.members[r];
    member.Int(1, id);
    member.Int(2, static_cast<int64_t>(r));
    member.Text(3, x.worker_id);
    member.Text(4, x.address);
    member.Text(5, x.data_address);
    member.Text(6, x.hostname);
    member.Int(7, x.held_generation);
    member.Int(8, x.held_step);
    check(member, "writing a job member");
  }
  Stmt del_events(db, "DELETE FROM membership_events WHERE job_id = ?");
  del_events.Int(1, id);
  check(del_events, "replacing a job's membership events");
  Stmt event(db,
             "INSERT INTO membership_events(job_id, seq, generation, kind, body) "
             "VALUES(?, ?, ?, ?, ?)");
  for (size_t i = 0; i < m.events.size(); ++i) {
    event.Int(1, id);
    event.Int(2, static_cast<int64_t>(i));
    event.Int(3, m.events[i].generation());
    event.Text(4, m.events[i].kind());
    event.Blob(5, m.events[i].SerializeAsString());
    check(event, "writing a membership event");
  }
}

}  // namespace

absl::Status StateDb::Write(Batch& batch) {
  sqlite3* db = writer_db_;
  if (options_.commit_fault_for_test) {
    if (absl::Status s = options_.commit_fault_for_test(); !s.ok()) return s;
  }
  if (absl::Status s = Exec(db, path_, "BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::Status result = absl::OkStatus();
  auto check = [&](Stmt& st, absl::string_view what) {
    if (!result.ok()) return;
    if (!st.ok() || st.Step() != SQLITE_DONE) result = SqlError(db, path_, what);
    st.Reset();
  };
  if (batch.counters) {
    Stmt put(db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    const std::pair<const char*, int64_t> rows[] = {
        {"next_worker_seq", batch.counters->next_worker_seq},
        {"next_job_id", static_cast<int64_t>(batch.counters->next_job_id)},
        {"incarnation", static_cast<int64_t>(batch.counters->incarnation)}};
    for (const auto& [key, value] : rows) {
      put.Text(1, key);
      put.Int(2, value);
      check(put, "writing meta");
    }
    const std::string& k = batch.counters->data_plane_key;
    if (k.size() == 8 * kDataPlaneKeyWords) {
      for (int i = 0; i < kDataPlaneKeyWords; ++i) {
        uint64_t w = 0;
        for (int b = 0; b < 8; ++b) {
          w |= static_cast<uint64_t>(static_cast<uint8_t>(k[8 * i + b])) << (8 * b);
        }
        put.Text(1, DataPlaneKeyName(i));
        put.Int(2, static_cast<int64_t>(w));
        check(put, "writing meta");
      }
    }
  }
  if (!batch.workers.empty()) {
    Stmt put(db,
             "INSERT OR REPLACE INTO workers(seq, id, address, data_address, hostname, pid) "
             "VALUES(?, ?, ?, ?, ?, ?)");
    Stmt del(db, "DELETE FROM workers WHERE seq = ?");
    Stmt put_limit(db,
                   "INSERT OR REPLACE INTO worker_limits(seq, max_job_memory_bytes) VALUES(?, ?)");
    Stmt del_limit(db, "DELETE FROM worker_limits WHERE seq = ?");
    for (const auto& [seq, w] : batch.workers) {
      if (!w) {
        del.Int(1, seq);
        check(del, "deleting a worker");
        del_limit.Int(1, seq);
        check(del_limit, "deleting a worker's limit");
        continue;
      }
      put_limit.Int(1, w->seq);
      put_limit.Int(2, w->max_job_memory_bytes);
      check(put_limit, "writing a worker's limit");
      put.Int(1, w->seq);
      put.Text(2, w->id);
      put.Text(3, w->address);
      put.Text(4, w->data_address);
      put.Text(5, w->hostname);
      put.Int(6, w->pid);
      check(put, "writing a worker");
    }
  }
  if (!batch.jobs.empty()) {
    Stmt put(db,
             "INSERT OR REPLACE INTO jobs(id, state, status, first_mismatch_step, "
             "last_checked_step, extra) VALUES(?, ?, ?, ?, ?, ?)");
    std::string blob;
    for (const auto& [id, j] : batch.jobs) {
      blob.clear();
      j.status.SerializeToString(&blob);
      put.Int(1, static_cast<int64_t>(id));
      put.Int(2, j.status.state());
      put.Blob(3, blob);
      put.Int(4, j.first_mismatch_step);
      put.Int(5, j.last_checked_step);
      put.Blob(6, j.extra);
      check(put, "writing a job");
      if (j.membership) WriteMembership(db, id, *j.membership, check);
      if (j.series) {
        Stmt series(db, "INSERT OR REPLACE INTO job_series(job_id, body) VALUES(?, ?)");
        series.Int(1, static_cast<int64_t>(id));
        series.Blob(2, *j.series);
        check(series, "writing a job's series");
      }
    }
  }
  if (!batch.weights.empty()) {
    Stmt put(db, "INSERT OR REPLACE INTO job_weights(job_id, total, blocks, data) "
                 "VALUES(?, ?, ?, ?)");
    Stmt del(db, "DELETE FROM job_weights WHERE job_id = ?");
    for (const auto& [id, w] : batch.weights) {
      if (!w || w->data == nullptr) {
        del.Int(1, static_cast<int64_t>(id));
        check(del, "deleting a job's weights");
        continue;
      }
      v1::WeightsChunk blocks;
      for (const std::string& name : w->block_names) blocks.add_block_names(name);
      for (int64_t d : w->block_shapes) blocks.add_block_shapes(d);
      put.Int(1, static_cast<int64_t>(id));
      put.Int(2, w->total);
      put.Blob(3, blocks.SerializeAsString());
      put.Blob(4, *w->data);
      check(put, "writing a job's weights");
    }
  }
  if (!batch.checks.empty()) {
    Stmt put(db,
             "INSERT OR REPLACE INTO sync_checks(job_id, step, all_match, body) "
             "VALUES(?, ?, ?, ?)");
    std::string blob;
    for (const auto& [job_id, c] : batch.checks) {
      blob.clear();
      c.SerializeToString(&blob);
      put.Int(1, static_cast<int64_t>(job_id));
      put.Int(2, c.step());
      put.Int(3, c.all_match() ? 1 : 0);
      put.Blob(4, blob);
      check(put, "writing a sync check");
    }
  }
  if (!result.ok()) {
    (void)Exec(db, path_, "ROLLBACK");
    return result;
  }
  return Exec(db, path_, "COMMIT");
}

}  // namespace lockstep
