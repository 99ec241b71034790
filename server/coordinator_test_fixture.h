// The Coordinator test fixture shared by server/coordinator_test.cc and its
// siblings (coordinator_*_test.cc): a Coordinator on a fake clock at
// t = 1000 s, workers at 10.0.0.i, and helpers that register, heartbeat,
// submit and report as workers would. Test-only; one fixture per test.
#ifndef LOCKSTEP_SERVER_COORDINATOR_TEST_FIXTURE_H_
#define LOCKSTEP_SERVER_COORDINATOR_TEST_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace lockstep {
namespace testing_coordinator {

inline std::string Hash(int i) { return absl::StrFormat("%032x", i); }

inline std::string Addr(int i) { return absl::StrCat("10.0.0.", i, ":5000"); }

// Worker i's raw-TCP data address (the same host as Addr(i)).
inline std::string DataAddr(int i) { return absl::StrCat("10.0.0.", i, ":6000"); }

inline v1::JobSpec Spec(int k, v1::SyncMode mode = v1::RING,
                 v1::PeerTransport transport = v1::GRPC) {
  v1::JobSpec spec;
  spec.set_name("test");
  spec.set_model("mlp:8");
  spec.set_sync_mode(mode);
  spec.set_num_workers(k);
  spec.set_global_batch(8 * k);
  spec.mutable_lr()->set_base_lr(0.1f);
  spec.set_steps(10);
  spec.set_peer_transport(transport);
  return spec;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  explicit CoordinatorTest(CoordinatorOptions options = DefaultOptions())
      : clock_(absl::FromUnixSeconds(1000)),
        coord_(std::make_unique<Coordinator>(options, &clock_)) {}

  static CoordinatorOptions DefaultOptions() {
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    return o;
  }

  void Reset(const CoordinatorOptions& options) {
    coord_ = std::make_unique<Coordinator>(options, &clock_);
  }

  // Registers worker i at Addr(i) with data address DataAddr(i), or with
  // none (an older worker without a TCP data plane) when !with_data.
  absl::StatusOr<v1::RegisterWorkerReply> TryRegister(int i, bool with_data = true,
                                                      const std::string& token = "") {
    v1::RegisterWorkerRequest req;
    req.set_address(Addr(i));
    if (with_data) req.set_data_address(DataAddr(i));
    req.set_hostname(absl::StrCat("host", i));
    absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(req, "", token);
    if (r.ok()) tokens_[r->worker_id()] = r->worker_token();
    return r;
  }
  std::string Register(int i, bool with_data = true, const std::string& token = "") {
    absl::StatusOr<v1::RegisterWorkerReply> r = TryRegister(i, with_data, token);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }
  std::map<std::string, std::string> tokens_;  // by worker id: RegisterWorker's tokens

  v1::HeartbeatReply Beat(const std::string& worker, uint64_t job = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    absl::StatusOr<v1::HeartbeatReply> r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatReply();
  }

  absl::StatusOr<v1::SubmitJobReply> SubmitRaw(const v1::JobSpec& spec, bool no_wait = false) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_no_wait(no_wait);
    return coord_->SubmitJob(req);
  }

  uint64_t Submit(const v1::JobSpec& spec) {
    absl::StatusOr<v1::SubmitJobReply> r = SubmitRaw(spec);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }

  absl::StatusOr<v1::ReportStepReply> Step(uint64_t job, int rank, const std::string& worker,
                                           int64_t step, const std::string& hash,
                                           double loss = 1.0, int64_t examples = 8) {
    v1::ReportStepRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(hash);
    req.set_loss(loss);
    req.set_examples(examples);
    return coord_->ReportStep(req);
  }

  absl::Status Done(uint64_t job, int rank, const std::string& worker, bool ok,
                    const std::string& hash, const std::string& error = "",
                    double acc = 0.5) {
    v1::ReportDoneRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_ok(ok);
    req.set_error(error);
    req.set_weights_hash(hash);
    req.set_test_accuracy(acc);
    req.set_steps(10);
    return coord_->ReportDone(req);
  }

  v1::JobStatus Job(uint64_t id) {
    absl::StatusOr<v1::JobStatus> s = coord_->GetJob(id);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::JobStatus();
  }

  v1::WorkerState WorkerState(const std::string& id) {
    const v1::WorkerList list = coord_->ListWorkers();
    for (const v1::WorkerInfo& w : list.workers()) {
      if (w.worker_id() == id) return w.state();
    }
    ADD_FAILURE() << "no worker " << id;
    return v1::WORKER_STATE_UNSPECIFIED;
  }

  // Registers k workers and runs a K=k job on them, with every worker having
  // picked up (and acknowledged) its assignment. Returns the job id.
  uint64_t StartJob(int k, std::vector<std::string>* workers,
                    const std::string& on_divergence = "",
                    const std::string& on_worker_lost = "") {
    for (int i = 1; i <= k; ++i) workers->push_back(Register(i));
    v1::JobSpec spec = Spec(k);
    spec.set_on_divergence(on_divergence);
    spec.set_on_worker_lost(on_worker_lost);
    const uint64_t job = Submit(spec);
    for (const std::string& w : *workers) {
      EXPECT_TRUE(Beat(w).has_assignment());
      Beat(w, job);
    }
    EXPECT_EQ(Job(job).state(), v1::RUNNING);
    return job;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
};

}  // namespace testing_coordinator
}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATOR_TEST_FIXTURE_H_
