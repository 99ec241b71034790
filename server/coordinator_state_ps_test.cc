// The coordinator's state database, ps jobs on the coordinator's own shard
// across a restart: the in-flight sums are gone, so the job regroups from
// the newest completed step (step 0, a finished rank's final state), done
// generations survive (and an old database falls back), and the job keeps
// its ps addresses (coordinator_state_test_fixture.h).
#include <string>
#include <vector>

#include "server/coordinator_state_test_fixture.h"

namespace lockstep {
namespace testing_coordinator_state {
namespace {

// Issue 10: a ps job on the coordinator's own shard continues after a
// restart. The shard's sums are gone, so the restarted coordinator regroups
// the job (generation 1, same ranks, a "restart" event, a fresh group key:
// a fresh shard); rank 0 had pulled step 10's sum and applied it, rank 1
// had not: they continue at step 11, rank 1 copying rank 0's state. The
// job then finishes; a done report of generation 0 (a rank that finished
// before the kill) still counts after a restart regroup.
TEST_F(CoordinatorStateTest, PsJobOnTheCoordinatorsShardRegroupsAtRestartAndFinishes) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 100);
  spec.set_sync_mode(v1::PS);
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 10);
    gen0_key = group_key_;
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  {
    // Both ranks had finished before the kill: their generation-0 done
    // reports, asked again, end the regrouped job.
    Incarnation second = Start(CopyOf(dir, "finished"));
    Coordinator* c = second.coord.get();
    ASSERT_EQ(c->GetJob(1)->generation(), 1);
    for (const char* w : {"w-1", "w-2"}) EXPECT_EQ(Beat(c, w).resend_done_job_id(), 1u);
    Done(c, 1, 0, "w-1", Hash(99), /*generation=*/0);
    Done(c, 1, 1, "w-2", Hash(99), /*generation=*/0);
    v1::JobStatus j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
    EXPECT_EQ(j.final_hash(), Hash(99));
  }
  Incarnation second = Start(dir);
  Coordinator* c = second.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
  EXPECT_EQ(j.generation(), 1);
  EXPECT_EQ(j.world(), 2);
  EXPECT_TRUE(j.regrouping());
  ASSERT_EQ(j.membership_events_size(), 1);
  EXPECT_EQ(j.membership_events(0).kind(), "restart");
  EXPECT_NE(j.membership_events(0).reason().find("parameter-server shard"), std::string::npos)
      << j.membership_events(0).reason();
  // The ranks' generation-0 runners are told to regroup (on the same
  // shard address: the coordinator's own).
  v1::HeartbeatReply r = Beat(c, "w-1", 1);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().generation(), 1);
  EXPECT_FALSE(r.assignment().start_ready());
  EXPECT_TRUE(r.assignment().coordinator_ps_shard());
  ASSERT_EQ(r.assignment().ps_addresses_size(), 1);
  EXPECT_EQ(r.assignment().ps_addresses(0), "coord:7070");
  EXPECT_FALSE(Hold(c, "w-1", 1, 1, 11).has_assignment());
  forgotten_.clear();
  r = Hold(c, "w-2", 1, 1, 10);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_TRUE(r.assignment().start_ready());
  EXPECT_EQ(r.assignment().start_step(), 11);
  EXPECT_EQ(r.assignment().state_source_rank(), 0);
  EXPECT_EQ(r.assignment().group_key(), GenerationKey(gen0_key, 1));
  // Generation 1 started: the shard drops generation 0's group (what its
  // runners pushed after the restart) and its shape round, not the new one.
  const uint64_t kShape = uint64_t{1} << 63;
  EXPECT_EQ(forgotten_, (std::vector<uint64_t>{gen0_key, gen0_key | kShape}));
  j = *c->GetJob(1);
  EXPECT_FALSE(j.regrouping());
  EXPECT_EQ(j.membership_events(0).step(), 11);
  for (int64_t s = 11; s < 100; ++s) {
    Step(c, 1, 0, "w-1", s, 1);
    Step(c, 1, 1, "w-2", s, 1);
  }
  Done(c, 1, 0, "w-1", Hash(99), 1);
  forgotten_.clear();
  Done(c, 1, 1, "w-2", Hash(99), 1);
  j = *c->GetJob(1);
  EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
  EXPECT_EQ(j.final_hash(), Hash(99));
  EXPECT_EQ(j.mismatched_steps(), 0);
  // The job ended: every generation's groups go.
  const uint64_t gen1_key = GenerationKey(gen0_key, 1);
  EXPECT_EQ(forgotten_, (std::vector<uint64_t>{gen0_key, gen0_key | kShape, gen1_key,
                                               gen1_key | kShape}));
}

