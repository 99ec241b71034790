// Coordinator: a job's life after it starts (cancel, done reports,
// abandonment, re-registration), bad submissions, ps shards, the bounded
// sync history, change waits, the weights store, evaluation, heartbeat ages
// (server/coordinator_test_fixture.h).
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

TEST_F(CoordinatorTest, CancelStopsWorkersAndIsIdempotent) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  absl::StatusOr<v1::JobStatus> c = coord_->CancelJob(job);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state(), v1::CANCELLED);
  EXPECT_EQ(c->reason(), "cancelled by user");
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 0, w[0], 0, Hash(1));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stop());
  EXPECT_EQ(r->reason(), "job 1 is CANCELLED: cancelled by user");
  EXPECT_TRUE(Beat(w[1], job).stop_job());
  // Cancelling a terminal job returns it unchanged.
  const double finished = c->finished_unix_s();
  clock_.Advance(absl::Seconds(5));
  c = coord_->CancelJob(job);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state(), v1::CANCELLED);
  EXPECT_EQ(c->finished_unix_s(), finished);
  EXPECT_EQ(coord_->CancelJob(42).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coord_->CancelJob(42).status().message(), "job 42 not found");
}

TEST_F(CoordinatorTest, CancelPendingJobLetsNextOneRun) {
  Register(1);
  const uint64_t big = Submit(Spec(2));
  const uint64_t small = Submit(Spec(1));
  EXPECT_EQ(Job(small).state(), v1::PENDING);
  absl::StatusOr<v1::JobStatus> c = coord_->CancelJob(big);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state(), v1::CANCELLED);
  EXPECT_EQ(c->ranks_size(), 0);
  EXPECT_EQ(Job(small).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, WorkerBusyUntilItHeartbeatsWithoutJobThenRunsNextJob) {
  std::vector<std::string> w;
  const uint64_t first = StartJob(2, &w);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(Step(first, r, w[r], 0, Hash(1)).ok());
  ASSERT_TRUE(Done(first, 0, w[0], true, Hash(1)).ok());
  // Rank 0 finished its part but the job runs on: no re-delivery, still BUSY.
  v1::HeartbeatReply idle_beat = Beat(w[0]);
  EXPECT_FALSE(idle_beat.has_assignment());
  EXPECT_EQ(WorkerState(w[0]), v1::BUSY);
  ASSERT_TRUE(Done(first, 1, w[1], true, Hash(1)).ok());
  EXPECT_EQ(Job(first).state(), v1::SUCCEEDED);

  const uint64_t second = Submit(Spec(2));
  EXPECT_EQ(second, 2u);
  // Both workers stay BUSY until a job-0 heartbeat after the job ended.
  EXPECT_EQ(WorkerState(w[0]), v1::BUSY);
  EXPECT_EQ(WorkerState(w[1]), v1::BUSY);
  EXPECT_EQ(Job(second).state(), v1::PENDING);
  // Still winding down: the job id it reports has ended.
  EXPECT_TRUE(Beat(w[1], first).stop_job());
  EXPECT_EQ(Job(second).state(), v1::PENDING);
  EXPECT_FALSE(Beat(w[0]).has_assignment());
  EXPECT_EQ(WorkerState(w[0]), v1::IDLE);
  EXPECT_EQ(Job(second).state(), v1::PENDING);
  // The last worker to become idle gets the new assignment in the same reply.
  v1::HeartbeatReply r = Beat(w[1]);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), second);
  EXPECT_EQ(r.assignment().rank(), 1);
  EXPECT_EQ(Job(second).state(), v1::RUNNING);
  r = Beat(w[0]);
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().job_id(), second);
  EXPECT_EQ(r.assignment().rank(), 0);
  Beat(w[0], second);
  Beat(w[1], second);
  for (int r2 = 0; r2 < 2; ++r2) ASSERT_TRUE(Step(second, r2, w[r2], 0, Hash(3)).ok());
  EXPECT_EQ(Job(second).checked_steps(), 1);
  EXPECT_EQ(Job(first).checked_steps(), 1);
}

