// The fixture of the coordinator state tests (coordinator_state*_test.cc):
// coordinators that share a --state_dir (one per "incarnation", a restart
// being the next one on the same database), on one fake clock, with
// helpers that act as workers would. Test-only; one fixture per test.
#ifndef LOCKSTEP_SERVER_COORDINATOR_STATE_TEST_FIXTURE_H_
#define LOCKSTEP_SERVER_COORDINATOR_STATE_TEST_FIXTURE_H_

#include <stdlib.h>

#include <chrono>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/net/data_auth.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/coordinator_state.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_service.h"
#include "server/membership.h"
#include "server/state/state_db.h"


namespace lockstep {
namespace testing_coordinator_state {

inline std::string Hash(int64_t i) { return absl::StrFormat("%032x", i); }

inline v1::JobSpec Spec(int k, int64_t steps) {
  v1::JobSpec spec;
  spec.set_model("mlp:8");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(k);
  spec.set_global_batch(8 * k);
  spec.mutable_lr()->set_base_lr(0.1f);
  spec.set_steps(steps);
  return spec;
}

// A copy of the state directory `dir` (one restart of several from the
// same database), at dir + "_" + name.
inline std::string CopyOf(const std::string& dir, const std::string& name) {
  const std::string copy = absl::StrCat(dir, "_", name);
  EXPECT_EQ(system(absl::StrCat("cp -r ", dir, " ", copy).c_str()), 0);
  return copy;
}

inline std::string TempDir() {
  std::string tmpl = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                  "/coord_state_XXXXXX");
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl + "/state";
}

// One coordinator process's worth of objects.
struct Incarnation {
  std::unique_ptr<StateDb> db;
  std::unique_ptr<Coordinator> coord;
};

class CoordinatorStateTest : public ::testing::Test {
 protected:
  CoordinatorStateTest() : clock_(absl::FromUnixSeconds(1700000000 + 1000)) {}

  // flush_interval: the database's (StateDbOptions); only Flush and a
  // half-full queue commit before it.
  Incarnation Start(const std::string& dir, std::vector<std::string> ps_addresses = {},
                    absl::Duration flush_interval = absl::Milliseconds(25)) {
    Incarnation inc;
    if (!dir.empty()) {
      StateDbOptions db_options;
      db_options.dir = dir;
      db_options.flush_interval = flush_interval;
      auto db = StateDb::Open(db_options);
      EXPECT_TRUE(db.ok()) << db.status();
      inc.db = *std::move(db);
    }
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    o.ps_addresses = std::move(ps_addresses);
    o.forget_ps_group = [this](uint64_t group) { forgotten_.push_back(group); };
    inc.coord = std::make_unique<Coordinator>(o, &clock_);
    if (inc.db != nullptr) {
      absl::Status s = inc.coord->AttachStateDb(inc.db.get());
      EXPECT_TRUE(s.ok()) << s;
    }
    return inc;
  }

