// The coordinator's state database: a restart (a second Coordinator on the
// same --state_dir) keeps workers, jobs, the id counters, the incarnation,
// the sync history, data-plane secrets, worker tokens and limits, a left
// worker, a shrunk job's group and a waiting job's vacant rank, and its
// running job continues to SUCCEEDED (coordinator_state_test_fixture.h).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "server/coordinator_state_test_fixture.h"

namespace lockstep {
namespace testing_coordinator_state {
namespace {

TEST_F(CoordinatorStateTest, RestartKeepsJobsWorkersCountersAndHistoryAndTheJobContinues) {
  const std::string dir = TempDir();
  uint64_t group_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    ASSERT_EQ(Register(c, 1), "w-1");
    ASSERT_EQ(Register(c, 2), "w-2");
    const uint64_t job = Submit(c, Spec(2, 100));
    ASSERT_EQ(job, 1u);
    for (const char* w : {"w-1", "w-2"}) {
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment());
      group_key = r.assignment().group_key();
      Beat(c, w, job);
    }
    for (int64_t s = 0; s < 50; ++s) {
      Step(c, job, 0, "w-1", s);
      Step(c, job, 1, "w-2", s);
      clock_.Advance(absl::Milliseconds(10));
    }
    EXPECT_EQ(Submit(c, Spec(2, 10)), 2u);  // PENDING: no idle worker
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }  // the coordinator is gone; the database stays

  clock_.Advance(absl::Seconds(5));
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobList jobs = c->ListJobs();
  ASSERT_EQ(jobs.jobs_size(), 2);
  const v1::JobStatus& j1 = jobs.jobs(0);
  EXPECT_EQ(j1.state(), v1::RUNNING);
  EXPECT_EQ(j1.step(), 50);
  EXPECT_EQ(j1.checked_steps(), 50);
  ASSERT_EQ(j1.ranks_size(), 2);
  EXPECT_EQ(j1.ranks(1).worker_id(), "w-2");
  EXPECT_EQ(jobs.jobs(1).state(), v1::PENDING);
  v1::WorkerList workers = c->ListWorkers();
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(0).state(), v1::BUSY);
  EXPECT_EQ(workers.workers(0).job_id(), 1u);

  // The workers carry on: their heartbeats acknowledge the job (no
  // reregister, no stop) and their reports are accepted; a report of a
  // step checked before the restart is a duplicate.
  for (const char* w : {"w-1", "w-2"}) {
    v1::HeartbeatReply r = Beat(c, w, 1);
    EXPECT_FALSE(r.reregister());
    EXPECT_FALSE(r.stop_job());
  }
  Step(c, 1, 0, "w-1", 49);
  for (int64_t s = 50; s < 100; ++s) {
    Step(c, 1, 0, "w-1", s);
    Step(c, 1, 1, "w-2", s);
  }
  Done(c, 1, 0, "w-1", Hash(99));
  Done(c, 1, 1, "w-2", Hash(99));
  v1::JobStatus done = *c->GetJob(1);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_EQ(done.final_hash(), Hash(99));
  EXPECT_EQ(done.checked_steps(), 100);
  EXPECT_EQ(done.mismatched_steps(), 0);

  // The newest 100 checks: 50 from the database, 50 from memory.
  ExpectChecksOfSteps(c, 1, 100);
  // Pages of 30 from step 0.
  std::vector<int64_t> want(100);
  for (int i = 0; i < 100; ++i) want[i] = i;
  EXPECT_EQ(PagedCheckSteps(c, 1, 30), want);

  // Ids continue; the incarnation (group keys) is the stored one.
  EXPECT_EQ(Register(c, 3), "w-3");
  EXPECT_EQ(Submit(c, Spec(1, 10)), 3u);
  for (const char* w : {"w-1", "w-2"}) Beat(c, w);  // the job ended: IDLE, job 2 starts
  v1::HeartbeatReply r = Beat(c, "w-1");
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), 2u);
  EXPECT_EQ(r.assignment().group_key() >> 20, group_key >> 20);
}