TEST_F(CoordinatorTest, ReportDoneSuccessAndFailure) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  ASSERT_TRUE(Done(job, 1, w[1], true, Hash(4), "", 0.7).ok());
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
  ASSERT_TRUE(Done(job, 0, w[0], true, Hash(4), "", 0.8).ok());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::SUCCEEDED);
  EXPECT_EQ(st.final_hash(), Hash(4));
  EXPECT_DOUBLE_EQ(st.test_accuracy(), 0.8);
  EXPECT_EQ(st.finished_unix_s(), 1000.0);
  EXPECT_EQ(st.reason(), "");

  // A second job whose rank 1 fails.
  Beat(w[0]);
  Beat(w[1]);
  const uint64_t bad = Submit(Spec(2));
  Beat(w[0], bad);
  Beat(w[1], bad);
  ASSERT_EQ(Job(bad).state(), v1::RUNNING);
  ASSERT_TRUE(Done(bad, 1, w[1], false, "", "spec.model: dataset has 3 classes").ok());
  st = Job(bad);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(), "rank 1 (w-2): spec.model: dataset has 3 classes");
  // Late reports of an ended job are accepted and ignored.
  EXPECT_TRUE(Done(bad, 0, w[0], true, Hash(1)).ok());
  EXPECT_EQ(Job(bad).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ReportDoneWithDifferentFinalHashesFails) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w);
  ASSERT_TRUE(Done(job, 0, w[0], true, Hash(1)).ok());
  ASSERT_TRUE(Done(job, 1, w[1], true, Hash(2)).ok());
  ASSERT_TRUE(Done(job, 2, w[2], true, Hash(1)).ok());
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_TRUE(st.out_of_sync());
  EXPECT_EQ(st.reason(),
            absl::StrCat("replicas finished with different weights: rank(s) 1 differ from the "
                         "majority hash ",
                         Hash(1)));
}

TEST_F(CoordinatorTest, WorkerAbandoningItsJobFailsIt) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  v1::HeartbeatReply r = Beat(w[1]);  // acknowledged, no ReportDone
  EXPECT_FALSE(r.has_assignment());
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(),
            "rank 1 (w-2, 10.0.0.2:5000) abandoned the job: it reported no job before sending "
            "ReportDone");
  EXPECT_EQ(WorkerState(w[1]), v1::IDLE);
}

TEST_F(CoordinatorTest, ReregistrationDropsOldIdAndFailsItsJob) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  // Without w-2's token (a caller that knows its address, host and pid):
  // refused while w-2 is live, and nothing changes.
  absl::StatusOr<v1::RegisterWorkerReply> r = TryRegister(2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("registered by live worker w-2 (host host2"));
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("does not carry its worker token"));
  r = TryRegister(2, true, tokens_["w-1"]);  // another worker's token
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("carries another than its worker token"));
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
  // The process itself (it has the token) replaces its registration at once.
  EXPECT_EQ(Register(2, true, tokens_["w-2"]), "w-3");
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(),
            "worker w-2 (rank 1, host host2, 10.0.0.2:5000) re-registered as w-3: it restarted "
            "and lost its part of the job");
  EXPECT_TRUE(Beat("w-2").reregister());
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 2);
  EXPECT_EQ(list.workers(1).worker_id(), "w-3");
  EXPECT_EQ(list.workers(1).state(), v1::IDLE);
}

// A worker process that restarts at its own address while bound to a job
// is gone from that job as a lost one is: under "wait" the restarted
// process (a new, idle registration) takes its old rank back at once;
// under "shrink" the others regroup without it.
TEST_F(CoordinatorTest, ReregistrationUnderWaitGivesTheRestartedProcessItsRankBack) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w, "", "wait");
  EXPECT_EQ(Register(2, true, tokens_["w-2"]), "w-3");
  v1::JobStatus st = Job(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  const v1::HeartbeatReply r = Beat("w-3");
  ASSERT_TRUE(r.has_assignment());
  EXPECT_EQ(r.assignment().rank(), 1);
  st = Job(job);
  ASSERT_EQ(st.membership_events_size(), 2);
  EXPECT_EQ(st.membership_events(0).kind(), "wait");
  EXPECT_EQ(st.membership_events(0).worker_id(), "w-2");
  EXPECT_EQ(st.membership_events(0).reason(),
            "worker w-2 (rank 1, host host2, 10.0.0.2:5000) re-registered as w-3: it restarted "
            "and lost its part of the job");
  EXPECT_EQ(st.membership_events(1).kind(), "replace");
  EXPECT_EQ(st.membership_events(1).worker_id(), "w-3");
  EXPECT_EQ(st.ranks(1).worker_id(), "w-3");
}

