// The coordinator's bounded sync history and finished-job bound
// (coordinator_history.cc), on a fake clock with fake reports:
//   * paging (GetSyncHistoryPage) across the memory/database boundary
//     returns every check exactly once, in step order, with a mismatch and
//     its repair notes, when the window holds only the newest 50 checks;
//   * without a database the steps older than the window come back
//     summarised (runs + the kept events, summarised_to_step, summary) and
//     the next page continues at the window;
//   * finished jobs beyond max_finished_jobs_in_memory are evicted: NOT_FOUND
//     naming the eviction without a database; with one ListJobs lists them
//     and GetJob, the checks, GetJobSeries, the watch (one final event) and
//     CancelJob answer from it; their final weights are served while the
//     weights store keeps them (and deleted from the database when it
//     drops them); a running job is never evicted.
#include <stdlib.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/state/state_db.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::string Hash(int64_t i) { return absl::StrFormat("%032x", i); }

std::string TempDir() {
  std::string tmpl = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                  "/coord_history_XXXXXX");
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl + "/state";
}

constexpr int64_t kWindow = 50;
constexpr int64_t kSteps = 300;
constexpr int64_t kBadStep = 20;  // rank 1 differs at this step only

class CoordinatorHistoryTest : public ::testing::Test {
 protected:
  CoordinatorHistoryTest() : clock_(absl::FromUnixSeconds(1700000000 + 1000)) {}

  void Start(bool with_db, int64_t max_finished = 1000, int max_weights = 8,
             int64_t listed_per_page = 1000) {
    if (with_db) {
      auto db = StateDb::Open({TempDir()});
      ASSERT_TRUE(db.ok()) << db.status();
      db_ = *std::move(db);
    }
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    o.max_sync_history = kWindow;
    o.max_finished_jobs_in_memory = max_finished;
    o.max_jobs_with_weights = max_weights;
    o.max_listed_evicted_jobs = listed_per_page;
    coord_ = std::make_unique<Coordinator>(o, &clock_);
    if (db_ != nullptr) {
      ASSERT_TRUE(coord_->AttachStateDb(db_.get()).ok());
    }
    for (int i = 1; i <= 3; ++i) {
      v1::RegisterWorkerRequest req;
      req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
      req.set_hostname(absl::StrCat("host", i));
      auto r = coord_->RegisterWorker(req);
      ASSERT_TRUE(r.ok()) << r.status();
      workers_.push_back(r->worker_id());
    }
  }

  // Submits a K=3 job, binds it, reports `steps` steps (rank 1 differs at
  // kBadStep when `bad`), and when `finish` reports done and lets the
  // workers go idle.
  uint64_t RunJob(int64_t steps, bool bad, bool finish) {
    v1::SubmitJobRequest sub;
    v1::JobSpec* spec = sub.mutable_spec();
    spec->set_model("mlp:8");
    spec->set_sync_mode(v1::RING);
    spec->set_num_workers(3);
    spec->set_global_batch(24);
    spec->mutable_lr()->set_base_lr(0.1f);
    spec->set_steps(steps);
    auto submitted = coord_->SubmitJob(sub);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    const uint64_t job = submitted->job_id();
    for (int r = 0; r < 3; ++r) Beat(r, 0);
    for (int r = 0; r < 3; ++r) Beat(r, job);  // acknowledged
    for (int64_t s = 0; s < steps; ++s) {
      for (int r = 0; r < 3; ++r) {
        v1::ReportStepRequest req;
        req.set_worker_id(workers_[r]);
        req.set_job_id(job);
        req.set_rank(r);
        req.set_step(s);
        req.set_weights_hash(bad && r == 1 && s == kBadStep ? Hash(s + 100000) : Hash(s));
        req.set_loss(1.0);
        req.set_examples(8);
        auto rep = coord_->ReportStep(req);
        EXPECT_TRUE(rep.ok()) << rep.status();
      }
      clock_.Advance(absl::Milliseconds(1));
    }
    if (finish) {
      for (int r = 0; r < 3; ++r) {
        v1::ReportDoneRequest done;
        done.set_worker_id(workers_[r]);
        done.set_job_id(job);
        done.set_rank(r);
        done.set_ok(true);
        done.set_weights_hash(Hash(steps - 1));
        done.set_steps(steps);
        EXPECT_TRUE(coord_->ReportDone(done).ok());
      }
      for (int r = 0; r < 3; ++r) Beat(r, 0);  // idle again
    }
    return job;
  }

