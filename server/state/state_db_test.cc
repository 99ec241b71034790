#include "server/state/state_db.h"

#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = lockstep::v1;

std::string TempDir() {
  std::string tmpl = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                  "/state_db_XXXXXX");
  char* d = mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl + "/state";  // Open creates it
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

StoredJob Job(uint64_t id, v1::JobState state, int64_t step) {
  StoredJob j;
  j.status.set_job_id(id);
  j.status.set_state(state);
  j.status.set_step(step);
  j.status.set_reason(state == v1::FAILED ? "rank 1 (w-2): boom" : "");
  j.status.mutable_spec()->set_num_workers(4);
  j.status.mutable_spec()->set_steps(26000);
  j.status.set_final_hash(state == v1::SUCCEEDED ? std::string(32, 'a') : "");
  auto* r = j.status.add_ranks();
  r->set_rank(0);
  r->set_worker_id("w-3");
  j.first_mismatch_step = -1;
  j.last_checked_step = step - 1;
  j.extra = "opaque";
  return j;
}

v1::SyncCheck Check(int64_t step, bool match) {
  v1::SyncCheck c;
  c.set_step(step);
  c.set_all_match(match);
  c.set_majority_hash(std::string(32, match ? 'b' : 'c'));
  c.add_rank_hashes(std::string(32, 'b'));
  c.add_rank_hashes(std::string(32, match ? 'b' : 'd'));
  if (!match) c.add_differing_ranks(1);
  return c;
}

TEST(StateDbTest, EverythingSurvivesReopen) {
  const std::string dir = TempDir();
  {
    auto db = StateDb::Open({dir});
    ASSERT_TRUE(db.ok()) << db.status();
    auto empty = (*db)->Load();
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_EQ(empty->counters.next_job_id, 1u);
    EXPECT_EQ(empty->counters.incarnation, 0u);
    EXPECT_TRUE(empty->counters.data_plane_key.empty());
    EXPECT_TRUE(empty->jobs.empty());
    std::string key(32, '\0');
    for (int i = 0; i < 32; ++i) key[i] = static_cast<char>(0xF0 + i * 7);  // high bits set
    (*db)->PutCounters({/*next_worker_seq=*/5, /*next_job_id=*/3, /*incarnation=*/777, key});
    for (int64_t seq = 1; seq <= 4; ++seq) {
      (*db)->PutWorker({seq, absl::StrCat("w-", seq), absl::StrCat("127.0.0.1:", 7000 + seq),
                        "127.0.0.1:9000", "vm", 100 + seq, /*max_job_memory_bytes=*/seq << 30});
    }
    (*db)->DeleteWorker(2);
    (*db)->PutJob(Job(1, v1::SUCCEEDED, 10));
    (*db)->PutJob(Job(2, v1::RUNNING, 5));
    (*db)->PutJob(Job(2, v1::RUNNING, 7));  // coalesces: the newest wins
    for (int64_t s = 0; s < 10; ++s) (*db)->AddSyncCheck(1, Check(s, s != 4));
    ASSERT_TRUE((*db)->Flush(Soon()).ok());
    const StateDb::Stats st = (*db)->GetStats();
    EXPECT_EQ(st.checks_written, 10);
    EXPECT_EQ(st.dropped_checks, 0);
    EXPECT_EQ(st.last_error, "");
  }
  auto db = StateDb::Open({dir});
  ASSERT_TRUE(db.ok()) << db.status();
  auto loaded = (*db)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->counters.next_worker_seq, 5);
  EXPECT_EQ(loaded->counters.next_job_id, 3u);
  EXPECT_EQ(loaded->counters.incarnation, 777u);
  ASSERT_EQ(loaded->counters.data_plane_key.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(loaded->counters.data_plane_key[i]),
              static_cast<uint8_t>(0xF0 + i * 7));
  }
  ASSERT_EQ(loaded->workers.size(), 3u);
  EXPECT_EQ(loaded->workers[1].id, "w-3");
  EXPECT_EQ(loaded->workers[1].address, "127.0.0.1:7003");
  EXPECT_EQ(loaded->workers[1].pid, 103);
  // The advertised limits (worker_limits): a restored worker is not unlimited.
  EXPECT_EQ(loaded->workers[0].max_job_memory_bytes, int64_t{1} << 30);
  EXPECT_EQ(loaded->workers[1].max_job_memory_bytes, int64_t{3} << 30);
  EXPECT_EQ(loaded->workers[2].max_job_memory_bytes, int64_t{4} << 30);
  ASSERT_EQ(loaded->jobs.size(), 2u);
  EXPECT_EQ(loaded->jobs[0].status.state(), v1::SUCCEEDED);
  EXPECT_EQ(loaded->jobs[0].status.final_hash(), std::string(32, 'a'));
  EXPECT_EQ(loaded->jobs[1].status.step(), 7);
  EXPECT_EQ(loaded->jobs[1].status.ranks(0).worker_id(), "w-3");
  EXPECT_EQ(loaded->jobs[1].last_checked_step, 6);
  EXPECT_EQ(loaded->jobs[1].extra, "opaque");
  auto checks = (*db)->ReadSyncChecks(1, 3, 4);
  ASSERT_TRUE(checks.ok()) << checks.status();
  ASSERT_EQ(checks->size(), 4u);
  EXPECT_EQ((*checks)[0].step(), 3);
  EXPECT_FALSE((*checks)[1].all_match());
  EXPECT_EQ((*checks)[1].differing_ranks(0), 1);
  EXPECT_EQ((*checks)[3].step(), 6);
}