// Issue 10, "sync still shows every job and its history": a ps job on the
// coordinator's shard restarted after the database committed the checks of
// steps 0-9 while rank 0 had reported steps 10-14 and rank 1 steps 10-13.
// The restart regroups the job (generation 1), and the ranks' generation-0
// reports of the steps the database lacked come again as late reports: a
// probe names where each rank resumes, steps 10-13 are checked (12 and 13
// after rank 0's first report of generation 1) and stored; step 14, which
// rank 1 never ran (it copies rank 0's state at step 15), stays unchecked.
// A duplicate, a step at or past the start and a late mismatch are
// handled; once every rank reported generation 1 the late reports end (a
// probe is not answered); after another restart the database lists the
// same steps.
TEST_F(CoordinatorStateTest, PsJobRestartChecksTheOldGenerationsReportsSentAgain) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 40);
  spec.set_sync_mode(v1::PS);
  std::string killed;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 10);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
    killed = CopyOf(dir, "killed");
  }
  auto late = [](Coordinator* c, int rank, int64_t step, const std::string& hash) {
    v1::ReportStepRequest req;
    req.set_worker_id(absl::StrCat("w-", rank + 1));
    req.set_job_id(1);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(hash);
    req.set_examples(8);
    req.set_generation(0);
    auto r = c->ReportStep(req);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->stop());
    EXPECT_EQ(r->repair_step(), 0);
  };
  // A probe of generation 0 (its oldest kept report: step 8).
  auto probe = [](Coordinator* c, int rank) {
    return Probe(c, rank, absl::StrCat("w-", rank + 1), 1, /*step=*/8, /*generation=*/0);
  };
  const std::string db_dir = killed;
  {
    Incarnation second = Start(db_dir);
    Coordinator* c = second.coord.get();
    ASSERT_EQ(c->GetJob(1)->generation(), 1);
    ASSERT_EQ(c->GetJob(1)->checked_steps(), 10);
    auto p = probe(c, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->probe_answered());
    EXPECT_EQ(p->resend_from_step(), 10);
    for (int64_t s = 10; s <= 14; ++s) late(c, 0, s, Hash(s));
    late(c, 1, 10, Hash(10));
    late(c, 1, 11, Hash(11));
    late(c, 1, 11, Hash(11));  // a duplicate
    EXPECT_EQ(c->GetJob(1)->checked_steps(), 12);
    p = probe(c, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->resend_from_step(), 12);
    // Generation 1 starts at step 15 (rank 0 held it, rank 1 step 14).
    Beat(c, "w-1", 1);
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, 15).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, 14);
    ASSERT_TRUE(r.has_assignment());
    ASSERT_EQ(r.assignment().start_step(), 15);
    // Rank 0's first report of generation 1 comes before rank 1's late
    // ones (each worker resends before anything new, but the ranks are
    // not ordered with each other).
    Step(c, 1, 0, "w-1", 15, 1);
    late(c, 1, 12, Hash(12));
    late(c, 1, 13, Hash(1313));  // rank 1 differed at step 13
    late(c, 1, 15, Hash(15));    // past the start: not the old generation's
    EXPECT_TRUE(probe(c, 1)->probe_answered());
    for (int64_t s = 15; s < 30; ++s) {
      if (s > 15) Step(c, 1, 0, "w-1", s, 1);
      Step(c, 1, 1, "w-2", s, 1);
    }
    // Both ranks reported generation 1: their late reports are over.
    p = probe(c, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(p->probe_answered());
    late(c, 1, 14, Hash(14));  // stale now
    v1::JobStatus j = *c->GetJob(1);
    EXPECT_EQ(j.checked_steps(), 10 + 4 + 15);
    EXPECT_EQ(j.mismatched_steps(), 1);
    EXPECT_EQ(j.state(), v1::RUNNING) << j.reason();
    absl::StatusOr<v1::SyncHistory> h = c->GetSyncHistory(1, 0);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->first_mismatch_step(), 13);
    std::vector<int64_t> want;
    for (int64_t s = 0; s < 30; ++s) {
      if (s != 14) want.push_back(s);
    }
    std::vector<int64_t> got;
    for (const v1::SyncCheck& check : h->checks()) {
      got.push_back(check.step());
      EXPECT_EQ(check.all_match(), check.step() != 13) << check.step();
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(PagedCheckSteps(c, 1, 7), want);
    for (int64_t s = 30; s < 40; ++s) {
      Step(c, 1, 0, "w-1", s, 1);
      Step(c, 1, 1, "w-2", s, 1);
    }
    Done(c, 1, 0, "w-1", Hash(39), 1);
    Done(c, 1, 1, "w-2", Hash(39), 1);
    ASSERT_EQ(c->GetJob(1)->state(), v1::SUCCEEDED);
    ASSERT_TRUE(second.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  Incarnation third = Start(db_dir);
  Coordinator* c = third.coord.get();
  v1::JobStatus j = *c->GetJob(1);
  EXPECT_EQ(j.checked_steps(), 39);
  EXPECT_EQ(j.mismatched_steps(), 1);
  std::vector<int64_t> want;
  for (int64_t s = 0; s < 40; ++s) {
    if (s != 14) want.push_back(s);
  }
  EXPECT_EQ(PagedCheckSteps(c, 1, 7), want);
}

// Issue 10: a ps job on the coordinator's shard killed before any rank
// completed a step. Its workers had not even received the assignment (or
// one had, and its runner failed before step 0), so after the restart
// regroup they get generation 1 first and hold no step (-1), like joiners.
// Nobody trained: the group starts at step 0, each rank building the
// initial replica itself, instead of waiting for a start that never comes.
TEST_F(CoordinatorStateTest, PsJobOnTheCoordinatorsShardKilledBeforeAnyStepStartsAtStepZero) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 100);
  spec.set_sync_mode(v1::PS);
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 0, /*acknowledge=*/false);
    ASSERT_EQ(c->GetJob(1)->state(), v1::RUNNING);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (int variant = 0; variant < 2; ++variant) {
    Incarnation second = Start(CopyOf(dir, absl::StrCat(variant)));
    Coordinator* c = second.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    ASSERT_EQ(j.generation(), 1);
    ASSERT_TRUE(j.regrouping());
    // Idle workers of a job they never acknowledged: the regroup's
    // assignment (not start_ready), and no ask for a done report.
    for (const char* w : {"w-1", "w-2"}) {
      v1::HeartbeatReply r = Beat(c, w);
      ASSERT_TRUE(r.has_assignment()) << w;
      EXPECT_EQ(r.assignment().generation(), 1);
      EXPECT_FALSE(r.assignment().start_ready());
      EXPECT_EQ(r.resend_done_job_id(), 0u);
    }
    // Variant 1: w-1's generation-0 runner had started and failed before
    // step 0 (it holds step 0); w-2 holds nothing. Variant 0: neither.
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, variant == 1 ? 0 : -1).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, -1);
    ASSERT_TRUE(r.has_assignment()) << "the start was not decided";
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 0);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    j = *c->GetJob(1);
    EXPECT_FALSE(j.regrouping());
    ASSERT_EQ(j.membership_events_size(), 1);
    EXPECT_EQ(j.membership_events(0).step(), 0);
    for (int64_t s = 0; s < 100; ++s) {
      Step(c, 1, 0, "w-1", s, /*generation=*/1);
      Step(c, 1, 1, "w-2", s, /*generation=*/1);
    }
    Done(c, 1, 0, "w-1", Hash(99), 1);
    Done(c, 1, 1, "w-2", Hash(99), 1);
    j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
    EXPECT_EQ(j.checked_steps(), 100);
  }
}