  void Beat(int r, uint64_t job) {
    v1::HeartbeatRequest req;
    req.set_worker_id(workers_[r]);
    req.set_job_id(job);
    auto b = coord_->Heartbeat(req);
    EXPECT_TRUE(b.ok()) << b.status();
  }

  // Rank 0 uploads `job`'s final weights: {first, first + 1, first + 2}.
  void Upload(uint64_t job, float first) {
    const float values[3] = {first, first + 1, first + 2};
    v1::WeightsChunk c;
    c.set_worker_id(workers_[0]);
    c.set_job_id(job);
    c.set_total(3);
    c.set_data(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
    c.add_block_names("W0");
    c.add_block_shapes(3);
    c.add_block_shapes(-1);
    ASSERT_TRUE(coord_->UploadWeightsChunk(c).ok());
    ASSERT_TRUE(coord_->FinishWeightsUpload(workers_[0], job).ok());
  }

  // The jobs whose weights the database holds (committed).
  std::vector<uint64_t> StoredWeightJobs() {
    EXPECT_TRUE(db_->Flush(absl::Now() + absl::Seconds(30)).ok());
    auto loaded = db_->Load();
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    std::vector<uint64_t> ids;
    if (loaded.ok()) {
      for (const StoredWeights& w : loaded->weights) ids.push_back(w.job_id);
    }
    return ids;
  }

  // Every page from step 0, `per_page` checks each.
  std::vector<v1::SyncHistory> Pages(uint64_t job, int64_t per_page) {
    std::vector<v1::SyncHistory> pages;
    for (int64_t next = 0; next >= 0 && pages.size() < 1000;) {
      auto page = coord_->GetSyncHistoryPage(job, next, per_page);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      EXPECT_LE(page->checks_size(), per_page);
      pages.push_back(*page);
      next = page->next_step();
    }
    return pages;
  }

  FakeClock clock_;
  std::unique_ptr<StateDb> db_;
  std::unique_ptr<Coordinator> coord_;
  std::vector<std::string> workers_;
};

TEST_F(CoordinatorHistoryTest, PagesCrossFromTheDatabaseIntoMemoryWithEveryCheckOnce) {
  Start(/*with_db=*/true);
  const uint64_t job = RunJob(kSteps, /*bad=*/true, /*finish=*/false);
  ASSERT_TRUE(db_->Flush(absl::Now() + absl::Seconds(30)).ok());
  std::vector<int64_t> steps;
  std::string notes;
  for (const v1::SyncHistory& page : Pages(job, 64)) {
    EXPECT_EQ(page.checked_steps(), kSteps);
    EXPECT_EQ(page.mismatched_steps(), 1);
    EXPECT_EQ(page.first_mismatch_step(), kBadStep);
    EXPECT_EQ(page.summarised_to_step(), 0);  // the database has the detail
    EXPECT_EQ(page.runs_size(), 0);
    for (const v1::SyncCheck& c : page.checks()) {
      steps.push_back(c.step());
      EXPECT_EQ(c.all_match(), c.step() != kBadStep) << c.step();
      EXPECT_EQ(c.rank_hashes_size(), 3);
      if (!c.note().empty()) notes += absl::StrCat(c.step(), ": ", c.note(), "\n");
    }
  }
  ASSERT_EQ(static_cast<int64_t>(steps.size()), kSteps);
  for (int64_t s = 0; s < kSteps; ++s) EXPECT_EQ(steps[s], s);
  // The divergence and its repair, older than the window, came from the
  // database with their notes.
  EXPECT_NE(notes.find("20: divergence: rank 1 differs"), std::string::npos) << notes;
  EXPECT_NE(notes.find("26: repaired: rank 1 copied rank 0's state at step 26"),
            std::string::npos)
      << notes;
  // Memory holds the window, not the job: 50 checks + 2 events, 2 runs.
  auto h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checks_size(), kSteps);  // all from the database + window
  EXPECT_EQ(h->checks(0).step(), 0);
}