StoredMembership Shrunk() {
  StoredMembership m;
  m.generation = 1;
  m.world = 2;
  m.regrouping = false;
  m.start_step = 20;
  m.source_rank = 0;
  m.waiting_since_unix_s = 1700000123.5;
  m.waiting_for = "worker w-3 (rank 2) lost";
  for (int r = 0; r < 2; ++r) {
    StoredMember x;
    x.worker_id = absl::StrCat("w-", r + 1);
    x.address = absl::StrCat("127.0.0.1:", 7001 + r);
    x.data_address = absl::StrCat("127.0.0.1:", 9001 + r);
    x.hostname = "vm";
    x.held_generation = 1;
    x.held_step = 20 - r;
    m.members.push_back(x);
  }
  v1::MembershipEvent e;
  e.set_kind("shrink");
  e.set_generation(1);
  e.set_world_before(3);
  e.set_world_after(2);
  e.set_worker_id("w-3");
  e.set_rank(2);
  e.set_step(20);
  m.events.push_back(e);
  return m;
}

// Schema v2: the membership tables, curves and final weights; a put without
// them keeps the queued (or stored) ones; weights are deleted on request.
TEST(StateDbTest, MembershipSeriesAndWeightsSurviveReopen) {
  const std::string dir = TempDir();
  {
    auto db = StateDb::Open({dir});
    ASSERT_TRUE(db.ok()) << db.status();
    StoredJob j = Job(1, v1::RUNNING, 25);
    j.membership = Shrunk();
    (*db)->PutJob(j);
    (*db)->PutJob(Job(1, v1::RUNNING, 26));  // coalesced: the membership stays queued
    StoredJob done = Job(2, v1::SUCCEEDED, 9);
    done.series = "curves";
    (*db)->PutJob(done);
    for (uint64_t id : {2, 3}) {
      StoredWeights w;
      w.job_id = id;
      w.total = 3;
      w.block_names = {"W0", "b0"};
      w.block_shapes = {3, -1, 1};
      w.data = std::make_shared<const std::string>(std::string(12, static_cast<char>(id)));
      (*db)->PutWeights(w);
    }
    ASSERT_TRUE((*db)->Flush(Soon()).ok());
    (*db)->DeleteWeights(3);
    (*db)->PutJob(Job(1, v1::RUNNING, 27));  // a later progress row alone
    ASSERT_TRUE((*db)->Flush(Soon()).ok());
    EXPECT_EQ((*db)->GetStats().last_error, "");
  }
  auto db = StateDb::Open({dir});
  ASSERT_TRUE(db.ok()) << db.status();
  auto loaded = (*db)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->jobs.size(), 2u);
  const StoredJob& j = loaded->jobs[0];
  EXPECT_EQ(j.status.step(), 27);
  ASSERT_TRUE(j.membership.has_value());
  EXPECT_EQ(j.membership->generation, 1);
  EXPECT_EQ(j.membership->world, 2);
  EXPECT_EQ(j.membership->start_step, 20);
  EXPECT_EQ(j.membership->waiting_since_unix_s, 1700000123.5);
  EXPECT_EQ(j.membership->waiting_for, "worker w-3 (rank 2) lost");
  ASSERT_EQ(j.membership->members.size(), 2u);
  EXPECT_EQ(j.membership->members[1].worker_id, "w-2");
  EXPECT_EQ(j.membership->members[1].data_address, "127.0.0.1:9002");
  EXPECT_EQ(j.membership->members[1].held_step, 19);
  ASSERT_EQ(j.membership->events.size(), 1u);
  EXPECT_EQ(j.membership->events[0].worker_id(), "w-3");
  EXPECT_FALSE(j.series.has_value());
  EXPECT_FALSE(loaded->jobs[1].membership.has_value());
  EXPECT_EQ(loaded->jobs[1].series.value_or(""), "curves");
  ASSERT_EQ(loaded->weights.size(), 1u);
  EXPECT_EQ(loaded->weights[0].job_id, 2u);
  EXPECT_EQ(loaded->weights[0].total, 3);
  EXPECT_EQ(*loaded->weights[0].data, std::string(12, '\2'));
  EXPECT_EQ(loaded->weights[0].block_names, (std::vector<std::string>{"W0", "b0"}));
  EXPECT_EQ(loaded->weights[0].block_shapes, (std::vector<int64_t>{3, -1, 1}));
}