TEST_F(CoordinatorTest, ReregistrationUnderShrinkRegroupsTheOthers) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w, "", "shrink");
  EXPECT_EQ(Register(1, true, tokens_["w-1"]), "w-4");
  const v1::JobStatus st = Job(job);
  ASSERT_EQ(st.state(), v1::RUNNING) << st.reason();
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.world(), 2);
  ASSERT_GE(st.membership_events_size(), 1);
  EXPECT_EQ(st.membership_events(0).kind(), "shrink");
  EXPECT_EQ(st.membership_events(0).worker_id(), "w-1");
  EXPECT_EQ(st.membership_events(0).rank(), 0);
  EXPECT_EQ(st.ranks(0).worker_id(), "w-2");
  EXPECT_EQ(st.ranks(1).worker_id(), "w-3");
  EXPECT_TRUE(Beat("w-1").reregister());
}

TEST_F(CoordinatorTest, BadSubmissionsNameTheFieldAndServiceGoesOn) {
  struct Case {
    std::string what;
    v1::JobSpec spec;
    std::string prefix;
  };
  std::vector<Case> cases;
  v1::JobSpec s = Spec(2);
  s.set_model("resnet");
  cases.push_back({"model", s, "spec.model: unknown model \"resnet\""});
  s = Spec(2);
  s.mutable_data()->set_dataset("s3://bucket/x");
  cases.push_back({"dataset", s, "spec.data.dataset: unknown dataset \"s3://bucket/x\""});
  s = Spec(4);
  s.set_global_batch(3);
  cases.push_back({"batch", s, "spec.global_batch: expected >= spec.num_workers (4), got 3"});
  s = Spec(2);
  s.mutable_lr()->set_base_lr(0);
  cases.push_back({"lr", s, "spec.lr.base_lr: expected finite and > 0, got 0"});
  s = Spec(2);
  s.mutable_lr()->set_base_lr(-0.5f);
  cases.push_back({"negative lr", s, "spec.lr.base_lr: expected finite and > 0, got -0.5"});
  s = Spec(2, v1::SYNC_MODE_UNSPECIFIED);
  cases.push_back({"sync", s, "spec.sync_mode: expected RING or PS, got SYNC_MODE_UNSPECIFIED"});
  s = Spec(2);
  s.set_num_workers(0);
  cases.push_back({"workers", s, "spec.num_workers: expected >= 1, got 0"});
  s = Spec(2);
  s.set_peer_transport(static_cast<v1::PeerTransport>(7));
  cases.push_back({"transport", s, "spec.peer_transport: expected GRPC, TCP or SHM, got 7"});
  for (const Case& c : cases) {
    absl::StatusOr<v1::SubmitJobReply> r = SubmitRaw(c.spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(r.status().message().substr(0, c.prefix.size()), c.prefix)
        << c.what << ": " << r.status();
  }
  EXPECT_EQ(coord_->GetJob(42).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coord_->GetJob(42).status().message(), "job 42 not found");
  EXPECT_EQ(coord_->GetSyncHistory(42, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coord_->WaitForJobChange(42, 0, absl::Now()).status().code(),
            absl::StatusCode::kNotFound);
  // The coordinator keeps serving: the next valid job gets id 1 and runs.
  Register(1);
  Register(2);
  const uint64_t job = Submit(Spec(2));
  EXPECT_EQ(job, 1u);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, PsModeUsesAdvertisedAddressAndChecksShards) {
  Register(1);
  v1::JobSpec spec = Spec(1, v1::PS);
  spec.set_ps_shards(2);
  absl::StatusOr<v1::SubmitJobReply> r = SubmitRaw(spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "spec.ps_shards: job needs 2 parameter-server shard(s), 1 address(es) are "
            "configured (coord:7070)");
  spec.set_ps_shards(0);
  const uint64_t job = Submit(spec);
  v1::HeartbeatReply beat = Beat("w-1");
  ASSERT_TRUE(beat.has_assignment());
  ASSERT_EQ(beat.assignment().ps_addresses_size(), 1);
  EXPECT_EQ(beat.assignment().ps_addresses(0), "coord:7070");
  EXPECT_EQ(beat.assignment().job_id(), job);
}

TEST_F(CoordinatorTest, PsModeUsesFirstShardsOfConfiguredAddresses) {
  CoordinatorOptions o = DefaultOptions();
  o.ps_addresses = {"ps0:1", "ps1:1", "ps2:1"};
  Reset(o);
  Register(1);
  Register(2);
  v1::JobSpec spec = Spec(2, v1::PS);
  spec.set_ps_shards(2);
  Submit(spec);
  v1::HeartbeatReply beat = Beat("w-2");
  ASSERT_TRUE(beat.has_assignment());
  ASSERT_EQ(beat.assignment().ps_addresses_size(), 2);
  EXPECT_EQ(beat.assignment().ps_addresses(0), "ps0:1");
  EXPECT_EQ(beat.assignment().ps_addresses(1), "ps1:1");
  spec.set_ps_shards(4);
  EXPECT_EQ(SubmitRaw(spec).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, SyncHistoryIsCappedButCountersExact) {
  CoordinatorOptions o = DefaultOptions();
  o.max_sync_history = 3;
  Reset(o);
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  for (int step = 0; step < 5; ++step) {
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(Step(job, r, w[r], step, Hash(step)).ok());
  }
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checked_steps(), 5);
  ASSERT_EQ(h->checks_size(), 3);
  EXPECT_EQ(h->checks(0).step(), 2);
  EXPECT_EQ(h->checks(2).step(), 4);
  h = coord_->GetSyncHistory(job, 2);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->checks_size(), 2);
  EXPECT_EQ(h->checks(0).step(), 3);
  EXPECT_EQ(coord_->GetSyncHistory(job, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, WaitForJobChangeReturnsOnChange) {
  Register(1);
  const uint64_t job = Submit(Spec(2));
  absl::StatusOr<std::pair<v1::JobStatus, uint64_t>> first =
      coord_->WaitForJobChange(job, 0, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(first.ok());
  EXPECT_GT(first->second, 0u);
  EXPECT_EQ(first->first.state(), v1::PENDING);
  // Nothing changes: returns at the (past) deadline with the same version.
  absl::StatusOr<std::pair<v1::JobStatus, uint64_t>> same =
      coord_->WaitForJobChange(job, first->second, absl::Now());
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->second, first->second);
  // A waiter blocked on the job wakes up when it changes.
  absl::StatusOr<std::pair<v1::JobStatus, uint64_t>> woke;
  std::thread waiter([&] {
    woke = coord_->WaitForJobChange(job, first->second, absl::Now() + absl::Seconds(30));
  });
  ASSERT_TRUE(coord_->CancelJob(job).ok());
  waiter.join();
  ASSERT_TRUE(woke.ok());
  EXPECT_GT(woke->second, first->second);
  EXPECT_EQ(woke->first.state(), v1::CANCELLED);
}

TEST_F(CoordinatorTest, WeightsUploadDownloadAndEviction) {
  CoordinatorOptions o = DefaultOptions();
  o.max_jobs_with_weights = 1;
  Reset(o);
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  const std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);

  v1::WeightsChunk c;
  c.set_worker_id(w[1]);
  c.set_job_id(job);
  c.set_total(5);
  c.set_data(bytes.substr(0, 8));
  EXPECT_EQ(coord_->UploadWeightsChunk(c).code(), absl::StatusCode::kFailedPrecondition);
  c.set_worker_id(w[0]);
  c.add_block_names("W0");
  c.add_block_shapes(5);
  c.add_block_shapes(-1);
  ASSERT_TRUE(coord_->UploadWeightsChunk(c).ok());
  EXPECT_EQ(coord_->FinishWeightsUpload(w[0], job).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Job(job).has_weights());
  // Upload again, in three chunks, one out of order.
  ASSERT_TRUE(coord_->UploadWeightsChunk(c).ok());
  v1::WeightsChunk c2;
  c2.set_worker_id(w[0]);
  c2.set_job_id(job);
  c2.set_total(5);
  c2.set_offset(3);
  c2.set_data(bytes.substr(12));
  EXPECT_EQ(coord_->UploadWeightsChunk(c2).code(), absl::StatusCode::kFailedPrecondition);
  c2.set_offset(2);
  c2.set_data(bytes.substr(8, 4));
  ASSERT_TRUE(coord_->UploadWeightsChunk(c2).ok());
  c2.set_offset(3);
  c2.set_data(bytes.substr(12, 7));
  EXPECT_EQ(coord_->UploadWeightsChunk(c2).code(), absl::StatusCode::kInvalidArgument);
  c2.set_data(bytes.substr(12));
  ASSERT_TRUE(coord_->UploadWeightsChunk(c2).ok());
  EXPECT_TRUE(coord_->FinishWeightsUpload(w[0], job).ok());
  EXPECT_TRUE(Job(job).has_weights());

  absl::StatusOr<std::shared_ptr<const FinalWeights>> got = coord_->GetWeights(job);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->total, 5);
  EXPECT_EQ((*got)->data, bytes);
  EXPECT_EQ((*got)->block_names, std::vector<std::string>{"W0"});
  EXPECT_EQ((*got)->block_shapes, (std::vector<int64_t>{5, -1}));
  v1::WeightsChunk out = MakeWeightsChunk(**got, 0, 2);
  EXPECT_EQ(out.data(), bytes.substr(0, 8));
  EXPECT_EQ(out.block_names_size(), 1);
  out = MakeWeightsChunk(**got, 4, 2);
  EXPECT_EQ(out.offset(), 4);
  EXPECT_EQ(out.total(), 5);
  EXPECT_EQ(out.data(), bytes.substr(16));
  EXPECT_EQ(out.block_names_size(), 0);

  // Weights are kept for one job only: a second job's upload evicts them.
  ASSERT_TRUE(Done(job, 0, w[0], true, Hash(1)).ok());
  ASSERT_TRUE(Done(job, 1, w[1], true, Hash(1)).ok());
  EXPECT_TRUE(Job(job).has_weights());
  Beat(w[0]);
  Beat(w[1]);
  const uint64_t job2 = Submit(Spec(1));
  Beat(w[0], job2);
  v1::WeightsChunk only;
  only.set_worker_id(w[0]);
  only.set_job_id(job2);
  only.set_total(1);
  only.set_data(bytes.substr(0, 4));
  ASSERT_TRUE(coord_->UploadWeightsChunk(only).ok());
  EXPECT_TRUE(Job(job2).has_weights());
  EXPECT_FALSE(Job(job).has_weights());
  EXPECT_EQ(coord_->GetWeights(job).status().code(), absl::StatusCode::kFailedPrecondition);
  // The snapshot handed out earlier stays valid.
  EXPECT_EQ((*got)->data, bytes);
  EXPECT_EQ(coord_->GetWeights(99).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, EvalAndTotalStepsAreRecorded) {
  std::vector<std::string> w;
  for (int i = 1; i <= 2; ++i) w.push_back(Register(i));
  v1::JobSpec spec = Spec(2);
  spec.set_steps(0);
  spec.set_epochs(3);
  const uint64_t job = Submit(spec);
  EXPECT_EQ(Job(job).total_steps(), 0);
  v1::ReportStepRequest req;
  req.set_worker_id(w[0]);
  req.set_job_id(job);
  req.set_rank(0);
  req.set_step(0);
  req.set_epoch(0);
  req.set_weights_hash(Hash(1));
  req.set_total_steps(750);
  ASSERT_TRUE(coord_->ReportStep(req).ok());
  EXPECT_EQ(Job(job).total_steps(), 750);
  v1::ReportEvalRequest eval;
  eval.set_worker_id(w[1]);
  eval.set_job_id(job);
  eval.set_rank(1);
  eval.set_test_accuracy(0.875);
  eval.set_test_loss(0.25);
  ASSERT_TRUE(coord_->ReportEval(eval).ok());
  EXPECT_DOUBLE_EQ(Job(job).test_accuracy(), 0.875);
  EXPECT_DOUBLE_EQ(Job(job).test_loss(), 0.25);
  eval.set_rank(0);
  EXPECT_EQ(coord_->ReportEval(eval).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, RankHeartbeatAgeUsesClock) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  clock_.Advance(absl::Milliseconds(1500));
  Beat(w[0], job);
  clock_.Advance(absl::Milliseconds(500));
  const v1::JobStatus st = Job(job);
  EXPECT_DOUBLE_EQ(st.ranks(0).last_heartbeat_age_s(), 0.5);
  EXPECT_DOUBLE_EQ(st.ranks(1).last_heartbeat_age_s(), 2.0);
  EXPECT_DOUBLE_EQ(st.submitted_unix_s(), 1000.0);
  EXPECT_DOUBLE_EQ(st.started_unix_s(), 1000.0);
  EXPECT_DOUBLE_EQ(st.finished_unix_s(), 0.0);
}


}  // namespace
}  // namespace testing_coordinator
}  // namespace lockstep
