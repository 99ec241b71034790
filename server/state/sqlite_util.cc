#include "server/state/sqlite_util.h"

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace statedb {

absl::Status SqlError(sqlite3* db, const std::string& path, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat(path, ": ", what, ": ", db == nullptr ? "out of memory" : sqlite3_errmsg(db)));
}

absl::Status Exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status s = absl::InternalError(
        absl::StrCat(path, ": ", sql, ": ", err == nullptr ? "error" : err));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<sqlite3*> OpenConnection(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqlError(db, path, "cannot open");
    sqlite3_close_v2(db);
    return s;
  }
  sqlite3_busy_timeout(db, 5000);  // a reader and the writer share the file
  absl::Status s = Exec(db, path, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (!s.ok()) {
    sqlite3_close_v2(db);
    return s;
  }
  return db;
}

}  // namespace statedb
}  // namespace lockstep