// A state directory written by the previous version (schema 1: meta,
// workers, jobs, sync_checks) still opens: it is migrated to version 2 in
// place and its jobs load (without a stored membership).
TEST(StateDbTest, Version1DatabaseIsMigrated) {
  const std::string dir = TempDir();
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &raw), SQLITE_OK);
    // The version 1 schema, verbatim.
    const char* v1_schema = R"sql(
      PRAGMA journal_mode=WAL;
      CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
      CREATE TABLE workers(
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL, address TEXT NOT NULL,
        data_address TEXT NOT NULL, hostname TEXT NOT NULL, pid INTEGER NOT NULL);
      CREATE TABLE jobs(
        id INTEGER PRIMARY KEY, state INTEGER NOT NULL, status BLOB NOT NULL,
        first_mismatch_step INTEGER NOT NULL, last_checked_step INTEGER NOT NULL,
        extra BLOB NOT NULL);
      CREATE TABLE sync_checks(
        job_id INTEGER NOT NULL, step INTEGER NOT NULL, all_match INTEGER NOT NULL,
        body BLOB NOT NULL, PRIMARY KEY(job_id, step)) WITHOUT ROWID;
      INSERT INTO meta VALUES('schema_version', 1), ('next_job_id', 2), ('incarnation', 55);
      INSERT INTO workers VALUES(1, 'w-1', '127.0.0.1:7001', '', 'vm', 11);
    )sql";
    ASSERT_EQ(sqlite3_exec(raw, v1_schema, nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(raw);
    const std::string status = Job(1, v1::SUCCEEDED, 10).status.SerializeAsString();
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "INSERT INTO jobs VALUES(1, 3, ?, -1, 9, '')", -1, &st,
                                 nullptr),
              SQLITE_OK);
    sqlite3_bind_blob(st, 1, status.data(), static_cast<int>(status.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  {
    auto db = StateDb::Open({dir});
    ASSERT_TRUE(db.ok()) << db.status();
    auto loaded = (*db)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->counters.incarnation, 55u);
    ASSERT_EQ(loaded->workers.size(), 1u);
    ASSERT_EQ(loaded->jobs.size(), 1u);
    EXPECT_EQ(loaded->jobs[0].status.final_hash(), std::string(32, 'a'));
    EXPECT_FALSE(loaded->jobs[0].membership.has_value());
    StoredJob j = Job(1, v1::SUCCEEDED, 10);
    j.membership = Shrunk();
    (*db)->PutJob(j);  // the new tables are writable
    ASSERT_TRUE((*db)->Flush(Soon()).ok());
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
                               &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(st, 0), StateDb::kSchemaVersion);
  EXPECT_EQ(StateDb::kSchemaVersion, 2);
  sqlite3_finalize(st);
  sqlite3_close(raw);
  auto db = StateDb::Open({dir});
  ASSERT_TRUE(db.ok()) << db.status();
  auto loaded = (*db)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->jobs[0].membership.has_value());
  EXPECT_EQ(loaded->jobs[0].membership->members.size(), 2u);
}

