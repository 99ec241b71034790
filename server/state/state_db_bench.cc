// Cost of the coordinator's SQLite state per step report: the caller's
// enqueue (what the ReportStep path pays, under its own lock) and the
// writer thread's commit time per stored check, for N steps of a K-rank
// job with a job-row update every `progress_every` steps.
//   bazel run -c opt //server/state:state_db_bench -- [steps] [K]
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/state/state_db.h"

int main(int argc, char** argv) {
  namespace v1 = lockstep::v1;
  const int64_t steps = argc > 1 ? atoll(argv[1]) : 26000;
  const int k = argc > 2 ? atoi(argv[2]) : 4;
  std::string dir = "/tmp/state_db_bench_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return 1;
  lockstep::StateDbOptions o;
  o.dir = dir;
  auto db = lockstep::StateDb::Open(o);
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", db.status().ToString().c_str());
    return 1;
  }
  lockstep::StoredJob job;
  job.status.set_job_id(1);
  job.status.set_state(v1::RUNNING);
  for (int r = 0; r < k; ++r) job.status.add_ranks()->set_rank(r);
  v1::SyncCheck c;
  c.set_all_match(true);
  c.set_majority_hash(std::string(32, 'e'));
  for (int r = 0; r < k; ++r) c.add_rank_hashes(std::string(32, 'e'));
  absl::Duration enqueue;
  const absl::Time start = absl::Now();
  for (int64_t s = 0; s < steps; ++s) {
    c.set_step(s);
    const absl::Time t0 = absl::Now();
    (*db)->AddSyncCheck(1, c);
    if (s % 50 == 0) {
      job.status.set_step(s + 1);
      (*db)->PutJob(job);
    }
    enqueue += absl::Now() - t0;
  }
  const absl::Status f = (*db)->Flush(absl::Now() + absl::Minutes(5));
  const double total = absl::ToDoubleSeconds(absl::Now() - start);
  const auto st = (*db)->GetStats();
  std::printf(
      "steps %lld K %d: enqueue %.3f us/step (caller), writer %.3f us/check in %lld "
      "transactions (%.3f s), %lld dropped, wall %.2f s, flush %s\n",
      static_cast<long long>(steps), k, absl::ToDoubleMicroseconds(enqueue) / steps,
      st.write_seconds * 1e6 / std::max<int64_t>(1, st.checks_written),
      static_cast<long long>(st.transactions), st.write_seconds,
      static_cast<long long>(st.dropped_checks), total, f.ToString().c_str());
  db->reset();
  (void)system(absl::StrCat("rm -rf ", dir).c_str());
  return f.ok() ? 0 : 1;
}