TEST_F(CoordinatorHistoryTest, WithoutADatabaseOlderStepsAreSummarised) {
  Start(/*with_db=*/false);
  const uint64_t job = RunJob(kSteps, /*bad=*/true, /*finish=*/false);
  std::vector<v1::SyncHistory> pages = Pages(job, 20);
  ASSERT_GE(pages.size(), 2u);
  const v1::SyncHistory& first = pages[0];
  // Window: steps 250..299. Older: runs 0-19 and 21-249 (the repaired
  // step 26 splits the second, being an event), events 20 and 26.
  EXPECT_EQ(first.summarised_to_step(), kSteps - kWindow);
  EXPECT_NE(first.summary().find("steps 0-249: per-step checks are not kept"), std::string::npos)
      << first.summary();
  EXPECT_NE(first.summary().find("no --state_dir database"), std::string::npos);
  int64_t matching = 0;
  for (const v1::SyncRun& r : first.runs()) matching += r.checks();
  EXPECT_EQ(matching, kSteps - kWindow - 2);
  ASSERT_EQ(first.runs_size(), 3);
  EXPECT_EQ(first.runs(0).first_step(), 0);
  EXPECT_EQ(first.runs(0).last_step(), 19);
  EXPECT_EQ(first.runs(1).first_step(), 21);
  EXPECT_EQ(first.runs(1).last_step(), 25);
  EXPECT_EQ(first.runs(2).first_step(), 27);
  EXPECT_EQ(first.runs(2).last_step(), 249);
  ASSERT_GE(first.checks_size(), 2);
  EXPECT_EQ(first.checks(0).step(), kBadStep);
  EXPECT_FALSE(first.checks(0).all_match());
  EXPECT_EQ(first.checks(1).step(), 26);
  // Then the window, 20 per page, every step once.
  std::vector<int64_t> steps;
  for (size_t i = 0; i < pages.size(); ++i) {
    for (const v1::SyncCheck& c : pages[i].checks()) {
      if (c.step() >= kSteps - kWindow) steps.push_back(c.step());
    }
    if (i > 0) {
      EXPECT_EQ(pages[i].summarised_to_step(), 0);
    }
  }
  ASSERT_EQ(static_cast<int64_t>(steps.size()), kWindow);
  for (int64_t i = 0; i < kWindow; ++i) EXPECT_EQ(steps[i], kSteps - kWindow + i);
  // A page that starts inside the window has no summary.
  auto inside = coord_->GetSyncHistoryPage(job, 280, 0);
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(inside->summarised_to_step(), 0);
  ASSERT_EQ(inside->checks_size(), 20);
  EXPECT_EQ(inside->checks(0).step(), 280);
  EXPECT_EQ(inside->next_step(), -1);
  // The unpaged answer: runs, the two events, the window.
  auto h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->runs_size(), 3);
  EXPECT_EQ(h->checks_size(), kWindow + 2);
  EXPECT_EQ(h->checked_steps(), kSteps);
}