  static std::string Register(Coordinator* c, int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(absl::StrCat("host", i));
    auto r = c->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }
  static uint64_t Submit(Coordinator* c, const v1::JobSpec& spec) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto r = c->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }
  static v1::HeartbeatReply Beat(Coordinator* c, const std::string& w, uint64_t job = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    auto r = c->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }
  static void Step(Coordinator* c, uint64_t job, int rank, const std::string& w, int64_t step,
                   int64_t generation = 0) {
    v1::ReportStepRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(Hash(step));
    req.set_loss(1.0);
    req.set_examples(8);
    req.set_generation(generation);
    auto r = c->ReportStep(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->stop()) << r->reason();
  }
  static void Done(Coordinator* c, uint64_t job, int rank, const std::string& w,
                   const std::string& hash, int64_t generation = 0) {
    v1::ReportDoneRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_ok(true);
    req.set_weights_hash(hash);
    req.set_steps(100);
    req.set_generation(generation);
    ASSERT_TRUE(c->ReportDone(req).ok());
  }
  // A StepReports probe (StepReports.probe) of `rank` on `w`, job 1, with
  // `reports` reports of `step` (a probe names its rank in exactly 1; the
  // step, the worker's oldest kept report's, does not matter to the
  // answer) of `generation`.
  static absl::StatusOr<v1::ReportStepReply> Probe(Coordinator* c, int rank,
                                                   const std::string& w, int reports = 1,
                                                   int64_t step = 3, int64_t generation = 0) {
    v1::StepReports req;
    req.set_probe(true);
    for (int i = 0; i < reports; ++i) {
      v1::ReportStepRequest* r = req.add_reports();
      r->set_worker_id(w);
      r->set_job_id(1);
      r->set_rank(rank);
      r->set_step(step);
      r->set_weights_hash(Hash(step));
      r->set_loss(1.0);
      r->set_examples(8);
      r->set_generation(generation);
    }
    return c->ReportSteps(req);
  }
  // A rank holding its replica at `held` for `generation` (a regroup).
  static v1::HeartbeatReply Hold(Coordinator* c, const std::string& w, uint64_t job,
                                 int64_t generation, int64_t held) {
    v1::HeartbeatRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_generation(generation);
    req.set_holds_state(true);
    req.set_held_step(held);
    auto r = c->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }
  // Registers w-1..w-k, submits `spec` as job 1, starts it on them and
  // reports steps [0, steps) from every rank. With acknowledge false the
  // workers never heartbeat: the job is RUNNING on them, unacknowledged.
  void StartAndStep(Coordinator* c, const v1::JobSpec& spec, int64_t steps,
                    bool acknowledge = true) {
    const int k = spec.num_workers();
    for (int i = 1; i <= k; ++i) Register(c, i);
    ASSERT_EQ(Submit(c, spec), 1u);
    for (int i = 1; acknowledge && i <= k; ++i) {
      const std::string w = absl::StrCat("w-", i);
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment());
      group_key_ = r.assignment().group_key();
      Beat(c, w, 1);
    }
    for (int64_t s = 0; s < steps; ++s) {
      for (int i = 1; i <= k; ++i) Step(c, 1, i - 1, absl::StrCat("w-", i), s);
    }
  }
  // A K=2 job of `total` steps that ran 10 with every check committed,
  // then `after` (more reports, answered but not committed) on the same
  // coordinator: returns a copy of the database as a SIGKILL there would
  // have left it (the checks of steps 0-9).
  std::string KilledAfterTenCommittedSteps(int64_t total,
                                           const std::function<void(Coordinator*)>& after) {
    const std::string dir = TempDir();
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, Spec(2, total), 10);
    EXPECT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
    std::string killed = CopyOf(dir, "killed");
    after(c);
    return killed;
  }
  // Uploads 6 floats as job 1's final weights from w-1 (rank 0).
  static void UploadWeights(Coordinator* c) {
    std::string data;
    for (int i = 0; i < 6; ++i) {
      const float f = 0.25f * i;
      data.append(reinterpret_cast<const char*>(&f), 4);
    }
    v1::WeightsChunk chunk;
    chunk.set_job_id(1);
    chunk.set_worker_id("w-1");
    chunk.set_offset(0);
    chunk.set_total(6);
    chunk.set_data(data);
    chunk.add_block_names("W0");
    chunk.add_block_shapes(2);
    chunk.add_block_shapes(3);
    ASSERT_TRUE(c->UploadWeightsChunk(chunk).ok());
    ASSERT_TRUE(c->FinishWeightsUpload("w-1", 1).ok());
  }

  // Job `job`'s newest checks (GetSyncHistory) are one per step 0..n-1.
  static void ExpectChecksOfSteps(Coordinator* c, uint64_t job, int64_t n) {
    absl::StatusOr<v1::SyncHistory> h = c->GetSyncHistory(job, 0);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(h->checks_size(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h->checks(static_cast<int>(i)).step(), i);
  }
  // Job 1 (K = 2 on w-1, w-2) has run `steps` steps: both ranks report done
  // with the same hash; it must end SUCCEEDED with every step checked once
  // and matching.
  static void FinishK2AndExpectEveryStepChecked(Coordinator* c, int64_t steps) {
    Done(c, 1, 0, "w-1", Hash(steps - 1));
    Done(c, 1, 1, "w-2", Hash(steps - 1));
    v1::JobStatus done = *c->GetJob(1);
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
    EXPECT_EQ(done.checked_steps(), steps);
    EXPECT_EQ(done.mismatched_steps(), 0);
    ExpectChecksOfSteps(c, 1, steps);
  }
  // The steps of job `job`'s checks, read in pages of `page` from step 0
  // (GetSyncHistoryPage; the database's when there is one).
  static std::vector<int64_t> PagedCheckSteps(Coordinator* c, uint64_t job, int page) {
    std::vector<int64_t> steps;
    for (int64_t from = 0; from >= 0;) {
      absl::StatusOr<v1::SyncHistory> h = c->GetSyncHistoryPage(job, from, page);
      EXPECT_TRUE(h.ok()) << h.status();
      if (!h.ok()) break;
      EXPECT_LE(h->checks_size(), page);
      for (const v1::SyncCheck& check : h->checks()) steps.push_back(check.step());
      from = h->next_step();
    }
    return steps;
  }

  FakeClock clock_;
  uint64_t group_key_ = 0;  // StartAndStep's job's
  std::vector<uint64_t> forgotten_;  // CoordinatorOptions::forget_ps_group's calls
};


}  // namespace testing_coordinator_state
}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATOR_STATE_TEST_FIXTURE_H_