// A failed commit loses its puts; Flush reports it to a caller whose puts
// (QueuedRange, from QueuedSeq before and after them) it held, not to one
// whose puts came before or after it.
TEST(StateDbTest, FlushReportsOnlyFailedCommitsOfTheCallersPuts) {
  const std::string dir = TempDir();
  std::atomic<bool> failing{true};
  StateDbOptions options{dir};
  options.commit_fault_for_test = [&failing]() {
    return failing.load() ? absl::UnavailableError("disk full (injected)") : absl::OkStatus();
  };
  {
    auto db = StateDb::Open(options);
    ASSERT_TRUE(db.ok()) << db.status();
    const uint64_t before1 = (*db)->QueuedSeq();
    (*db)->PutJob(Job(1, v1::SUCCEEDED, 10));
    const absl::Status f1 = (*db)->Flush(Soon(), {before1});
    EXPECT_TRUE(absl::IsInternal(f1)) << f1;
    EXPECT_EQ(f1.message(), "disk full (injected)");
    failing = false;
    const uint64_t before2 = (*db)->QueuedSeq();
    EXPECT_GT(before2, before1);
    (*db)->PutJob(Job(2, v1::RUNNING, 5));
    // Job 1's failure is before this caller's position: not reported again.
    EXPECT_TRUE((*db)->Flush(Soon(), {before2}).ok());
    // From the start (since = 0) it still is.
    EXPECT_TRUE(absl::IsInternal((*db)->Flush(Soon())));
    EXPECT_EQ((*db)->GetStats().last_error, "disk full (injected)");
    failing = true;
    const uint64_t before3 = (*db)->QueuedSeq();
    (*db)->PutJob(Job(3, v1::RUNNING, 1));
    const uint64_t after3 = (*db)->QueuedSeq();
    EXPECT_TRUE(absl::IsInternal((*db)->Flush(Soon(), {before3, after3})));
    // A commit that fails after the caller's puts is not the caller's.
    failing = false;
    const uint64_t before4 = (*db)->QueuedSeq();
    (*db)->PutJob(Job(4, v1::RUNNING, 1));
    const uint64_t after4 = (*db)->QueuedSeq();
    ASSERT_TRUE((*db)->Flush(Soon(), {before4, after4}).ok());
    failing = true;
    (*db)->PutJob(Job(5, v1::RUNNING, 1));
    EXPECT_TRUE(absl::IsInternal((*db)->Flush(Soon(), {after4})));  // job 5's commit
    EXPECT_TRUE((*db)->Flush(Soon(), {before4, after4}).ok())
        << "job 5's failed commit is after the caller's puts";
    failing = false;
  }
  auto db = StateDb::Open({dir});
  ASSERT_TRUE(db.ok()) << db.status();
  auto loaded = (*db)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->jobs.size(), 2u);  // 1, 3 and 5 were in failed commits
  EXPECT_EQ(loaded->jobs[0].status.job_id(), 2u);
  EXPECT_EQ(loaded->jobs[1].status.job_id(), 4u);
}

TEST(StateDbTest, SecondOpenOfTheSameDirectoryIsRefused) {
  const std::string dir = TempDir();
  auto first = StateDb::Open({dir});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StateDb::Open({dir});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another coordinator"), std::string::npos)
      << second.status();
}

TEST(StateDbTest, OtherSchemaVersionIsRefusedNamingTheFile) {
  const std::string dir = TempDir();
  { ASSERT_TRUE(StateDb::Open({dir}).ok()); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE meta SET value = 99 WHERE key = 'schema_version'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto db = StateDb::Open({dir});
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("coordinator.db: schema version 99"), std::string::npos)
      << db.status();
}

TEST(StateDbTest, QueueIsBoundedAndDropsAreCounted) {
  StateDbOptions o;
  o.dir = TempDir();
  o.flush_interval = absl::Hours(1);  // only Flush or a half-full queue wakes the writer
  o.max_queued_checks = 8;
  o.max_checks_per_job = 20;
  auto db = StateDb::Open(o);
  ASSERT_TRUE(db.ok()) << db.status();
  // The writer may drain at 4 queued; whatever it has not drained when the
  // queue holds 8 is dropped. Add one at a time and flush every 8: nothing
  // dropped until the per-job cap of 20 matching checks.
  for (int64_t s = 0; s < 40; ++s) {
    (*db)->AddSyncCheck(9, Check(s, s != 30));
    if (s % 4 == 3) {
      ASSERT_TRUE((*db)->Flush(Soon()).ok());
    }
  }
  ASSERT_TRUE((*db)->Flush(Soon()).ok());
  const StateDb::Stats st = (*db)->GetStats();
  EXPECT_EQ(st.checks_written, 21);  // 20 matching + the mismatch past the cap
  EXPECT_EQ(st.dropped_checks, 19);
  auto checks = (*db)->ReadSyncChecks(9, 0, 100);
  ASSERT_TRUE(checks.ok());
  ASSERT_EQ(checks->size(), 21u);
  EXPECT_EQ(checks->back().step(), 30);
}