// Checks answered but not yet committed when the coordinator died (the
// writer commits every 25 ms) come back from the reports the workers send
// again on their new report streams (worker/report_replay.h): the reports
// the database has are dropped as duplicates, the rest are checked, steps
// only one rank had reported included. No check is lost or counted twice.
TEST_F(CoordinatorStateTest, ResentReportsRestoreTheChecksTheDatabaseHadNotCommitted) {
  const std::string killed = KilledAfterTenCommittedSteps(30, [](Coordinator* c) {
    // Answered after that: checks of steps 10-13, and steps 14-15 of rank 0 only.
    for (int64_t s = 10; s < 14; ++s) {
      Step(c, 1, 0, "w-1", s);
      Step(c, 1, 1, "w-2", s);
    }
    Step(c, 1, 0, "w-1", 14);
    Step(c, 1, 0, "w-1", 15);
    EXPECT_EQ(c->GetJob(1)->checked_steps(), 14);
  });
  Incarnation second = Start(killed);
  Coordinator* c = second.coord.get();
  EXPECT_EQ(c->GetJob(1)->checked_steps(), 10) << "what the database had";
  // Each worker's new stream resends its kept reports, then goes on.
  for (int64_t s = 0; s < 16; ++s) Step(c, 1, 0, "w-1", s);
  for (int64_t s = 0; s < 14; ++s) Step(c, 1, 1, "w-2", s);
  EXPECT_EQ(c->GetJob(1)->checked_steps(), 14);
  for (int64_t s = 14; s < 30; ++s) {
    if (s >= 16) Step(c, 1, 0, "w-1", s);
    Step(c, 1, 1, "w-2", s);
  }
  FinishK2AndExpectEveryStepChecked(c, 30);
  ASSERT_TRUE(second.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  // And in the database, once each.
  std::vector<int64_t> want(30);
  for (int i = 0; i < 30; ++i) want[i] = i;
  EXPECT_EQ(PagedCheckSteps(c, 1, 7), want);
}

// A worker's new report stream first asks where each rank should resume
// (StepReports.probe): on a live coordinator after every answered report,
// on a restarted one where the database left off, so only what was lost is
// sent again. The probe records nothing.
TEST_F(CoordinatorStateTest, AProbeSaysWhereARankResumesAndRecordsNothing) {
  const std::string killed = KilledAfterTenCommittedSteps(30, [](Coordinator* c) {
    for (int64_t s = 10; s < 14; ++s) {
      Step(c, 1, 0, "w-1", s);
      Step(c, 1, 1, "w-2", s);
    }
    Step(c, 1, 0, "w-1", 14);
    auto p0 = Probe(c, 0, "w-1");
    ASSERT_TRUE(p0.ok()) << p0.status();
    EXPECT_TRUE(p0->probe_answered());
    EXPECT_EQ(p0->resend_from_step(), 15) << "a live coordinator has every answered report";
    // A probe naming rank 1's step 14, which as a report would complete
    // step 14 (rank 0 reported it): not recorded.
    auto p1 = Probe(c, 1, "w-2", 1, 14);
    ASSERT_TRUE(p1.ok()) << p1.status();
    EXPECT_TRUE(p1->probe_answered());
    EXPECT_EQ(p1->resend_from_step(), 14);
    EXPECT_EQ(c->GetJob(1)->checked_steps(), 14) << "the probe's report was recorded";
    auto again = Probe(c, 1, "w-2", 1, 14);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->resend_from_step(), 14);
    auto two = Probe(c, 0, "w-1", 2);
    ASSERT_TRUE(absl::IsInvalidArgument(two.status())) << two.status();
    EXPECT_TRUE(absl::StrContains(two.status().message(), "reports:")) << two.status();
    auto stranger = Probe(c, 1, "w-1");
    EXPECT_TRUE(absl::IsFailedPrecondition(stranger.status())) << stranger.status();
  });
  Incarnation second = Start(killed);
  Coordinator* c = second.coord.get();
  for (int rank = 0; rank < 2; ++rank) {
    auto p = Probe(c, rank, rank == 0 ? "w-1" : "w-2");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->probe_answered());
    EXPECT_EQ(p->resend_from_step(), 10) << "rank " << rank << ": where the database left off";
  }
  // Resending from there (steps 10-14 of rank 0, 10-13 of rank 1) and going
  // on checks every step once.
  for (int64_t s = 10; s < 30; ++s) {
    Step(c, 1, 0, "w-1", s);
    Step(c, 1, 1, "w-2", s);
  }
  FinishK2AndExpectEveryStepChecked(c, 30);
  auto after = Probe(c, 0, "w-1");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->stop()) << "the job ended";
  EXPECT_FALSE(after->probe_answered());
}

