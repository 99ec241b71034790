// Coordinator: workers leaving and the coordinator draining
// (coordinator_drain.cc), watchers (WaitForJobChange throttling), and the
// per-rank timing medians (server/coordinator_test_fixture.h).
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_fixture.h"

namespace lockstep {
namespace testing_coordinator {
namespace {

// ---- leaving and draining (coordinator_drain.cc) ---------------------------

v1::DeregisterWorkerReply Leave(Coordinator* coord, const std::string& worker,
                                const std::string& reason) {
  v1::DeregisterWorkerRequest req;
  req.set_worker_id(worker);
  req.set_reason(reason);
  absl::StatusOr<v1::DeregisterWorkerReply> r = coord->DeregisterWorker(req);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : v1::DeregisterWorkerReply();
}

TEST_F(CoordinatorTest, WorkerShuttingDownReportsItsJobFailedAndIsForgotten) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  // What lockstep-worker sends on SIGTERM: ReportDone(ok=false) naming
  // itself, then DeregisterWorker.
  ASSERT_TRUE(
      Done(job, 1, w[1], false, "", "worker w-2 (10.0.0.2:5000) shutting down (SIGTERM)").ok());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(), "rank 1 (w-2): worker w-2 (10.0.0.2:5000) shutting down (SIGTERM)");
  EXPECT_EQ(Leave(coord_.get(), w[1], "shutting down (SIGTERM)").failed_job_id(), 0u);
  EXPECT_EQ(Job(job).reason(), st.reason());  // unchanged
  const v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).worker_id(), w[0]);
  EXPECT_TRUE(Beat(w[1]).reregister());
  // Leaving twice, or an id never seen, is fine.
  EXPECT_EQ(Leave(coord_.get(), w[1], "again").failed_job_id(), 0u);
  EXPECT_EQ(Leave(coord_.get(), "w-99", "").failed_job_id(), 0u);
  // The survivor stops and goes idle; a K=2 job now waits for a new worker.
  EXPECT_TRUE(Beat(w[0], job).stop_job());
  Beat(w[0]);
  EXPECT_EQ(WorkerState(w[0]), v1::IDLE);
  const uint64_t next = Submit(Spec(2));
  EXPECT_EQ(Job(next).state(), v1::PENDING);
  Register(3);
  EXPECT_EQ(Job(next).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, WorkerLeavingMidJobWithoutReportFailsItNamingTheWorker) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  EXPECT_EQ(Leave(coord_.get(), w[1], "shutting down (SIGTERM)").failed_job_id(), job);
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(), "worker w-2 (rank 1, host host2, 10.0.0.2:5000) left: shutting down (SIGTERM)");

  // No reason given; a long one is cut to 256 bytes.
  Beat(w[0]);
  Register(2);
  Register(3);
  const uint64_t second = Submit(Spec(2));
  ASSERT_EQ(Job(second).state(), v1::RUNNING);
  EXPECT_EQ(Leave(coord_.get(), w[0], "").failed_job_id(), second);
  EXPECT_EQ(Job(second).reason(), "worker w-1 (rank 0, host host1, 10.0.0.1:5000) left: it deregistered");
  const uint64_t third = Submit(Spec(1));
  ASSERT_EQ(Job(third).state(), v1::RUNNING);
  const std::string rank0 = Job(third).ranks(0).worker_id();
  EXPECT_EQ(Leave(coord_.get(), rank0, std::string(1000, 'x')).failed_job_id(), third);
  EXPECT_EQ(rank0, "w-4");
  EXPECT_EQ(Job(third).reason(),
            "worker w-4 (rank 0, host host3, 10.0.0.3:5000) left: " + std::string(256, 'x'));
}

// Under on_worker_lost = "shrink" a worker that leaves mid-job (SIGTERM:
// lockstep-worker deregisters first, without a failed ReportDone) is gone
// from its job as a lost one is, at once: the others regroup without it.
TEST_F(CoordinatorTest, WorkerLeavingMidJobUnderShrinkRegroupsTheOthersAtOnce) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w, "", "shrink");
  EXPECT_EQ(Leave(coord_.get(), w[1], "shutting down (SIGTERM)").failed_job_id(), 0u);
  const v1::JobStatus st = Job(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.world(), 2);
  ASSERT_EQ(st.membership_events_size(), 1);
  const v1::MembershipEvent& ev = st.membership_events(0);
  EXPECT_EQ(ev.kind(), "shrink");
  EXPECT_EQ(ev.worker_id(), "w-2");
  EXPECT_EQ(ev.rank(), 1);
  EXPECT_EQ(ev.world_before(), 3);
  EXPECT_EQ(ev.world_after(), 2);
  EXPECT_EQ(ev.reason(),
            "worker w-2 (rank 1, host host2, 10.0.0.2:5000) left: shutting down (SIGTERM)");
  ASSERT_EQ(st.ranks_size(), 2);
  EXPECT_EQ(st.ranks(0).worker_id(), "w-1");
  EXPECT_EQ(st.ranks(1).worker_id(), "w-3");  // renumbered: rank 2 -> 1
  EXPECT_TRUE(Beat(w[1]).reregister());        // forgotten
  EXPECT_EQ(coord_->ListWorkers().workers_size(), 2);
}

