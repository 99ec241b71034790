#include "server/state/state_db.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/state/sqlite_util.h"

namespace lockstep {

using statedb::DataPlaneKeyName;
using statedb::Exec;
using statedb::kDataPlaneKeyWords;
using statedb::OpenConnection;
using statedb::SqlError;
using statedb::Stmt;

namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS workers(
  seq INTEGER PRIMARY KEY, id TEXT NOT NULL, address TEXT NOT NULL,
  data_address TEXT NOT NULL, hostname TEXT NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS worker_limits(
  seq INTEGER PRIMARY KEY, max_job_memory_bytes INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY, state INTEGER NOT NULL, status BLOB NOT NULL,
  first_mismatch_step INTEGER NOT NULL, last_checked_step INTEGER NOT NULL,
  extra BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sync_checks(
  job_id INTEGER NOT NULL, step INTEGER NOT NULL, all_match INTEGER NOT NULL,
  body BLOB NOT NULL, PRIMARY KEY(job_id, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_membership(
  job_id INTEGER PRIMARY KEY, generation INTEGER NOT NULL, world INTEGER NOT NULL,
  regrouping INTEGER NOT NULL, start_step INTEGER NOT NULL, source_rank INTEGER NOT NULL,
  waiting_since_unix_s REAL NOT NULL, waiting_for TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS job_members(
  job_id INTEGER NOT NULL, rank INTEGER NOT NULL, worker_id TEXT NOT NULL,
  address TEXT NOT NULL, data_address TEXT NOT NULL, hostname TEXT NOT NULL,
  held_generation INTEGER NOT NULL, held_step INTEGER NOT NULL,
  PRIMARY KEY(job_id, rank)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS membership_events(
  job_id INTEGER NOT NULL, seq INTEGER NOT NULL, generation INTEGER NOT NULL,
  kind TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY(job_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_series(job_id INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS job_weights(
  job_id INTEGER PRIMARY KEY, total INTEGER NOT NULL, blocks BLOB NOT NULL,
  data BLOB NOT NULL);
)sql";

// Version 1 had meta, workers, jobs and sync_checks, as above; version 2
// added the membership, series and weights tables (kSchema creates them
// IF NOT EXISTS), so migrating 1 -> 2 only records the new version.
constexpr int kFirstMigratableVersion = 1;

// The checks of `job_id` that `sql` selects (columns step, body; bound
// parameters job_id, a step, a limit), in the order it returns them.
absl::StatusOr<std::vector<v1::SyncCheck>> QueryChecks(sqlite3* db, const std::string& path,
                                                       const char* sql, uint64_t job_id,
                                                       int64_t step, int64_t limit) {
  Stmt s(db, sql);
  if (!s.ok()) return SqlError(db, path, "reading sync checks");
  s.Int(1, static_cast<int64_t>(job_id));
  s.Int(2, step);
  s.Int(3, limit);
  std::vector<v1::SyncCheck> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    v1::SyncCheck c;
    if (!c.ParseFromString(s.ColText(1))) {
      return absl::DataLossError(absl::StrCat(path, ": job ", job_id, " step ", s.ColInt(0),
                                              ": stored sync check does not parse"));
    }
    out.push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return SqlError(db, path, "reading sync checks");
  return out;
}

// The one blob `sql` selects for `id` (its only parameter), nullopt when
// there is no row; `what` names the read in errors.
absl::StatusOr<std::optional<std::string>> ReadOneBlob(sqlite3* db, const std::string& path,
                                                       const char* sql, uint64_t id,
                                                       const char* what) {
  Stmt s(db, sql);
  if (!s.ok()) return SqlError(db, path, what);
  s.Int(1, static_cast<int64_t>(id));
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return SqlError(db, path, what);
  return std::optional<std::string>(s.ColText(0));
}

// A stored JobStatus blob of job `id`.
absl::StatusOr<v1::JobStatus> ParseStatus(const std::string& path, int64_t id,
                                          const std::string& blob) {
  v1::JobStatus status;
  if (!status.ParseFromString(blob)) {
    return absl::DataLossError(
        absl::StrCat(path, ": job ", id, ": stored status does not parse"));
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateDb>> StateDb::Open(StateDbOptions options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("--state_dir: empty directory name");
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("--state_dir ", options.dir, ": cannot create: ", std::strerror(errno)));
  }
  const std::string lock_path = options.dir + "/LOCK";
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--state_dir: cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    close(lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "--state_dir ", options.dir, ": ",
        e == EWOULDBLOCK ? "in use by another coordinator (" + lock_path + " is locked)"
                         : std::string("cannot lock ") + lock_path + ": " + std::strerror(e)));
  }
  const std::string path = options.dir + "/coordinator.db";
  auto writer = OpenConnection(path);
  if (!writer.ok()) {
    close(lock_fd);
    return writer.status();
  }
  auto fail = [&](absl::Status s, sqlite3* reader) {
    sqlite3_close_v2(*writer);
    if (reader != nullptr) sqlite3_close_v2(reader);
    close(lock_fd);
    return s;
  };
  if (absl::Status s = Exec(*writer, path, kSchema); !s.ok()) return fail(s, nullptr);
  {
    Stmt get(*writer, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (!get.ok()) return fail(SqlError(*writer, path, "reading the schema version"), nullptr);
    if (get.Step() == SQLITE_ROW) {
      const int64_t version = get.ColInt(0);
      if (version >= kFirstMigratableVersion && version < kSchemaVersion) {
        Stmt put(*writer, "UPDATE meta SET value = ? WHERE key = 'schema_version'");
        put.Int(1, kSchemaVersion);
        if (!put.ok() || put.Step() != SQLITE_DONE) {
          return fail(SqlError(*writer, path, absl::StrCat("migrating the schema from version ",
                                                           version, " to ", kSchemaVersion)),
                      nullptr);
        }
      } else if (version != kSchemaVersion) {
        return fail(absl::FailedPreconditionError(absl::StrCat(
                        path, ": schema version ", version, ", this coordinator reads version ",
                        kSchemaVersion, " (use another --state_dir or a matching build)")),
                    nullptr);
      }
    } else {
      Stmt put(*writer, "INSERT INTO meta(key, value) VALUES('schema_version', ?)");
      put.Int(1, kSchemaVersion);
      if (!put.ok() || put.Step() != SQLITE_DONE) {
        return fail(SqlError(*writer, path, "writing the schema version"), nullptr);
      }
    }
  }
  auto reader = OpenConnection(path);
  if (!reader.ok()) return fail(reader.status(), nullptr);
  return std::unique_ptr<StateDb>(new StateDb(std::move(options), path, lock_fd, *writer, *reader));
}

StateDb::StateDb(StateDbOptions options, std::string path, int lock_fd, sqlite3* writer,
                 sqlite3* reader)
    : options_(std::move(options)),
      path_(std::move(path)),
      lock_fd_(lock_fd),
      writer_db_(writer),
      reader_db_(reader) {
  writer_ = std::thread([this] { WriterLoop(); });
}

StateDb::~StateDb() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  writer_.join();
  {
    absl::MutexLock l(&read_mu_);
    sqlite3_close_v2(reader_db_);
  }
  sqlite3_close_v2(writer_db_);
  close(lock_fd_);
}

absl::StatusOr<StateDb::Loaded> StateDb::Load() {
  absl::MutexLock l(&read_mu_);
  Loaded out;
  {
    uint64_t key_words[kDataPlaneKeyWords] = {};
    int key_seen = 0;
    Stmt s(reader_db_, "SELECT key, value FROM meta");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading meta");
    while (s.Step() == SQLITE_ROW) {
      const std::string key = s.ColText(0);
      const int64_t v = s.ColInt(1);
      if (key == "next_worker_seq") out.counters.next_worker_seq = v;
      if (key == "next_job_id") out.counters.next_job_id = static_cast<uint64_t>(v);
      if (key == "incarnation") out.counters.incarnation = static_cast<uint64_t>(v);
      for (int i = 0; i < kDataPlaneKeyWords; ++i) {
        if (key == DataPlaneKeyName(i)) {
          key_words[i] = static_cast<uint64_t>(v);
          key_seen |= 1 << i;
        }
      }
    }
    if (key_seen == (1 << kDataPlaneKeyWords) - 1) {
      out.counters.data_plane_key.resize(8 * kDataPlaneKeyWords);
      for (int i = 0; i < kDataPlaneKeyWords; ++i) {
        for (int b = 0; b < 8; ++b) {
          out.counters.data_plane_key[8 * i + b] = static_cast<char>(key_words[i] >> (8 * b));
        }
      }
    }
  }
  {
    Stmt s(reader_db_,
           "SELECT seq, id, address, data_address, hostname, pid FROM workers ORDER BY seq");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading workers");
    while (s.Step() == SQLITE_ROW) {
      StoredWorker w;
      w.seq = s.ColInt(0);
      w.id = s.ColText(1);
      w.address = s.ColText(2);
      w.data_address = s.ColText(3);
      w.hostname = s.ColText(4);
      w.pid = s.ColInt(5);
      out.workers.push_back(std::move(w));
    }
  }
  {
    // Created IF NOT EXISTS by kSchema: an older database reads no limits.
    Stmt s(reader_db_, "SELECT seq, max_job_memory_bytes FROM worker_limits");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading worker limits");
    std::map<int64_t, int64_t> limits;
    while (s.Step() == SQLITE_ROW) limits[s.ColInt(0)] = s.ColInt(1);
    for (StoredWorker& w : out.workers) {
      auto it = limits.find(w.seq);
      if (it != limits.end()) w.max_job_memory_bytes = std::max<int64_t>(0, it->second);
    }
  }
  {
    Stmt s(reader_db_,
           "SELECT id, status, first_mismatch_step, last_checked_step, extra FROM jobs "
           "ORDER BY id");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading jobs");
    while (s.Step() == SQLITE_ROW) {
      StoredJob j;
      absl::StatusOr<v1::JobStatus> status = ParseStatus(path_, s.ColInt(0), s.ColText(1));
      if (!status.ok()) return status.status();
      j.status = std::move(*status);
      j.first_mismatch_step = s.ColInt(2);
      j.last_checked_step = s.ColInt(3);
      j.extra = s.ColText(4);
      out.jobs.push_back(std::move(j));
    }
  }
  std::map<uint64_t, size_t> index;  // job id -> out.jobs position
  for (size_t i = 0; i < out.jobs.size(); ++i) index[out.jobs[i].status.job_id()] = i;
  auto job_of = [&](int64_t id) -> StoredJob* {
    auto it = index.find(static_cast<uint64_t>(id));
    return it == index.end() ? nullptr : &out.jobs[it->second];
  };
  {
    Stmt s(reader_db_,
           "SELECT job_id, generation, world, regrouping, start_step, source_rank, "
           "waiting_since_unix_s, waiting_for FROM job_membership ORDER BY job_id");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading job memberships");
    while (s.Step() == SQLITE_ROW) {
      StoredJob* j = job_of(s.ColInt(0));
      if (j == nullptr) continue;
      StoredMembership m;
      m.generation = s.ColInt(1);
      m.world = static_cast<int32_t>(s.ColInt(2));
      m.regrouping = s.ColInt(3) != 0;
      m.start_step = s.ColInt(4);
      m.source_rank = static_cast<int32_t>(s.ColInt(5));
      m.waiting_since_unix_s = sqlite3_column_double(s.get(), 6);
      m.waiting_for = s.ColText(7);
      j->membership = std::move(m);
    }
  }
  {
    Stmt s(reader_db_,
           "SELECT job_id, rank, worker_id, address, data_address, hostname, held_generation, "
           "held_step FROM job_members ORDER BY job_id, rank");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading job members");
    while (s.Step() == SQLITE_ROW) {
      StoredJob* j = job_of(s.ColInt(0));
      if (j == nullptr || !j->membership) continue;
      const int64_t rank = s.ColInt(1);
      if (rank != static_cast<int64_t>(j->membership->members.size())) {
        return absl::DataLossError(absl::StrCat(path_, ": job ", s.ColInt(0), ": member rank ",
                                                rank, " stored where rank ",
                                                j->membership->members.size(),
                                                " was expected"));
      }
      StoredMember m;
      m.worker_id = s.ColText(2);
      m.address = s.ColText(3);
      m.data_address = s.ColText(4);
      m.hostname = s.ColText(5);
      m.held_generation = s.ColInt(6);
      m.held_step = s.ColInt(7);
      j->membership->members.push_back(std::move(m));
    }
  }
  {
    Stmt s(reader_db_, "SELECT job_id, seq, body FROM membership_events ORDER BY job_id, seq");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading membership events");
    while (s.Step() == SQLITE_ROW) {
      StoredJob* j = job_of(s.ColInt(0));
      if (j == nullptr || !j->membership) continue;
      v1::MembershipEvent e;
      if (!e.ParseFromString(s.ColText(2))) {
        return absl::DataLossError(absl::StrCat(path_, ": job ", s.ColInt(0),
                                                ": stored membership event ", s.ColInt(1),
                                                " does not parse"));
      }
      j->membership->events.push_back(std::move(e));
    }
  }
  {
    Stmt s(reader_db_, "SELECT job_id, body FROM job_series ORDER BY job_id");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading job series");
    while (s.Step() == SQLITE_ROW) {
      if (StoredJob* j = job_of(s.ColInt(0)); j != nullptr) j->series = s.ColText(1);
    }
  }
  {
    Stmt s(reader_db_, "SELECT job_id, total, blocks, data FROM job_weights ORDER BY job_id");
    if (!s.ok()) return SqlError(reader_db_, path_, "reading job weights");
    while (s.Step() == SQLITE_ROW) {
      StoredWeights w;
      w.job_id = static_cast<uint64_t>(s.ColInt(0));
      w.total = s.ColInt(1);
      v1::WeightsChunk blocks;
      auto data = std::make_shared<std::string>(s.ColText(3));
      if (!blocks.ParseFromString(s.ColText(2)) || w.total < 1 ||
          data->size() != static_cast<size_t>(w.total) * 4) {
        return absl::DataLossError(absl::StrCat(path_, ": job ", w.job_id,
                                                ": stored weights are damaged (", data->size(),
                                                " bytes for ", w.total, " floats)"));
      }
      w.block_names.assign(blocks.block_names().begin(), blocks.block_names().end());
      w.block_shapes.assign(blocks.block_shapes().begin(), blocks.block_shapes().end());
      w.data = std::move(data);
      out.weights.push_back(std::move(w));
    }
  }
  {
    Stmt s(reader_db_,
           "SELECT job_id, COUNT(*), SUM(all_match = 0), "
           "IFNULL(MIN(CASE WHEN all_match = 0 THEN step END), -1), MAX(step) "
           "FROM sync_checks GROUP BY job_id");
    if (!s.ok()) return SqlError(reader_db_, path_, "counting sync checks");
    absl::MutexLock q(&mu_);
    while (s.Step() == SQLITE_ROW) {
      const uint64_t id = static_cast<uint64_t>(s.ColInt(0));
      checks_per_job_[id] = s.ColInt(1);
      for (StoredJob& j : out.jobs) {
        if (j.status.job_id() != id) continue;
        j.stored_checks = s.ColInt(1);
        j.stored_mismatches = s.ColInt(2);
        j.stored_first_mismatch = s.ColInt(3);
        j.stored_last_step = s.ColInt(4);
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<v1::SyncCheck>> StateDb::ReadSyncChecks(uint64_t job_id,
                                                                  int64_t from_step,
                                                                  int64_t limit) {
  absl::MutexLock l(&read_mu_);
  return QueryChecks(reader_db_, path_,
                     "SELECT step, body FROM sync_checks WHERE job_id = ? AND step >= ? "
                     "ORDER BY step LIMIT ?",
                     job_id, from_step, limit);
}

absl::StatusOr<std::vector<v1::SyncCheck>> StateDb::ReadLastSyncChecks(uint64_t job_id,
                                                                      int64_t before_step,
                                                                      int64_t limit) {
  absl::MutexLock l(&read_mu_);
  absl::StatusOr<std::vector<v1::SyncCheck>> out =
      QueryChecks(reader_db_, path_,
                  "SELECT step, body FROM sync_checks WHERE job_id = ? AND step < ? "
                  "ORDER BY step DESC LIMIT ?",
                  job_id, before_step, limit);
  if (out.ok()) std::reverse(out->begin(), out->end());
  return out;
}

void StateDb::PutCounters(const StoredCounters& counters) {
  absl::MutexLock l(&mu_);
  queued_.counters = counters;
  ++enqueued_seq_;
}

void StateDb::PutWorker(StoredWorker worker) {
  absl::MutexLock l(&mu_);
  const int64_t seq = worker.seq;
  queued_.workers[seq] = std::move(worker);
  ++enqueued_seq_;
}

void StateDb::DeleteWorker(int64_t seq) {
  absl::MutexLock l(&mu_);
  queued_.workers[seq] = std::nullopt;
  ++enqueued_seq_;
}

void StateDb::PutJob(StoredJob job) {
  absl::MutexLock l(&mu_);
  const uint64_t id = job.status.job_id();
  auto it = queued_.jobs.find(id);
  if (it != queued_.jobs.end()) {  // coalesce: keep what the newer put leaves out
    if (!job.membership) job.membership = std::move(it->second.membership);
    if (!job.series) job.series = std::move(it->second.series);
  }
  queued_.jobs[id] = std::move(job);
  ++enqueued_seq_;
}

void StateDb::PutWeights(StoredWeights weights) {
  absl::MutexLock l(&mu_);
  const uint64_t id = weights.job_id;
  queued_.weights[id] = std::move(weights);
  ++enqueued_seq_;
}

void StateDb::DeleteWeights(uint64_t job_id) {
  absl::MutexLock l(&mu_);
  queued_.weights[job_id] = std::nullopt;
  ++enqueued_seq_;
}

absl::StatusOr<std::optional<v1::JobStatus>> StateDb::ReadJobStatus(uint64_t job_id) {
  absl::MutexLock l(&read_mu_);
  absl::StatusOr<std::optional<std::string>> blob = ReadOneBlob(
      reader_db_, path_, "SELECT status FROM jobs WHERE id = ?", job_id, "reading a job");
  if (!blob.ok()) return blob.status();
  if (!blob->has_value()) return std::optional<v1::JobStatus>();
  absl::StatusOr<v1::JobStatus> status =
      ParseStatus(path_, static_cast<int64_t>(job_id), **blob);
  if (!status.ok()) return status.status();
  return std::optional<v1::JobStatus>(std::move(*status));
}

absl::StatusOr<std::vector<v1::JobStatus>> StateDb::ReadJobStatuses(
    uint64_t before_id, const std::function<bool(uint64_t)>& want, int64_t limit,
    size_t max_bytes, bool* more) {
  absl::MutexLock l(&read_mu_);
  std::vector<v1::JobStatus> out;
  if (more != nullptr) *more = false;
  if (limit <= 0) return out;
  Stmt s(reader_db_, "SELECT id, status FROM jobs WHERE id < ? ORDER BY id DESC");
  if (!s.ok()) return SqlError(reader_db_, path_, "reading jobs");
  s.Int(1, static_cast<int64_t>(std::min<uint64_t>(before_id, INT64_MAX)));
  size_t bytes = 0;
  int rc;
  bool left_out = false;
  while ((rc = s.Step()) == SQLITE_ROW) {
    const int64_t id = s.ColInt(0);
    if (!want(static_cast<uint64_t>(id))) continue;
    if (static_cast<int64_t>(out.size()) >= limit) {
      left_out = true;
      break;
    }
    const std::string blob = s.ColText(1);
    if (!out.empty() && bytes + blob.size() > max_bytes) {
      left_out = true;
      break;
    }
    absl::StatusOr<v1::JobStatus> status = ParseStatus(path_, id, blob);
    if (!status.ok()) return status.status();
    bytes += blob.size();
    out.push_back(std::move(*status));
  }
  if (more != nullptr) *more = left_out;
  std::reverse(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::optional<std::string>> StateDb::ReadJobSeries(uint64_t job_id) {
  absl::MutexLock l(&read_mu_);
  return ReadOneBlob(reader_db_, path_, "SELECT body FROM job_series WHERE job_id = ?", job_id,
                     "reading a job's series");
}

void StateDb::AddSyncCheck(uint64_t job_id, const v1::SyncCheck& check) {
  absl::MutexLock l(&mu_);
  int64_t& stored = checks_per_job_[job_id];
  if (static_cast<int64_t>(queued_.checks.size()) >= options_.max_queued_checks ||
      (stored >= options_.max_checks_per_job && check.all_match())) {
    ++stats_.dropped_checks;
    return;
  }
  ++stored;
  queued_.checks.emplace_back(job_id, check);
  ++enqueued_seq_;
  stats_.queued_checks = static_cast<int64_t>(queued_.checks.size());
}

uint64_t StateDb::QueuedSeq() const {
  absl::MutexLock l(&mu_);
  return enqueued_seq_;
}

absl::Status StateDb::Flush(absl::Time deadline) { return Flush(deadline, QueuedRange()); }

absl::Status StateDb::Flush(absl::Time deadline, QueuedRange puts) {
  absl::MutexLock l(&mu_);
  const uint64_t target = std::min(enqueued_seq_, puts.until);
  flush_requested_ = true;
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return committed_seq_ >= target; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(path_, ": writes not committed by the deadline"));
  }
  // Newest first: a failed commit that held any put in (since, target].
  for (auto it = failed_commits_.rbegin(); it != failed_commits_.rend(); ++it) {
    if (it->to_seq > puts.since && it->from_seq < target) {
      return absl::InternalError(it->error);
    }
  }
  return absl::OkStatus();
}

bool StateDb::HoldWrites() {
  absl::MutexLock l(&mu_);
  const bool first = !held_;
  held_ = true;
  return first;
}

StateDb::Stats StateDb::GetStats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace lockstep