// The job row (written at most every second) can record a rank further
// on than the newest stored check: rank 0 had reported steps 10 and 11,
// which rank 1 had not. After the restart rank 0's resent reports of them
// must still count (each rank restarts from the step every rank had
// reported), or steps 10 and 11 would never be checked.
TEST_F(CoordinatorStateTest, ARankStoredAheadOfTheChecksHasItsResentReportsChecked) {
  const std::string dir = TempDir();
  std::string killed;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, Spec(2, 20), 10);
    Step(c, 1, 0, "w-1", 10);
    clock_.Advance(absl::Seconds(2));  // the next report rewrites the job row
    Step(c, 1, 0, "w-1", 11);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
    killed = CopyOf(dir, "killed");
  }
  Incarnation second = Start(killed);
  Coordinator* c = second.coord.get();
  EXPECT_EQ(c->GetJob(1)->checked_steps(), 10);
  EXPECT_EQ(c->GetJob(1)->ranks(0).step(), 10) << "restarts from step 10, not 12";
  for (int64_t s = 0; s < 12; ++s) Step(c, 1, 0, "w-1", s);
  for (int64_t s = 0; s < 20; ++s) {
    if (s >= 12) Step(c, 1, 0, "w-1", s);
    Step(c, 1, 1, "w-2", s);
  }
  FinishK2AndExpectEveryStepChecked(c, 20);
}

// The data-plane secret of a group key is the same after a restart, so a
// rank assigned by the restarted coordinator can connect to peers (and ps
// servers) that got theirs before it.
TEST_F(CoordinatorStateTest, DataPlaneSecretsSurviveRestart) {
  const std::string dir = TempDir();
  v1::Assignment before;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    ASSERT_EQ(Register(c, 1), "w-1");
    ASSERT_EQ(Register(c, 2), "w-2");
    ASSERT_EQ(Submit(c, Spec(2, 100)), 1u);
    v1::HeartbeatReply r = Beat(c, "w-1");
    ASSERT_TRUE(r.has_assignment());
    before = r.assignment();
    Beat(c, "w-1", 1);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  ASSERT_EQ(before.data_plane_secret().size(), dataauth::kSecretBytes);
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  Beat(c, "w-1", 1);
  v1::HeartbeatReply r = Beat(c, "w-2");  // never acknowledged job 1
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), 1u);
  EXPECT_EQ(r.assignment().group_key(), before.group_key());
  EXPECT_EQ(r.assignment().data_plane_secret(), before.data_plane_secret());
  // Another coordinator without the database draws its own key.
  Incarnation other = Start("");
  ASSERT_EQ(Register(other.coord.get(), 1), "w-1");
  ASSERT_EQ(Register(other.coord.get(), 2), "w-2");
  ASSERT_EQ(Submit(other.coord.get(), Spec(2, 100)), 1u);
  v1::HeartbeatReply o = Beat(other.coord.get(), "w-1");
  ASSERT_TRUE(o.has_assignment());
  EXPECT_NE(o.assignment().data_plane_secret(), before.data_plane_secret());
}

// A worker's token (RegisterWorkerReply.worker_token) is still its token
// after a restart with the state database (the key comes from it), so its
// calls keep passing the service's check; a coordinator without the
// database refuses it, and no two ids share a token.
TEST_F(CoordinatorStateTest, WorkerTokensSurviveRestart) {
  const std::string dir = TempDir();
  std::string token1, token2;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    v1::RegisterWorkerRequest req;
    req.set_address("10.0.0.1:5000");
    auto r = c->RegisterWorker(req);
    ASSERT_TRUE(r.ok()) << r.status();
    token1 = r->worker_token();
    req.set_address("10.0.0.2:5000");
    r = c->RegisterWorker(req);
    ASSERT_TRUE(r.ok()) << r.status();
    token2 = r->worker_token();
    EXPECT_TRUE(c->CheckWorkerToken("w-1", token1).ok());
    EXPECT_EQ(c->CheckWorkerToken("w-1", token2).code(), absl::StatusCode::kPermissionDenied);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  ASSERT_EQ(token1.size(), 64u);
  EXPECT_NE(token1, token2);
  Incarnation second = Start(dir);
  EXPECT_TRUE(second.coord->CheckWorkerToken("w-1", token1).ok());
  EXPECT_TRUE(second.coord->CheckWorkerToken("w-2", token2).ok());
  EXPECT_EQ(second.coord->CheckWorkerToken("w-2", "").code(),
            absl::StatusCode::kPermissionDenied);
  Incarnation other = Start("");
  EXPECT_EQ(other.coord->CheckWorkerToken("w-1", token1).code(),
            absl::StatusCode::kPermissionDenied);
}