// Under "wait" the leaving worker's rank is left vacant, and the next idle
// worker takes it; under the default ("fail") the job fails (the test
// above this one).
TEST_F(CoordinatorTest, WorkerLeavingMidJobUnderWaitLeavesItsRankToTheNextWorker) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w, "", "wait");
  EXPECT_EQ(Leave(coord_.get(), w[1], "shutting down (SIGTERM)").failed_job_id(), 0u);
  v1::JobStatus st = Job(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  ASSERT_EQ(st.waiting_for_ranks_size(), 1);
  EXPECT_EQ(st.waiting_for_ranks(0), 1);
  EXPECT_THAT(st.reason(), ::testing::HasSubstr("left: shutting down (SIGTERM)"));
  const std::string next = Register(3);
  const v1::HeartbeatReply r = Beat(next);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().rank(), 1);
  st = Job(job);
  EXPECT_EQ(st.waiting_for_ranks_size(), 0);
  EXPECT_EQ(st.ranks(1).worker_id(), next);
}

TEST_F(CoordinatorTest, WorkerLeavingAfterFinishingItsPartLetsTheJobSucceed) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  ASSERT_TRUE(Done(job, 1, w[1], true, Hash(7)).ok());
  EXPECT_EQ(Leave(coord_.get(), w[1], "shutting down (SIGTERM)").failed_job_id(), 0u);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
  ASSERT_TRUE(Done(job, 0, w[0], true, Hash(7)).ok());
  EXPECT_EQ(Job(job).state(), v1::SUCCEEDED);
  EXPECT_EQ(Job(job).final_hash(), Hash(7));
}

TEST_F(CoordinatorTest, DrainFailsRunningAndPendingJobsAndRefusesNewWork) {
  std::vector<std::string> w;
  const uint64_t running = StartJob(2, &w);
  const uint64_t pending = Submit(Spec(2));
  ASSERT_EQ(Job(pending).state(), v1::PENDING);
  EXPECT_FALSE(coord_->draining());
  clock_.Advance(absl::Seconds(1));

  EXPECT_EQ(coord_->BeginDrain("coordinator shut down (SIGTERM)"),
            (std::vector<uint64_t>{running, pending}));
  EXPECT_TRUE(coord_->draining());
  for (uint64_t id : {running, pending}) {
    const v1::JobStatus st = Job(id);
    EXPECT_EQ(st.state(), v1::FAILED) << id;
    EXPECT_EQ(st.reason(), "coordinator shut down (SIGTERM)") << id;
    EXPECT_EQ(st.finished_unix_s(), 1001.0) << id;
  }
  EXPECT_EQ(Job(pending).ranks_size(), 0);
  // Idempotent: nothing more to fail.
  EXPECT_TRUE(coord_->BeginDrain("again").empty());
  EXPECT_EQ(Job(running).reason(), "coordinator shut down (SIGTERM)");

  // No new work.
  absl::StatusOr<v1::SubmitJobReply> sub = SubmitRaw(Spec(1));
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sub.status().message(), "coordinator is shutting down");
  v1::RegisterWorkerRequest reg;
  reg.set_address(Addr(9));
  EXPECT_EQ(coord_->RegisterWorker(reg).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(coord_->ListJobs().jobs_size(), 2);

  // Workers learn it from their next reply and wind down as after a cancel.
  EXPECT_FALSE(coord_->WaitForWorkersIdle(absl::Now()));
  absl::StatusOr<v1::ReportStepReply> r = Step(running, 0, w[0], 0, Hash(1));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stop());
  EXPECT_EQ(r->reason(), "job 1 is FAILED: coordinator shut down (SIGTERM)");
  EXPECT_TRUE(Beat(w[1], running).stop_job());
  ASSERT_TRUE(Done(running, 0, w[0], false, "", "job 1 stopped by the coordinator").ok());
  EXPECT_EQ(Job(running).reason(), "coordinator shut down (SIGTERM)");
  EXPECT_FALSE(Beat(w[0]).has_assignment());
  EXPECT_EQ(WorkerState(w[0]), v1::IDLE);
  EXPECT_FALSE(coord_->WaitForWorkersIdle(absl::Now()));  // w-2 still BUSY
  bool idle = false;
  std::thread waiter([&] { idle = coord_->WaitForWorkersIdle(absl::Now() + absl::Seconds(30)); });
  EXPECT_FALSE(Beat(w[1]).has_assignment());
  waiter.join();
  EXPECT_TRUE(idle);
  EXPECT_EQ(WorkerState(w[1]), v1::IDLE);
}