TEST_F(CoordinatorHistoryTest, FinishedJobsBeyondTheBoundAreEvictedWithoutADatabase) {
  Start(/*with_db=*/false, /*max_finished=*/2);
  std::vector<uint64_t> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(RunJob(10, false, /*finish=*/true));
  const uint64_t running = RunJob(5, false, /*finish=*/false);
  coord_->Tick();
  for (int i = 0; i < 2; ++i) {
    auto st = coord_->GetJob(jobs[i]);
    ASSERT_EQ(st.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(st.status().message().find("was evicted from memory"), std::string::npos)
        << st.status();
    EXPECT_EQ(coord_->GetSyncHistoryPage(jobs[i], 0, 0).status().code(),
              absl::StatusCode::kNotFound);
  }
  for (int i = 2; i < 4; ++i) {
    auto st = coord_->GetJob(jobs[i]);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->state(), v1::SUCCEEDED);
  }
  ASSERT_TRUE(coord_->GetJob(running).ok());
  EXPECT_EQ(coord_->GetJob(99).status().message(), "job 99 not found");
  v1::JobList list = coord_->ListJobs();
  EXPECT_EQ(list.jobs_size(), 3);
  EXPECT_EQ(list.evicted_jobs(), 2);
  EXPECT_EQ(list.max_finished_jobs_in_memory(), 2);
  EXPECT_FALSE(list.state_db_has_evicted());
}

// More evicted jobs than one page lists: the first page has the jobs in
// memory and the newest evicted ones, evicted_next_before names where the
// next starts, and the pages together list every job once.
TEST_F(CoordinatorHistoryTest, EvictedJobsComeInPages) {
  Start(/*with_db=*/true, /*max_finished=*/1, /*max_weights=*/8, /*listed_per_page=*/2);
  std::vector<uint64_t> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(RunJob(3, /*bad=*/false, /*finish=*/true));
  coord_->Tick();
  ASSERT_TRUE(db_->Flush(absl::Now() + absl::Seconds(30)).ok());
  v1::JobList first = coord_->ListJobs(/*with_evicted=*/true);
  EXPECT_EQ(first.evicted_jobs(), 4);
  ASSERT_EQ(first.jobs_size(), 3);  // jobs 3 and 4 from the database, 5 in memory
  EXPECT_EQ(first.jobs(0).job_id(), jobs[2]);
  EXPECT_EQ(first.jobs(2).job_id(), jobs[4]);
  EXPECT_EQ(first.evicted_listed(), 2);
  EXPECT_EQ(first.evicted_next_before(), jobs[2]);
  v1::JobList second = coord_->ListJobs(true, first.evicted_next_before());
  ASSERT_EQ(second.jobs_size(), 2);  // evicted only: 1 and 2
  EXPECT_EQ(second.jobs(0).job_id(), jobs[0]);
  EXPECT_EQ(second.jobs(1).job_id(), jobs[1]);
  EXPECT_EQ(second.jobs(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(second.evicted_next_before(), 0u);  // nothing older
  // Below the oldest: an empty page.
  v1::JobList none = coord_->ListJobs(true, jobs[0]);
  EXPECT_EQ(none.jobs_size(), 0);
  EXPECT_EQ(none.evicted_next_before(), 0u);
}

TEST_F(CoordinatorHistoryTest, EvictedJobsAnswerFromTheDatabase) {
  Start(/*with_db=*/true, /*max_finished=*/1);
  const uint64_t old = RunJob(120, /*bad=*/false, /*finish=*/true);
  Upload(old, 1.5f);
  auto series_before = coord_->GetJobSeries(old);
  ASSERT_TRUE(series_before.ok()) << series_before.status();
  const uint64_t newer = RunJob(10, false, /*finish=*/true);
  coord_->Tick();
  ASSERT_TRUE(db_->Flush(absl::Now() + absl::Seconds(30)).ok());
  // Listed from the database, in id order, with its weights (the RPC's
  // list; the metrics' and status page's stay in memory).
  EXPECT_EQ(coord_->ListJobs().jobs_size(), 1);
  v1::JobList list = coord_->ListJobs(/*with_evicted=*/true);
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(0).job_id(), old);
  EXPECT_EQ(list.jobs(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(list.jobs(0).step(), 120);
  EXPECT_TRUE(list.jobs(0).has_weights());
  EXPECT_EQ(list.jobs(1).job_id(), newer);
  EXPECT_EQ(list.evicted_jobs(), 1);
  EXPECT_EQ(list.evicted_listed(), 1);
  EXPECT_TRUE(list.state_db_has_evicted());
  auto st = coord_->GetJob(old);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), v1::SUCCEEDED);
  EXPECT_EQ(st->step(), 120);
  EXPECT_EQ(st->checked_steps(), 120);
  std::vector<int64_t> steps;
  for (const v1::SyncHistory& page : Pages(old, 50)) {
    EXPECT_EQ(page.checked_steps(), 120);
    for (const v1::SyncCheck& c : page.checks()) steps.push_back(c.step());
  }
  ASSERT_EQ(steps.size(), 120u);
  for (int64_t s = 0; s < 120; ++s) EXPECT_EQ(steps[s], s);
  auto last = coord_->GetSyncHistory(old, 10);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_EQ(last->checks_size(), 10);
  EXPECT_EQ(last->checks(9).step(), 119);
  // Its curves: the stored ones, as they were in memory.
  auto series = coord_->GetJobSeries(old);
  ASSERT_TRUE(series.ok()) << series.status();
  ASSERT_EQ(series->loss.size(), series_before->loss.size());
  ASSERT_FALSE(series->loss.empty());
  for (size_t i = 0; i < series->loss.size(); ++i) {
    EXPECT_EQ(series->loss[i].step, series_before->loss[i].step);
    EXPECT_EQ(series->loss[i].loss, series_before->loss[i].loss);
  }
  EXPECT_EQ(series->steps_offered, series_before->steps_offered);
  EXPECT_EQ(series->sync.size(), series_before->sync.size());
  // A watch: one event, its final state (the watch ends with it).
  auto events = coord_->NextJobEvents(old, 0, absl::InfinitePast(), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->events.size(), 1u);
  EXPECT_EQ(events->events[0].state(), v1::SUCCEEDED);
  EXPECT_EQ(events->events[0].step(), 120);
  EXPECT_GT(events->version, 0u);
  // Its weights, still in the store.
  auto weights = coord_->GetWeights(old);
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ((*weights)->total, 3);
  float first = 0;
  std::memcpy(&first, (*weights)->data.data(), sizeof(first));
  EXPECT_EQ(first, 1.5f);
  // Cancelling it changes nothing: its stored status, as for any finished job.
  auto cancelled = coord_->CancelJob(old);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::SUCCEEDED);
  EXPECT_EQ(coord_->GetJob(99).status().message(), "job 99 not found");
}

