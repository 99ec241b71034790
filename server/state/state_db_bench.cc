// Cost of the coordinator's SQLite state per step report:
//   1. StateDb alone: the caller's enqueue (what the ReportStep path pays,
//      under the coordinator's lock) and the writer thread's commit time
//      per stored check, for N steps of a K-rank job with a job-row update
//      every 50 steps;
//   2. a Coordinator (fake clock, in process) taking N x K ReportStep
//      calls, without and with --state_dir: time per ReportStep.
//   bazel run -c opt //server/state:state_db_bench -- [steps] [K]
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "server/coordinator.h"
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
  if (!f.ok()) return 1;

  // 2. Through the coordinator.
  for (bool with_db : {false, true}) {
    std::string cdir = "/tmp/state_db_bench_XXXXXX";
    if (mkdtemp(cdir.data()) == nullptr) return 1;
    lockstep::FakeClock clock(absl::FromUnixSeconds(1700001000));
    std::unique_ptr<lockstep::StateDb> cdb;
    if (with_db) {
      lockstep::StateDbOptions co;
      co.dir = cdir + "/state";
      cdb = *lockstep::StateDb::Open(co);
    }
    lockstep::CoordinatorOptions copt;
    copt.advertise_address = "coord:1";
    lockstep::Coordinator c(copt, &clock);
    if (cdb != nullptr && !c.AttachStateDb(cdb.get()).ok()) return 1;
    std::vector<std::string> ids;
    for (int r = 0; r < k; ++r) {
      v1::RegisterWorkerRequest req;
      req.set_address(absl::StrCat("10.0.0.", r + 1, ":5000"));
      ids.push_back(c.RegisterWorker(req)->worker_id());
    }
    v1::SubmitJobRequest sub;
    sub.mutable_spec()->set_model("mlp:8");
    sub.mutable_spec()->set_sync_mode(v1::RING);
    sub.mutable_spec()->set_num_workers(k);
    sub.mutable_spec()->set_global_batch(8 * k);
    sub.mutable_spec()->mutable_lr()->set_base_lr(0.1f);
    sub.mutable_spec()->set_steps(steps);
    const uint64_t id = c.SubmitJob(sub)->job_id();
    v1::ReportStepRequest rep;
    rep.set_job_id(id);
    rep.set_weights_hash(std::string(32, 'e'));
    rep.set_examples(8);
    const absl::Time t0 = absl::Now();
    for (int64_t s = 0; s < steps; ++s) {
      clock.Advance(absl::Milliseconds(1));
      for (int r = 0; r < k; ++r) {
        rep.set_worker_id(ids[r]);
        rep.set_rank(r);
        rep.set_step(s);
        if (!c.ReportStep(rep).ok()) return 1;
      }
    }
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    std::printf("coordinator %s: %.3f us per ReportStep (%lld reports, %.2f s)\n",
                with_db ? "with --state_dir" : "in memory   ", secs * 1e6 / (steps * k),
                static_cast<long long>(steps * k), secs);
    if (cdb != nullptr) {
      (void)cdb->Flush(absl::Now() + absl::Minutes(5));
      const auto cs = cdb->GetStats();
      std::printf("  writer: %lld transactions, %lld rows, %.3f s in SQLite, %lld dropped\n",
                  static_cast<long long>(cs.transactions), static_cast<long long>(cs.rows),
                  cs.write_seconds, static_cast<long long>(cs.dropped_checks));
    }
    (void)system(absl::StrCat("rm -rf ", cdir).c_str());
  }
  return 0;
}