// A restored worker keeps the memory limit it advertised at registration:
// SubmitJob refuses a job it cannot hold after a restart as before (it
// counted as unlimited until it re-registered).
TEST_F(CoordinatorStateTest, AdvertisedWorkerLimitSurvivesRestart) {
  const std::string dir = TempDir();
  {
    Incarnation first = Start(dir);
    v1::RegisterWorkerRequest req;
    req.set_address("10.0.0.1:5000");
    req.set_max_job_memory_bytes(1000000);  // 1 MB: mlp:1000 fits, mlp:10000 does not
    ASSERT_TRUE(first.coord->RegisterWorker(req).ok());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  Beat(c, "w-1");  // back: IDLE, without registering again
  v1::SubmitJobRequest big;
  *big.mutable_spec() = Spec(1, 10);
  big.mutable_spec()->set_model("mlp:10000");
  absl::StatusOr<v1::SubmitJobReply> r = c->SubmitJob(big);
  ASSERT_FALSE(r.ok()) << "accepted job " << r->job_id();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("the largest worker limit is 1000000 bytes"),
            std::string::npos)
      << r.status();
  v1::JobSpec small = Spec(1, 10);
  small.set_model("mlp:1000");
  EXPECT_EQ(Submit(c, small), 1u);
}

TEST_F(CoordinatorStateTest, LeftWorkerAndItsFailedJobStayThatWayAcrossRestart) {
  const std::string dir = TempDir();
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    Register(c, 1);
    Register(c, 2);
    Submit(c, Spec(2, 100));
    v1::DeregisterWorkerRequest leave;
    leave.set_worker_id("w-2");
    leave.set_reason("test");
    // Leaving fails the job at once; this checks the stored outcome.
    ASSERT_TRUE(c->DeregisterWorker(leave).ok());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  v1::JobStatus j = *second.coord->GetJob(1);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.reason().find("w-2"), std::string::npos) << j.reason();
  ASSERT_EQ(second.coord->ListWorkers().workers_size(), 1);
}

// Issue 10 "Nothing lost": a job that shrank (K = 3 -> 2) keeps its
// generation, members, group key and events across restarts — one while it
// regroups, one after its start was decided — and finishes SUCCEEDED.
TEST_F(CoordinatorStateTest, ShrunkJobKeepsItsGroupAcrossRestarts) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(3, 60);
  spec.set_on_worker_lost("shrink");
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    for (int i = 1; i <= 3; ++i) Register(c, i);
    ASSERT_EQ(Submit(c, spec), 1u);
    for (const char* w : {"w-1", "w-2", "w-3"}) {
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment());
      gen0_key = r.assignment().group_key();
      Beat(c, w, 1);
    }
    for (int64_t s = 0; s < 20; ++s) {
      Step(c, 1, 0, "w-1", s, 0);
      Step(c, 1, 1, "w-2", s, 0);
      Step(c, 1, 2, "w-3", s, 0);
    }
    // w-3 goes silent: lost after 3 s, the job shrinks (generation 1, K 2).
    for (int i = 0; i < 4; ++i) {
      clock_.Advance(absl::Seconds(1));
      Beat(c, "w-1", 1);
      Beat(c, "w-2", 1);
      c->Tick();
    }
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    ASSERT_EQ(j.generation(), 1);
    ASSERT_TRUE(j.regrouping());
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }  // SIGKILL-like: no drain, the database as committed

  uint64_t gen1_key = 0;
  {
    Incarnation second = Start(dir);
    Coordinator* c = second.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 1);
    EXPECT_EQ(j.world(), 2);
    EXPECT_TRUE(j.regrouping());
    ASSERT_EQ(j.ranks_size(), 2);
    EXPECT_EQ(j.ranks(0).worker_id(), "w-1");
    EXPECT_EQ(j.ranks(1).worker_id(), "w-2");
    EXPECT_EQ(j.ranks(1).address(), "10.0.0.2:5000");
    ASSERT_EQ(j.membership_events_size(), 1);
    EXPECT_EQ(j.membership_events(0).kind(), "shrink");
    EXPECT_EQ(j.membership_events(0).worker_id(), "w-3");
    // The survivors say what they hold (w-2 is one step behind): the start
    // is decided after the restart.
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, 20).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, 19);
    ASSERT_TRUE(r.has_assignment());
    EXPECT_EQ(r.assignment().generation(), 1);
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 20);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    EXPECT_EQ(r.assignment().rank(), 1);
    EXPECT_EQ(r.assignment().peer_addresses_size(), 2);
    gen1_key = r.assignment().group_key();
    EXPECT_NE(gen1_key, gen0_key);
    EXPECT_EQ(gen1_key, GenerationKey(gen0_key, 1));
    for (int64_t s = 20; s < 40; ++s) {
      Step(c, 1, 0, "w-1", s, 1);
      Step(c, 1, 1, "w-2", s, 1);
    }
    ASSERT_TRUE(second.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }

  Incarnation third = Start(dir);
  Coordinator* c = third.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
  EXPECT_EQ(j.generation(), 1);
  EXPECT_EQ(j.world(), 2);
  EXPECT_FALSE(j.regrouping());
  ASSERT_EQ(j.membership_events_size(), 1);
  EXPECT_EQ(j.membership_events(0).step(), 20);
  // A survivor carrying on (generation 1, not holding) needs nothing; one
  // that lost its assignment gets the same group back.
  v1::HeartbeatRequest carry;
  carry.set_worker_id("w-1");
  carry.set_job_id(1);
  carry.set_generation(1);
  v1::HeartbeatReply r = *c->Heartbeat(carry);
  EXPECT_FALSE(r.has_assignment());
  EXPECT_FALSE(r.stop_job());
  carry.set_generation(0);
  r = *c->Heartbeat(carry);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().group_key(), gen1_key);
  EXPECT_EQ(r.assignment().start_step(), 20);
  Beat(c, "w-2", 1);
  for (int64_t s = 40; s < 60; ++s) {
    Step(c, 1, 0, "w-1", s, 1);
    Step(c, 1, 1, "w-2", s, 1);
  }
  for (int rank = 0; rank < 2; ++rank) {
    v1::ReportDoneRequest req;
    req.set_worker_id(rank == 0 ? "w-1" : "w-2");
    req.set_job_id(1);
    req.set_rank(rank);
    req.set_ok(true);
    req.set_weights_hash(Hash(59));
    req.set_steps(60);
    req.set_generation(1);
    ASSERT_TRUE(c->ReportDone(req).ok());
  }
  j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
  EXPECT_EQ(j.final_hash(), Hash(59));
}

