// StatusPage: the coordinator's HTTP status page, as a pure handler of
// HttpRequest -> HttpResponse over a Coordinator (no sockets here; main
// registers Paths() on the daemon's HttpServer).
//
// Routes (GET/HEAD; the server answers other methods):
//   /                    the page (server/status_page/index.html)
//   /static/app.js       its script, /static/style.css its style sheet; all
//                        three are embedded in the binary at build time
//                        (server/status_page/embed.sh), so the page renders
//                        with no network beyond this server.
//   /api/workers         lockstep.v1.WorkerList as JSON
//   /api/jobs            {"total_jobs": N, "jobs": [JobStatus...]}: the most
//                        recent options.max_jobs jobs, ascending id
//   /api/job?id=N        lockstep.v1.JobStatus
//   /api/sync?id=N&max=M {"history": SyncHistory with the last M checks
//                        (default 100, capped at options.max_sync_entries),
//                        "strip": {"checks_per_cell", "checks", "first_step",
//                        "last_step", "mismatches"}}: the whole job's checks
//                        as at most 1024 cells (server/job_series.h)
//   /api/curve?id=N      {"job_id", "loss": {"stride", "steps_offered",
//                        "step", "loss", "examples_per_second", "seconds",
//                        "window_examples_per_second"}, "eval": {"stride",
//                        "evals_offered", "step", "test_accuracy",
//                        "test_loss"}}: columnar arrays, ascending step
// JSON uses the proto3 JSON mapping with the .proto field names
// (snake_case), every field printed (int64 values are JSON strings, as
// protobuf prints them); the hand-built parts print int64 as numbers and a
// non-finite double as null.
// Errors: 400 naming the query parameter and what was expected
// (`id: expected a job id (a positive integer), got "abc"`), 404 for an
// unknown job or path, both with a JSON body {"error": "..."} under /api/.
// Every response carries Cache-Control: no-store.
//
// Thread-safety: Handle may be called concurrently; it copies what it
// needs out of the Coordinator (its methods lock briefly) and serializes
// without holding any lock.
#ifndef LOCKSTEP_SERVER_STATUS_PAGE_H_
#define LOCKSTEP_SERVER_STATUS_PAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/http/http.h"
#include "server/coordinator.h"

namespace lockstep {

struct StatusPageOptions {
  // /api/jobs lists at most this many (the most recent) jobs.
  int max_jobs = 200;
  // /api/sync returns at most this many checks (max=M is capped to it).
  int64_t max_sync_entries = 1000;
  // /api/sync without max=.
  int64_t default_sync_entries = 100;
};

class StatusPage {
 public:
  // `coordinator` is not owned and must outlive the StatusPage.
  explicit StatusPage(Coordinator* coordinator, StatusPageOptions options = {});

  // Every path Handle serves (register each one on the HttpServer).
  static std::vector<std::string> Paths();

  HttpResponse Handle(const HttpRequest& request) const;

 private:
  HttpResponse Asset(const std::string& name) const;
  HttpResponse Workers() const;
  HttpResponse Jobs() const;
  HttpResponse Job(const HttpRequest& request) const;
  HttpResponse Sync(const HttpRequest& request) const;
  HttpResponse Curve(const HttpRequest& request) const;

  Coordinator* const coordinator_;
  const StatusPageOptions options_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STATUS_PAGE_H_