// Runs body on a StateDb opened on dir in a forked child, which exits with
// body's value after closing the database (or dies by body's raise);
// returns the child's waitpid status (-1: fork or wait failed).
int InChild(const std::string& dir, const std::function<int(StateDb&)>& body) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    auto db = StateDb::Open({dir});
    if (!db.ok()) _exit(3);
    const int rc = body(**db);
    db->reset();  // the destructor writes what is queued
    _exit(rc);
  }
  int status = 0;
  return waitpid(child, &status, 0) == child ? status : -1;
}

TEST(StateDbTest, CommittedStateSurvivesSigkill) {
  const std::string dir = TempDir();
  const int status = InChild(dir, [](StateDb& db) {
    db.PutCounters({2, 2, 42});
    db.PutJob(Job(1, v1::RUNNING, 3));
    db.AddSyncCheck(1, Check(0, true));
    if (!db.Flush(Soon()).ok()) return 4;
    raise(SIGKILL);  // no destructor, no close: the lock and WAL as a crash leaves them
    return 5;
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exit " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  auto db = StateDb::Open({dir});
  ASSERT_TRUE(db.ok()) << db.status();
  auto loaded = (*db)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->counters.incarnation, 42u);
  ASSERT_EQ(loaded->jobs.size(), 1u);
  EXPECT_EQ(loaded->jobs[0].status.step(), 3);
  auto checks = (*db)->ReadSyncChecks(1, 0, 10);
  ASSERT_TRUE(checks.ok());
  EXPECT_EQ(checks->size(), 1u);
}

// HoldWrites (the coordinator's --fault_hold_state_from_step): nothing
// queued after it is committed, Flush runs into its deadline, a SIGKILL
// loses it all, and a destructor still writes it.
TEST(StateDbTest, HeldWritesAreLostOnSigkillAndWrittenAtAnOrderlyClose) {
  for (const bool kill : {true, false}) {
    SCOPED_TRACE(kill ? "SIGKILL" : "destructor");
    const std::string dir = TempDir();
    const int status = InChild(dir, [kill](StateDb& db) {
      db.PutJob(Job(1, v1::RUNNING, 3));
      db.AddSyncCheck(1, Check(0, true));
      if (!db.Flush(Soon()).ok()) return 4;
      db.HoldWrites();
      db.PutJob(Job(1, v1::SUCCEEDED, 9));
      for (int64_t s = 1; s < 9; ++s) db.AddSyncCheck(1, Check(s, true));
      if (!absl::IsDeadlineExceeded(db.Flush(absl::Now() + absl::Milliseconds(300)))) return 6;
      auto committed = db.ReadJobStatus(1);
      if (!committed.ok() || !committed->has_value() || (*committed)->step() != 3) return 7;
      if (kill) raise(SIGKILL);
      return 0;
    });
    if (kill) {
      ASSERT_TRUE(WIFSIGNALED(status)) << "child exit " << WEXITSTATUS(status);
    } else {
      ASSERT_TRUE(WIFEXITED(status));
      ASSERT_EQ(WEXITSTATUS(status), 0);
    }
    auto db = StateDb::Open({dir});
    ASSERT_TRUE(db.ok()) << db.status();
    auto loaded = (*db)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_EQ(loaded->jobs.size(), 1u);
    EXPECT_EQ(loaded->jobs[0].status.state(), kill ? v1::RUNNING : v1::SUCCEEDED);
    EXPECT_EQ(loaded->jobs[0].status.step(), kill ? 3 : 9);
    auto checks = (*db)->ReadSyncChecks(1, 0, 100);
    ASSERT_TRUE(checks.ok());
    EXPECT_EQ(checks->size(), kill ? 1u : 9u);
  }
}

}  // namespace
}  // namespace lockstep