TEST_F(CoordinatorTest, DrainDoesNotWaitForLostWorkers) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  coord_->BeginDrain("coordinator shut down (SIGTERM)");
  Beat(w[0], job);
  Beat(w[0]);
  clock_.Advance(absl::Seconds(4));
  Beat(w[0]);
  EXPECT_FALSE(coord_->WaitForWorkersIdle(absl::Now()));
  coord_->Tick();  // w-2 never answered: LOST, no longer waited for
  EXPECT_EQ(WorkerState(w[1]), v1::LOST);
  EXPECT_TRUE(coord_->WaitForWorkersIdle(absl::Now()));
}



// Polls NextJobEvents without blocking, as the WatchJob stream would after
// each report, and keeps what it would have sent.
class Watcher {
 public:
  Watcher(Coordinator* c, uint64_t job) : c_(c), job_(job) {}
  // The number of events this poll would send.
  int Poll() {
    absl::StatusOr<Coordinator::JobEvents> e =
        c_->NextJobEvents(job_, seen_, last_sent_, absl::InfinitePast());
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || e->events.empty()) return 0;
    seen_ = e->version;
    last_sent_ = e->sent;
    for (const v1::JobStatus& s : e->events) got_.push_back(s);
    return static_cast<int>(e->events.size());
  }
  const std::vector<v1::JobStatus>& got() const { return got_; }
  uint64_t seen() const { return seen_; }
  absl::Time last_sent() const { return last_sent_; }

 private:
  Coordinator* c_;
  uint64_t job_;
  uint64_t seen_ = 0;
  absl::Time last_sent_ = absl::InfinitePast();
  std::vector<v1::JobStatus> got_;
};

TEST_F(CoordinatorTest, WatchersGetProgressAtMostEveryIntervalAndEveryStateChangeAtOnce) {
  const uint64_t job = Submit(Spec(1));  // PENDING: no worker yet
  Watcher watcher(coord_.get(), job);
  EXPECT_EQ(watcher.Poll(), 1);  // the current snapshot at once
  EXPECT_EQ(watcher.Poll(), 0);  // nothing changed
  const std::string w = Register(1);
  ASSERT_TRUE(Beat(w).has_assignment());  // RUNNING
  Beat(w, job);
  EXPECT_EQ(watcher.Poll(), 1);  // a state change: at once, though no time passed
  // 2000 reports, one per millisecond of Clock time, each followed by a
  // poll: progress reaches the watcher every 200 ms (10 events), not 2000
  // times.
  for (int64_t step = 0; step < 2000; ++step) {
    clock_.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(Step(job, 0, w, step, Hash(7)).ok());
    EXPECT_EQ(watcher.Poll(), (step + 1) % 200 == 0 ? 1 : 0) << "step " << step;
  }
  // The end: at once, although the last event went out 0 ms ago.
  ASSERT_TRUE(Done(job, 0, w, true, Hash(7)).ok());
  EXPECT_EQ(watcher.Poll(), 1);
  EXPECT_EQ(watcher.Poll(), 0);

  const std::vector<v1::JobStatus>& got = watcher.got();
  ASSERT_EQ(got.size(), 13u);  // PENDING, RUNNING, 10 x progress, SUCCEEDED
  EXPECT_EQ(got[0].state(), v1::PENDING);
  EXPECT_EQ(got[1].state(), v1::RUNNING);
  EXPECT_EQ(got[1].step(), 0);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(got[2 + i].state(), v1::RUNNING);
    EXPECT_EQ(got[2 + i].step(), 200 * (i + 1));
  }
  EXPECT_EQ(got[12].state(), v1::SUCCEEDED);
  EXPECT_EQ(got[12].step(), 2000);
  EXPECT_EQ(got[12].final_hash(), Hash(7));
}