// Issue 10: a ps job on the coordinator's shard whose rank 0 had finished
// (its done committed) while rank 1 was still pulling the last sum, which
// the restart lost: the job regroups, rank 0 holding the final state (step
// 10, offered under generation 0's key, which the assignment names); rank
// 1 copies it and finishes with the same hash. Variant 1: rank 1 had
// finished too (its done was not committed): asked again, it ends the job.
// Variant 2: no done was committed; rank 0's, sent again while rank 1
// holds step 9, decides the same start.
TEST_F(CoordinatorStateTest, PsJobWithAFinishedRankRegroupsTheOthersOntoItsFinalState) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 10);
  spec.set_sync_mode(v1::PS);
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    Coordinator* c = first.coord.get();
    StartAndStep(c, spec, 10);
    gen0_key = group_key_;
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
    ASSERT_EQ(system(absl::StrCat("cp -r ", dir, " ", dir, "_no_done").c_str()), 0);
    clock_.Advance(absl::Seconds(2));  // past kPersistProgressEvery: the row is written
    Done(c, 1, 0, "w-1", Hash(9));
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  auto expect_start_at_the_end = [&](const v1::HeartbeatReply& r) {
    ASSERT_TRUE(r.has_assignment());
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 10);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    EXPECT_EQ(r.assignment().state_source_group_key(), gen0_key);
    EXPECT_EQ(r.assignment().group_key(), GenerationKey(gen0_key, 1));
  };
  for (int variant = 0; variant < 3; ++variant) {
    Incarnation second = Start(CopyOf(variant == 2 ? dir + "_no_done" : dir,
                                      absl::StrCat(variant)));
    Coordinator* c = second.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 1);
    EXPECT_TRUE(j.regrouping());
    if (variant == 0) {
      EXPECT_EQ(Beat(c, "w-1").resend_done_job_id(), 0u);  // its done is stored
      v1::HeartbeatReply r = Beat(c, "w-2", 1);  // its generation-0 runner
      ASSERT_TRUE(r.has_assignment());
      EXPECT_FALSE(r.assignment().start_ready());
      expect_start_at_the_end(Hold(c, "w-2", 1, 1, 9));
      Done(c, 1, 1, "w-2", Hash(9), /*generation=*/1);
    } else if (variant == 1) {
      EXPECT_EQ(Beat(c, "w-2").resend_done_job_id(), 1u);
      Done(c, 1, 1, "w-2", Hash(9), /*generation=*/0);
    } else {
      EXPECT_FALSE(Hold(c, "w-2", 1, 1, 9).has_assignment());
      EXPECT_EQ(Beat(c, "w-1").resend_done_job_id(), 1u);
      Done(c, 1, 0, "w-1", Hash(9), /*generation=*/0);
      EXPECT_FALSE(c->GetJob(1)->regrouping());
      expect_start_at_the_end(Hold(c, "w-2", 1, 1, 9));
      Done(c, 1, 1, "w-2", Hash(9), /*generation=*/1);
    }
    j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << variant << ": " << j.reason();
    EXPECT_EQ(j.final_hash(), Hash(9));
  }
}