// on_worker_lost = "wait": a job waiting for a worker to take its vacant
// rank keeps waiting across a restart (the vacant rank, the wait's start
// and reason, its generation), and a worker registering after the restart
// takes the rank; the job then finishes.
TEST_F(CoordinatorStateTest, WaitingJobKeepsItsVacantRankAcrossRestart) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(3, 40);
  spec.set_on_worker_lost("wait");
  double deadline = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    for (int i = 1; i <= 3; ++i) Register(c, i);
    ASSERT_EQ(Submit(c, spec), 1u);
    for (const char* w : {"w-1", "w-2", "w-3"}) {
      ASSERT_TRUE(Beat(c, w).has_assignment());
      Beat(c, w, 1);
    }
    for (int64_t s = 0; s < 10; ++s) {
      Step(c, 1, 0, "w-1", s);
      Step(c, 1, 1, "w-2", s);
      Step(c, 1, 2, "w-3", s);
    }
    for (int i = 0; i < 4; ++i) {  // w-3 goes silent: its rank 2 is vacated
      clock_.Advance(absl::Seconds(1));
      Beat(c, "w-1", 1);
      Beat(c, "w-2", 1);
      c->Tick();
    }
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    ASSERT_EQ(j.waiting_for_ranks_size(), 1);
    ASSERT_EQ(j.waiting_for_ranks(0), 2);
    deadline = j.wait_deadline_unix_s();
    ASSERT_GT(deadline, 0);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
  EXPECT_EQ(j.generation(), 1);
  EXPECT_EQ(j.world(), 3);
  ASSERT_EQ(j.waiting_for_ranks_size(), 1);
  EXPECT_EQ(j.waiting_for_ranks(0), 2);
  EXPECT_EQ(j.wait_deadline_unix_s(), deadline);
  ASSERT_EQ(j.ranks_size(), 3);
  EXPECT_EQ(j.ranks(2).worker_id(), "");
  // The survivors hold their replicas; a fresh worker takes rank 2.
  for (const char* w : {"w-1", "w-2"}) Hold(c, w, 1, 1, 10);
  EXPECT_EQ(Register(c, 4), "w-4");
  j = *c->GetJob(1);
  EXPECT_EQ(j.waiting_for_ranks_size(), 0);
  ASSERT_EQ(j.ranks_size(), 3);
  EXPECT_EQ(j.ranks(2).worker_id(), "w-4");
  EXPECT_EQ(j.generation(), 2);
}

}  // namespace
}  // namespace testing_coordinator_state
}  // namespace lockstep