TEST_F(CoordinatorTest, StateChangesBetweenTwoPollsAllReachTheWatcherInOrder) {
  const uint64_t job = Submit(Spec(1));
  Watcher watcher(coord_.get(), job);
  ASSERT_EQ(watcher.Poll(), 1);  // PENDING
  const std::string w = Register(1);
  ASSERT_TRUE(Beat(w).has_assignment());  // RUNNING
  Beat(w, job);
  ASSERT_TRUE(Step(job, 0, w, 0, Hash(1)).ok());
  ASSERT_TRUE(coord_->CancelJob(job).ok());  // CANCELLED before the next poll
  EXPECT_EQ(watcher.Poll(), 2);
  ASSERT_EQ(watcher.got().size(), 3u);
  EXPECT_EQ(watcher.got()[1].state(), v1::RUNNING);
  EXPECT_EQ(watcher.got()[2].state(), v1::CANCELLED);  // the final event is the last
  EXPECT_EQ(watcher.got()[2].step(), 1);
  // Later changes (none reach a watcher of an ended job anyway) send nothing
  // after the terminal event.
  EXPECT_EQ(watcher.Poll(), 0);
}

TEST_F(CoordinatorTest, ABlockedWatcherSleepsThroughThrottledProgressAndWakesOnTheEnd) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(1, &w);
  Watcher watcher(coord_.get(), job);
  ASSERT_EQ(watcher.Poll(), 1);  // RUNNING, at Clock time T
  absl::StatusOr<Coordinator::JobEvents> woke;
  std::thread waiter([&] {
    woke = coord_->NextJobEvents(job, watcher.seen(), watcher.last_sent(),
                                 absl::Now() + absl::Seconds(30));
  });
  // The Clock stays at T: reports are progress inside the interval and do
  // not end the wait.
  for (int64_t step = 0; step < 50; ++step) ASSERT_TRUE(Step(job, 0, w[0], step, Hash(1)).ok());
  ASSERT_TRUE(coord_->CancelJob(job).ok());
  waiter.join();
  ASSERT_TRUE(woke.ok()) << woke.status();
  ASSERT_EQ(woke->events.size(), 1u);
  EXPECT_EQ(woke->events[0].state(), v1::CANCELLED);
  EXPECT_EQ(woke->events[0].step(), 50);
}

TEST_F(CoordinatorTest, RanksShowTheMediansOfTheirLast64ReportsAndResidentMemory) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  auto report = [&](int rank, int64_t step, double seconds, int64_t resident) {
    v1::ReportStepRequest req;
    req.set_worker_id(w[rank]);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(Hash(1));
    req.set_step_seconds(seconds);
    req.set_compute_seconds(seconds / 2);
    req.set_communication_seconds(seconds / 4);
    req.set_exposed_seconds(seconds / 8);
    req.set_peer_wait_seconds(seconds / 16);
    req.set_resident_bytes(resident);
    ASSERT_TRUE(coord_->ReportStep(req).ok());
  };
  // Before any report: zeros.
  EXPECT_EQ(Job(job).ranks(0).median_step_seconds(), 0);
  // Rank 0: 0.5, 0.1, 0.3, 0.2, 0.4 -> median 0.3. Rank 1: four reports,
  // 1, 2, 3, 4 -> (2 + 3) / 2.
  const double r0[] = {0.5, 0.1, 0.3, 0.2, 0.4};
  for (int i = 0; i < 5; ++i) report(0, i, r0[i], i == 4 ? 0 : 1000 + i);  // 0: not reported
  for (int i = 0; i < 4; ++i) report(1, i, i + 1, 2000);
  v1::JobStatus s = Job(job);
  EXPECT_DOUBLE_EQ(s.ranks(0).median_step_seconds(), 0.3);
  EXPECT_DOUBLE_EQ(s.ranks(0).median_compute_seconds(), 0.15);
  EXPECT_DOUBLE_EQ(s.ranks(0).median_communication_seconds(), 0.075);
  EXPECT_DOUBLE_EQ(s.ranks(0).median_exposed_seconds(), 0.0375);
  EXPECT_DOUBLE_EQ(s.ranks(0).median_peer_wait_seconds(), 0.01875);
  EXPECT_EQ(s.ranks(0).resident_bytes(), 1003);  // the last nonzero
  EXPECT_DOUBLE_EQ(s.ranks(1).median_step_seconds(), 2.5);
  EXPECT_EQ(s.ranks(1).resident_bytes(), 2000);
  // Rank 1, 70 more reports of 5..74 s: the window holds the last 64
  // (11..74), median (42 + 43) / 2. A duplicate report changes nothing.
  for (int i = 0; i < 70; ++i) report(1, 4 + i, 5 + i, 3000);
  report(1, 10, 1000, 4000);  // step 10 again: ignored
  s = Job(job);
  EXPECT_DOUBLE_EQ(s.ranks(1).median_step_seconds(), 42.5);
  EXPECT_EQ(s.ranks(1).resident_bytes(), 3000);
}

}  // namespace
}  // namespace testing_coordinator
}  // namespace lockstep
