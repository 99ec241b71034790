// SQLite helpers shared by the state database's files (state_db.cc: open,
// load, reads; state_db_write.cc: the writer thread's transactions).
// Internal to server/state. Every function takes the connection and the
// database's path (for error messages); none keeps either.
#ifndef LOCKSTEP_SERVER_STATE_SQLITE_UTIL_H_
#define LOCKSTEP_SERVER_STATE_SQLITE_UTIL_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace statedb {

// StoredCounters::data_plane_key in the meta table: 4 words.
constexpr int kDataPlaneKeyWords = 4;
inline std::string DataPlaneKeyName(int i) { return "data_plane_key_" + std::to_string(i); }

// A prepared statement, finalized on scope exit. Connections close with
// sqlite3_close_v2, so one closed while a statement is alive (an error path)
// is freed once the statement is finalized.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() const { return stmt_; }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Text(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void Blob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  int Step() { return sqlite3_step(stmt_); }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  int64_t ColInt(int i) const { return sqlite3_column_int64(stmt_, i); }
  std::string ColText(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    const int n = sqlite3_column_bytes(stmt_, i);
    return p == nullptr ? std::string() : std::string(static_cast<const char*>(p), n);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

// InternalError naming `path`, `what` and SQLite's message for `db`.
absl::Status SqlError(sqlite3* db, const std::string& path, absl::string_view what);
// Runs `sql` (one or more statements) on `db`; InternalError naming `path`.
absl::Status Exec(sqlite3* db, const std::string& path, const char* sql);
// A read-write connection to `path` (created if missing) in WAL mode with a
// 5 s busy timeout; the caller closes it with sqlite3_close_v2.
absl::StatusOr<sqlite3*> OpenConnection(const std::string& path);

}  // namespace statedb
}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STATE_SQLITE_UTIL_H_