// Issue 10: a rank's done report records its generation (the key its
// worker offers the final state under). A ps job on the coordinator's shard
// regrouped once (generation 1), rank 0 finished in generation 1 and the
// coordinator restarted again (generation 2): rank 1 copies rank 0's final
// state under generation 1's key. A database written before the field
// existed (done_generation stripped from the stored job state) gives the
// same key: a done rank counts as done in the job's stored generation.
TEST_F(CoordinatorStateTest, DoneGenerationSurvivesRestartAndAnOldDatabaseFallsBackToTheJobs) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 10);
  spec.set_sync_mode(v1::PS);
  uint64_t gen0_key = 0;
  {
    Incarnation first = Start(dir);
    StartAndStep(first.coord.get(), spec, 5);
    gen0_key = group_key_;
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  {
    Incarnation second = Start(dir);
    Coordinator* c = second.coord.get();
    ASSERT_EQ(c->GetJob(1)->generation(), 1);
    EXPECT_FALSE(Hold(c, "w-1", 1, 1, 5).has_assignment());
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 1, 5);
    ASSERT_TRUE(r.has_assignment());
    ASSERT_TRUE(r.assignment().start_ready());
    ASSERT_EQ(r.assignment().start_step(), 5);
    for (int64_t s = 5; s < 10; ++s) {
      Step(c, 1, 0, "w-1", s, 1);
      Step(c, 1, 1, "w-2", s, 1);
    }
    clock_.Advance(absl::Seconds(2));  // past kPersistProgressEvery: the row is written
    Done(c, 1, 0, "w-1", Hash(9), /*generation=*/1);
    ASSERT_TRUE(second.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  // The old database: the same rows with done_generation absent.
  const std::string old_dir = CopyOf(dir, "old");
  {
    auto db = StateDb::Open({old_dir});
    ASSERT_TRUE(db.ok()) << db.status();
    auto loaded = (*db)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_EQ(loaded->jobs.size(), 1u);
    StoredJob job = std::move(loaded->jobs[0]);
    v1::StoredJobState extra;
    ASSERT_TRUE(extra.ParseFromString(job.extra));
    ASSERT_EQ(extra.ranks_size(), 2);
    ASSERT_TRUE(extra.ranks(0).done());
    ASSERT_TRUE(extra.ranks(0).has_done_generation());
    EXPECT_EQ(extra.ranks(0).done_generation(), 1);
    for (v1::StoredRankState& x : *extra.mutable_ranks()) x.clear_done_generation();
    job.extra = extra.SerializeAsString();
    (*db)->PutJob(std::move(job));
    ASSERT_TRUE((*db)->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (const std::string& d : {dir, old_dir}) {
    SCOPED_TRACE(d);
    Incarnation third = Start(d);
    Coordinator* c = third.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 2);
    EXPECT_TRUE(j.regrouping());
    EXPECT_EQ(Beat(c, "w-1").resend_done_job_id(), 0u);  // its done is stored
    v1::HeartbeatReply r = Hold(c, "w-2", 1, 2, 9);
    ASSERT_TRUE(r.has_assignment());
    EXPECT_TRUE(r.assignment().start_ready());
    EXPECT_EQ(r.assignment().start_step(), 10);
    EXPECT_EQ(r.assignment().state_source_rank(), 0);
    EXPECT_EQ(r.assignment().state_source_group_key(), GenerationKey(gen0_key, 1));
    EXPECT_EQ(r.assignment().group_key(), GenerationKey(gen0_key, 2));
    Done(c, 1, 1, "w-2", Hash(9), /*generation=*/2);
    j = *c->GetJob(1);
    EXPECT_EQ(j.state(), v1::SUCCEEDED) << j.reason();
    EXPECT_EQ(j.final_hash(), Hash(9));
  }
}

// Issue 10 review: a ps job that ran on --ps_addresses keeps them across a
// restart without that flag (they are stored with the job) and continues
// on them: no regroup (those shards kept their state).
TEST_F(CoordinatorStateTest, PsJobKeepsItsPsAddressesWhenTheCoordinatorComesBackWithoutThem) {
  const std::string dir = TempDir();
  v1::JobSpec spec = Spec(2, 100);
  spec.set_sync_mode(v1::PS);
  spec.set_ps_shards(2);
  {
    Incarnation first = Start(dir, {"ps1:9000", "ps2:9000"});
    StartAndStep(first.coord.get(), spec, 10);
    ASSERT_TRUE(first.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
  for (int restart = 0; restart < 2; ++restart) {  // twice: stored again as it was
    Incarnation next = Start(dir);  // no --ps_addresses: its own shard only
    Coordinator* c = next.coord.get();
    v1::JobStatus j = *c->GetJob(1);
    ASSERT_EQ(j.state(), v1::RUNNING) << j.reason();
    EXPECT_EQ(j.generation(), 0);
    EXPECT_EQ(j.membership_events_size(), 0);
    v1::HeartbeatRequest lost;  // a worker that lost its assignment
    lost.set_worker_id("w-2");
    lost.set_job_id(1);
    lost.set_generation(-1);
    v1::HeartbeatReply r = *c->Heartbeat(lost);
    ASSERT_TRUE(r.has_assignment());
    ASSERT_EQ(r.assignment().ps_addresses_size(), 2);
    EXPECT_EQ(r.assignment().ps_addresses(0), "ps1:9000");
    EXPECT_EQ(r.assignment().ps_addresses(1), "ps2:9000");
    EXPECT_FALSE(r.assignment().coordinator_ps_shard());
    Step(c, 1, 0, "w-1", 10 + restart);
    Step(c, 1, 1, "w-2", 10 + restart);
    ASSERT_TRUE(next.db->Flush(absl::Now() + absl::Seconds(10)).ok());
  }
}

}  // namespace
}  // namespace testing_coordinator_state
}  // namespace lockstep