// An evicted job's weights stay in the weights store (bounded as any
// job's) and the database; when the store drops them for a newer job's,
// the stored copy goes too (a review finding before: they were deleted at
// the eviction, so GetWeights of an evicted job had nothing to serve).
TEST_F(CoordinatorHistoryTest, EvictedJobsWeightsLeaveTheDatabaseWithTheStore) {
  Start(/*with_db=*/true, /*max_finished=*/1, /*max_weights=*/2);
  const uint64_t a = RunJob(5, false, /*finish=*/true);
  Upload(a, 1);
  const uint64_t b = RunJob(5, false, /*finish=*/true);
  Upload(b, 2);
  coord_->Tick();  // a is evicted from memory
  ASSERT_EQ(coord_->ListJobs().evicted_jobs(), 1);
  EXPECT_EQ(StoredWeightJobs(), (std::vector<uint64_t>{a, b}));
  EXPECT_TRUE(coord_->GetWeights(a).ok());
  const uint64_t c = RunJob(5, false, /*finish=*/true);
  Upload(c, 3);  // the store keeps 2: a's weights go, from the database too
  EXPECT_EQ(StoredWeightJobs(), (std::vector<uint64_t>{b, c}));
  auto gone = coord_->GetWeights(a);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition) << gone.status();
}

}  // namespace
}  // namespace lockstep
