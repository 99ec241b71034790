#include "server/coordinator.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::string Hash(int i) { return absl::StrFormat("%032x", i); }

std::string Addr(int i) { return absl::StrCat("10.0.0.", i, ":5000"); }

// Worker i's raw-TCP data address (the same host as Addr(i)).
std::string DataAddr(int i) { return absl::StrCat("10.0.0.", i, ":6000"); }

v1::JobSpec Spec(int k, v1::SyncMode mode = v1::RING,
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
                    const std::string& on_divergence = "") {
    for (int i = 1; i <= k; ++i) workers->push_back(Register(i));
    v1::JobSpec spec = Spec(k);
    spec.set_on_divergence(on_divergence);
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

TEST_F(CoordinatorTest, RegisterAssignsIdsInOrderAndHeartbeatInterval) {
  v1::RegisterWorkerRequest req;
  req.set_address(Addr(1));
  absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->worker_id(), "w-1");
  EXPECT_EQ(r->heartbeat_interval_ms(), 200);
  EXPECT_EQ(r->lost_after_ms(), 3000);  // the options' lost_after
  EXPECT_EQ(Register(2), "w-2");
  EXPECT_EQ(Register(3), "w-3");
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 3);
  EXPECT_EQ(list.workers(2).worker_id(), "w-3");
  EXPECT_EQ(list.workers(2).address(), Addr(3));
  EXPECT_EQ(list.workers(2).hostname(), "host3");
  EXPECT_EQ(list.workers(2).state(), v1::IDLE);

  req.set_address("");
  EXPECT_EQ(coord_->RegisterWorker(req).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, AWorkersBlasKernelsAreListedAndOverlongOnesRefusedNamingTheField) {
  v1::RegisterWorkerRequest req;
  req.set_address(Addr(1));
  req.set_blas_core("Prescott");
  req.set_blas_advice("restart with OPENBLAS_CORETYPE=Cooperlake");
  ASSERT_TRUE(coord_->RegisterWorker(req).ok());
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).blas_core(), "Prescott");
  EXPECT_EQ(list.workers(0).blas_advice(), "restart with OPENBLAS_CORETYPE=Cooperlake");

  req.set_address(Addr(2));
  req.set_blas_core(std::string(65, 'x'));
  absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "blas_core: 65 bytes, expected at most 64");
  req.set_blas_core("Haswell");
  req.set_blas_advice(std::string(513, 'x'));
  r = coord_->RegisterWorker(req);
  EXPECT_EQ(r.status().message(), "blas_advice: 513 bytes, expected at most 512");
  EXPECT_EQ(coord_->ListWorkers().workers_size(), 1);  // nothing registered
}

TEST_F(CoordinatorTest, AddressWithoutHostGetsTheCallersIp) {
  v1::RegisterWorkerRequest req;
  req.set_address(":7071");
  req.set_data_address(":7072");
  req.set_hostname("vm");
  absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(req, "10.77.0.3");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->address(), "10.77.0.3:7071");
  EXPECT_EQ(r->data_address(), "10.77.0.3:7072");
  // A second host with the same host name and ports is another worker.
  req.set_pid(2);
  r = coord_->RegisterWorker(req, "[fd00::4]");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->address(), "[fd00::4]:7071");
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 2);
  EXPECT_EQ(list.workers(0).address(), "10.77.0.3:7071");
  EXPECT_EQ(list.workers(0).data_address(), "10.77.0.3:7072");
  EXPECT_EQ(list.workers(1).address(), "[fd00::4]:7071");
  EXPECT_EQ(list.workers(1).data_address(), "[fd00::4]:7072");

  // Without a caller address there is nothing to fill in: named, refused.
  r = coord_->RegisterWorker(req, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "address: \":7071\" has no host and the coordinator cannot see the caller's IP "
            "address; start the worker with --advertise=HOST");
  EXPECT_EQ(coord_->ListWorkers().workers_size(), 2);
}

TEST_F(CoordinatorTest, AnotherLiveWorkersAddressIsRefusedNamingBoth) {
  v1::RegisterWorkerRequest first;
  first.set_address("vm:7071");
  first.set_hostname("vm");
  first.set_pid(100);
  absl::StatusOr<v1::RegisterWorkerReply> w1 = coord_->RegisterWorker(first);
  ASSERT_TRUE(w1.ok());  // w-1
  clock_.Advance(absl::Milliseconds(500));
  v1::RegisterWorkerRequest second = first;
  second.set_pid(200);
  absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(second);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(r.status().message(),
            "address vm:7071 is already registered by live worker w-1 (host vm, pid 100, last "
            "heartbeat 0.5 s ago); refusing the worker on host vm, pid 200 that claims it too. "
            "Give each worker its own address (--advertise=HOST, or leave --advertise unset on "
            "a wildcard --listen so the coordinator uses the caller's IP address); a restarted "
            "worker is accepted once the old one is LOST");
  // Never swapped: w-1 keeps its id and heartbeats.
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).worker_id(), "w-1");
  EXPECT_FALSE(Beat("w-1").reregister());

  // The same process registering again (it lost its id) replaces itself,
  // with its token (Coordinator::RegisterWorker).
  r = coord_->RegisterWorker(first, "", w1->worker_token());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id(), "w-2");
  EXPECT_TRUE(Beat("w-1").reregister());

  // Once the holder is LOST, a restarted process (new pid) takes the address.
  clock_.Advance(absl::Seconds(4));
  coord_->Tick();
  ASSERT_EQ(coord_->ListWorkers().workers(0).state(), v1::LOST);
  r = coord_->RegisterWorker(second);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id(), "w-3");
  list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).worker_id(), "w-3");
}

TEST_F(CoordinatorTest, HeartbeatFromUnknownWorkerAsksToReregister) {
  EXPECT_TRUE(Beat("w-9").reregister());
  EXPECT_TRUE(Beat("bogus").reregister());
  const std::string w = Register(1);
  v1::HeartbeatReply r = Beat(w);
  EXPECT_FALSE(r.reregister());
  EXPECT_FALSE(r.has_assignment());
  EXPECT_FALSE(r.stop_job());
}

// A coordinator restarted without --state_dir numbers ids from w-1 again:
// the first worker to register again takes w-1 while another process may
// still heartbeat as its old w-1. That heartbeat names another process
// (pid, hostname), so it is told to register again (daemon_ops_test saw the
// old w-1 accepted as the new one's and never registered, 2026-12-02).
TEST_F(CoordinatorTest, HeartbeatFromAnotherProcessHoldingTheIdAsksToReregister) {
  v1::RegisterWorkerRequest reg;
  reg.set_address(Addr(1));
  reg.set_data_address(DataAddr(1));
  reg.set_hostname("host1");
  reg.set_pid(4242);
  absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(reg);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->worker_id(), "w-1");
  auto beat = [&](int64_t pid, const std::string& host) {
    v1::HeartbeatRequest req;
    req.set_worker_id("w-1");
    req.set_pid(pid);
    req.set_hostname(host);
    absl::StatusOr<v1::HeartbeatReply> b = coord_->Heartbeat(req);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() && b->reregister();
  };
  EXPECT_FALSE(beat(4242, "host1"));  // the process that registered
  EXPECT_TRUE(beat(4243, "host1"));   // another process, same host
  EXPECT_TRUE(beat(4242, "host2"));   // same pid on another host
  EXPECT_FALSE(beat(0, ""));          // an older worker: not checked
  // The registration is untouched: its own process still beats as w-1.
  EXPECT_FALSE(beat(4242, "host1"));
  ASSERT_EQ(coord_->ListWorkers().workers_size(), 1);
}

TEST_F(CoordinatorTest, GroupKeysDifferAcrossCoordinatorStartsThatReuseJobIds) {
  // Two coordinators started a millisecond apart both number jobs from 1; their
  // job 1 must not share a wire key, and the later start's is larger.
  std::vector<uint64_t> keys;
  for (int start = 0; start < 2; ++start) {
    clock_.Set(absl::FromUnixSeconds(1700000000 + 86400) + absl::Milliseconds(start));
    Reset(DefaultOptions());
    const std::string w = Register(1);
    const uint64_t job = Submit(Spec(1));
    ASSERT_EQ(job, 1u);
    v1::HeartbeatReply reply = Beat(w);
    ASSERT_TRUE(reply.has_assignment());
    EXPECT_EQ(reply.assignment().group_key() & 0xfffffu, 1u);
    EXPECT_EQ(reply.assignment().group_key() >> 63, 0u);  // bit 63: the shape round's
    keys.push_back(reply.assignment().group_key());
  }
  EXPECT_EQ(keys[0], (uint64_t{86400000} << 20) | 1);
  EXPECT_EQ(keys[1], (uint64_t{86400001} << 20) | 1);
  // An explicit incarnation wins.
  CoordinatorOptions o = DefaultOptions();
  o.incarnation = 77;
  Reset(o);
  const std::string w = Register(1);
  Submit(Spec(1));
  EXPECT_EQ(Beat(w).assignment().group_key(), (uint64_t{77} << 20) | 1);
}

TEST_F(CoordinatorTest, AssignmentDeliveryRanksAndRingOrder) {
  std::vector<std::string> w;
  for (int i = 1; i <= 3; ++i) w.push_back(Register(i));
  const uint64_t job = Submit(Spec(4));
  EXPECT_EQ(job, 1u);
  EXPECT_EQ(Job(job).state(), v1::PENDING);
  EXPECT_FALSE(Beat(w[0]).has_assignment());
  w.push_back(Register(4));
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  ASSERT_EQ(st.ranks_size(), 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(st.ranks(r).worker_id(), w[r]);
    EXPECT_EQ(st.ranks(r).address(), Addr(r + 1));
    EXPECT_EQ(WorkerState(w[r]), v1::BUSY);
    v1::HeartbeatReply reply = Beat(w[r]);
    ASSERT_TRUE(reply.has_assignment()) << r;
    const v1::Assignment& a = reply.assignment();
    EXPECT_EQ(a.job_id(), job);
    // The fake clock (unix 1000 s) predates the incarnation epoch: 1.
    EXPECT_EQ(a.group_key(), (uint64_t{1} << 20) | job);
    EXPECT_EQ(a.rank(), r);
    EXPECT_EQ(a.spec().model(), "mlp:8");
    ASSERT_EQ(a.peer_addresses_size(), 4);
    for (int p = 0; p < 4; ++p) EXPECT_EQ(a.peer_addresses(p), Addr(p + 1));
    EXPECT_EQ(a.ps_addresses_size(), 0);  // ring mode
    // Re-sent until acknowledged, then never again.
    EXPECT_TRUE(Beat(w[r]).has_assignment());
    v1::HeartbeatReply running = Beat(w[r], job);
    EXPECT_FALSE(running.stop_job());
    EXPECT_FALSE(running.has_assignment());
  }
}

TEST_F(CoordinatorTest, DataAddressesAreListedAndAssignedInRingOrder) {
  std::vector<std::string> w;
  for (int i = 1; i <= 3; ++i) w.push_back(Register(i));
  const v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(list.workers(i).data_address(), DataAddr(i + 1));
  const uint64_t job = Submit(Spec(3, v1::RING, v1::TCP));
  const v1::JobStatus st = Job(job);
  ASSERT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.spec().peer_transport(), v1::TCP);
  ASSERT_EQ(st.ranks_size(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st.ranks(r).address(), Addr(r + 1));
    EXPECT_EQ(st.ranks(r).data_address(), DataAddr(r + 1));
    v1::HeartbeatReply reply = Beat(w[r]);
    ASSERT_TRUE(reply.has_assignment()) << r;
    const v1::Assignment& a = reply.assignment();
    EXPECT_EQ(a.rank(), r);
    EXPECT_EQ(a.spec().peer_transport(), v1::TCP);
    ASSERT_EQ(a.peer_addresses_size(), 3);
    ASSERT_EQ(a.data_addresses_size(), 3);
    for (int p = 0; p < 3; ++p) {
      EXPECT_EQ(a.peer_addresses(p), Addr(p + 1));
      EXPECT_EQ(a.data_addresses(p), DataAddr(p + 1));
    }
  }
}

TEST_F(CoordinatorTest, GrpcJobRunsOnWorkersWithoutDataAddress) {
  Register(1);
  Register(2, /*with_data=*/false);
  const uint64_t job = Submit(Spec(2));  // GRPC: the default
  ASSERT_EQ(Job(job).state(), v1::RUNNING);
  EXPECT_EQ(Job(job).ranks(1).data_address(), "");
  v1::HeartbeatReply reply = Beat("w-2");
  ASSERT_TRUE(reply.has_assignment());
  EXPECT_EQ(reply.assignment().spec().peer_transport(), v1::GRPC);
  // One entry per rank all the same; "" for the worker that has none.
  ASSERT_EQ(reply.assignment().data_addresses_size(), 2);
  EXPECT_EQ(reply.assignment().data_addresses(0), DataAddr(1));
  EXPECT_EQ(reply.assignment().data_addresses(1), "");
}

TEST_F(CoordinatorTest, TcpJobOnWorkerWithoutDataAddressFailsNamingIt) {
  const std::string two_missing =
      "spec.peer_transport: TCP needs every worker's data address; workers "
      "w-2 (10.0.0.2:5000), w-3 (10.0.0.3:5000) have none (a lockstep-worker without a "
      "TCP data port; upgrade it or submit with --peer_transport=grpc)";
  Register(1);
  Register(2, /*with_data=*/false);
  Register(3, /*with_data=*/false);
  const uint64_t tcp = Submit(Spec(3, v1::RING, v1::TCP));
  const v1::JobStatus st = Job(tcp);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(), two_missing);
  EXPECT_EQ(st.ranks_size(), 0);
  // Nobody was bound: every worker is IDLE and gets no assignment.
  for (const char* w : {"w-1", "w-2", "w-3"}) {
    EXPECT_EQ(WorkerState(w), v1::IDLE) << w;
    EXPECT_FALSE(Beat(w).has_assignment()) << w;
  }
  // A PENDING tcp job that fails when it would start lets the next one run.
  const uint64_t big = Submit(Spec(4, v1::RING, v1::TCP));
  const uint64_t next = Submit(Spec(2));
  EXPECT_EQ(Job(big).state(), v1::PENDING);
  EXPECT_EQ(Job(next).state(), v1::PENDING);  // strict FIFO
  Register(4);
  EXPECT_EQ(Job(big).state(), v1::FAILED);
  EXPECT_EQ(Job(big).reason(), two_missing);
  ASSERT_EQ(Job(next).state(), v1::RUNNING);
  EXPECT_EQ(Job(next).ranks(0).worker_id(), "w-1");
  EXPECT_EQ(Job(next).ranks(1).worker_id(), "w-2");
  // Idle now: w-3 (none) and w-4. One worker without one is named alone.
  const uint64_t one = Submit(Spec(2, v1::RING, v1::TCP));
  EXPECT_EQ(Job(one).state(), v1::FAILED);
  EXPECT_EQ(Job(one).reason(),
            "spec.peer_transport: TCP needs every worker's data address; worker "
            "w-3 (10.0.0.3:5000) has none (a lockstep-worker without a TCP data port; "
            "upgrade it or submit with --peer_transport=grpc)");
  // The same workers run a ps job: it has no ring peers.
  const uint64_t ps = Submit(Spec(2, v1::PS, v1::TCP));
  EXPECT_EQ(Job(ps).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, SchedulerPicksLowestIdsNumerically) {
  for (int i = 1; i <= 10; ++i) Register(i);
  const uint64_t big = Submit(Spec(8));  // w-1 .. w-8
  EXPECT_EQ(Job(big).ranks(7).worker_id(), "w-8");
  const uint64_t small = Submit(Spec(1));  // w-9 < w-10 by number
  const v1::JobStatus st = Job(small);
  ASSERT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.ranks(0).worker_id(), "w-9");
  EXPECT_EQ(WorkerState("w-10"), v1::IDLE);
}

TEST_F(CoordinatorTest, PendingJobsStartInFifoOrder) {
  Register(1);
  Register(2);
  const uint64_t first = Submit(Spec(3));
  const uint64_t second = Submit(Spec(1));
  // Strict FIFO: the K=1 job waits behind the K=3 job although it would fit.
  EXPECT_EQ(Job(first).state(), v1::PENDING);
  EXPECT_EQ(Job(second).state(), v1::PENDING);
  coord_->Tick();
  EXPECT_EQ(Job(second).state(), v1::PENDING);
  Register(3);
  EXPECT_EQ(Job(first).state(), v1::RUNNING);
  EXPECT_EQ(Job(second).state(), v1::PENDING);
  Register(4);
  EXPECT_EQ(Job(second).state(), v1::RUNNING);
  EXPECT_EQ(Job(second).ranks(0).worker_id(), "w-4");
}

TEST_F(CoordinatorTest, NoWaitFailsWithIdleWorkerList) {
  Register(1);
  Register(2);
  absl::StatusOr<v1::SubmitJobReply> r = SubmitRaw(Spec(4), /*no_wait=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "job needs 4 idle workers, 2 are idle (w-1, w-2)");
  EXPECT_EQ(coord_->ListJobs().jobs_size(), 0);  // nothing created
  r = SubmitRaw(Spec(2), /*no_wait=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_id(), 1u);
  EXPECT_EQ(r->state(), v1::RUNNING);
  r = SubmitRaw(Spec(1), /*no_wait=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "job needs 1 idle worker, 0 are idle");
}

TEST_F(CoordinatorTest, LostWorkerFailsItsJob) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  clock_.Advance(absl::Seconds(2));
  Beat(w[0], job);
  clock_.Advance(absl::Seconds(1));  // w-2 silent for exactly 3 s: not yet lost
  coord_->Tick();
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
  EXPECT_EQ(WorkerState(w[1]), v1::BUSY);
  clock_.Advance(absl::Milliseconds(200));
  coord_->Tick();
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_EQ(st.reason(),
            "worker w-2 (rank 1, host host2, 10.0.0.2:5000) lost: no heartbeat for 3.2s");
  EXPECT_EQ(WorkerState(w[1]), v1::LOST);
  EXPECT_EQ(WorkerState(w[0]), v1::BUSY);
  // The survivor is told to stop, then becomes idle.
  EXPECT_TRUE(Beat(w[0], job).stop_job());
  EXPECT_EQ(WorkerState(w[0]), v1::BUSY);
  Beat(w[0]);
  EXPECT_EQ(WorkerState(w[0]), v1::IDLE);
  // The lost worker comes back: told to stop its job, then idle again.
  EXPECT_TRUE(Beat(w[1], job).stop_job());
  EXPECT_EQ(WorkerState(w[1]), v1::BUSY);
  Beat(w[1]);
  EXPECT_EQ(WorkerState(w[1]), v1::IDLE);
}

TEST_F(CoordinatorTest, StepsWithMatchingHashesAreChecked) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(7), 1.0, 1).ok());
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(7), 2.0, 1).ok());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.checked_steps(), 0);
  EXPECT_EQ(st.step(), 0);
  EXPECT_EQ(st.ranks(0).step(), 1);
  EXPECT_EQ(st.ranks(2).step(), 0);
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 2, w[2], 0, Hash(7), 3.0, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stop());
  st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.checked_steps(), 1);
  EXPECT_EQ(st.mismatched_steps(), 0);
  EXPECT_EQ(st.step(), 1);
  EXPECT_EQ(st.total_steps(), 10);
  EXPECT_DOUBLE_EQ(st.loss(), (1.0 + 2.0 + 3.0 * 2) / 4);  // examples-weighted
  EXPECT_DOUBLE_EQ(st.examples_per_second(), 4.0 / 2.0);
  EXPECT_FALSE(st.out_of_sync());
  for (const v1::RankStatus& rs : st.ranks()) {
    EXPECT_TRUE(rs.in_sync());
    EXPECT_EQ(rs.last_hash(), Hash(7));
  }
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checked_steps(), 1);
  EXPECT_EQ(h->first_mismatch_step(), -1);
  ASSERT_EQ(h->checks_size(), 1);
  EXPECT_EQ(h->checks(0).step(), 0);
  EXPECT_TRUE(h->checks(0).all_match());
  EXPECT_EQ(h->checks(0).majority_hash(), Hash(7));
  EXPECT_EQ(h->checks(0).differing_ranks_size(), 0);
  ASSERT_EQ(h->checks(0).rank_hashes_size(), 3);
  EXPECT_EQ(h->checks(0).rank_hashes(2), Hash(7));

  // Second step: throughput counts the steps after the first, over the time
  // since the first completed (start-up excluded).
  clock_.Advance(absl::Seconds(2));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Step(job, r, w[r], 1, Hash(8), 0.5, 4).ok());
  st = Job(job);
  EXPECT_EQ(st.checked_steps(), 2);
  EXPECT_EQ(st.step(), 2);
  EXPECT_DOUBLE_EQ(st.loss(), 0.5);
  EXPECT_DOUBLE_EQ(st.examples_per_second(), 12.0 / 2.0);
}

// ReportSteps (issue 9: a worker sends two steps' reports per call): the
// reports count as that many ReportStep calls, in order; a mismatch in the
// batch's first step fails the job naming that step and stops the batch
// there; a batch that is empty or too long is refused naming `reports`.
TEST_F(CoordinatorTest, StepReportBatchesActAsReportsInOrder) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w, "halt");
  auto report = [&](int rank, int64_t step, const std::string& hash) {
    v1::ReportStepRequest req;
    req.set_worker_id(w[rank]);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(hash);
    req.set_loss(1.0);
    req.set_examples(8);
    return req;
  };
  v1::StepReports batch;
  *batch.add_reports() = report(0, 0, Hash(1));
  *batch.add_reports() = report(0, 1, Hash(2));
  absl::StatusOr<v1::ReportStepReply> r = coord_->ReportSteps(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stop());
  EXPECT_EQ(Job(job).ranks(0).step(), 2);  // steps 0 and 1 reported
  // Rank 1: step 0 matches, step 1 is checked next.
  batch.Clear();
  *batch.add_reports() = report(1, 0, Hash(1));
  *batch.add_reports() = report(1, 1, Hash(2));
  r = coord_->ReportSteps(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stop());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.checked_steps(), 2);
  EXPECT_EQ(st.step(), 2);
  EXPECT_EQ(st.mismatched_steps(), 0);
  // A bad report names its step (and changes nothing).
  batch.Clear();
  *batch.add_reports() = report(0, 2, "xyz");
  r = coord_->ReportSteps(batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("report of step 2: weights_hash: expected 32 hex"),
            std::string::npos)
      << r.status();
  // Steps 2 and 3: rank 1 differs at step 2; its batch stops there.
  batch.Clear();
  *batch.add_reports() = report(0, 2, Hash(3));
  *batch.add_reports() = report(0, 3, Hash(4));
  ASSERT_TRUE(coord_->ReportSteps(batch).ok());
  batch.Clear();
  *batch.add_reports() = report(1, 2, Hash(9));
  *batch.add_reports() = report(1, 3, Hash(4));
  r = coord_->ReportSteps(batch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stop());
  st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_NE(st.reason().find("replicas diverged at step 2: "), std::string::npos) << st.reason();
  EXPECT_EQ(st.ranks(1).step(), 3);  // step 3's report was not looked at
  // Bounds.
  batch.Clear();
  r = coord_->ReportSteps(batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("reports: expected 1 to 8 step reports, got 0"),
            std::string::npos)
      << r.status();
  for (int i = 0; i < 9; ++i) *batch.add_reports() = report(0, 10 + i, Hash(1));
  EXPECT_EQ(coord_->ReportSteps(batch).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, DivergedRankFailsJobAndIsNamed) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w, "halt");
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Step(job, r, w[r], 0, Hash(1)).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 1, Hash(2)).ok());
  ASSERT_TRUE(Step(job, 1, w[1], 1, Hash(2)).ok());
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 2, w[2], 1, Hash(3));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stop());  // the reporter learns at once
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::FAILED);
  EXPECT_TRUE(st.out_of_sync());
  // No block hashes in these reports: the block is "weights".
  EXPECT_EQ(st.reason(),
            "replicas diverged at step 1: rank 2 differs from the majority in block weights");
  EXPECT_EQ(st.last_divergence(), "step 1: rank 2 differs from the majority in block weights");
  EXPECT_EQ(st.checked_steps(), 2);
  EXPECT_EQ(st.mismatched_steps(), 1);
  EXPECT_TRUE(st.ranks(0).in_sync());
  EXPECT_FALSE(st.ranks(2).in_sync());
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->first_mismatch_step(), 1);
  ASSERT_EQ(h->checks_size(), 2);
  const v1::SyncCheck& c = h->checks(1);
  EXPECT_FALSE(c.all_match());
  ASSERT_EQ(c.differing_ranks_size(), 1);
  EXPECT_EQ(c.differing_ranks(0), 2);
  EXPECT_EQ(c.rank_hashes(2), Hash(3));
  EXPECT_EQ(c.rank_hashes(0), Hash(2));
  // Every further report / heartbeat says stop.
  r = Step(job, 0, w[0], 2, Hash(4));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stop());
  EXPECT_EQ(r->reason(), absl::StrCat("job 1 is FAILED: ", st.reason()));
  EXPECT_TRUE(Beat(w[1], job).stop_job());
}

// K = 2 and the two hashes differ: there is no majority, so neither rank
// is blamed alone (issue 10: the tie used to blame rank 1 whichever had
// drifted) and both are out of sync; repair (the default) cannot copy from
// a majority, so the job fails.
TEST_F(CoordinatorTest, TwoRanksThatDifferHaveNoMajority) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(9)).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(5)).ok());
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.reason(),
            "replicas diverged at step 0: ranks 0 and 1 differ, no majority (first differing "
            "block weights): on_divergence=repair has no majority to copy from and no checkpoint "
            "to resolve from (the job writes none: set --checkpoint_dir and "
            "--checkpoint_every_steps)");
  EXPECT_FALSE(st.ranks(0).in_sync());
  EXPECT_FALSE(st.ranks(1).in_sync());
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->checks(0).no_majority());
}

// K = 2, no majority, in a job that writes checkpoints every 2 steps: the
// job keeps running (the ranks roll back to the last checkpoint before it in
// the next step's combine); the next check must say they did and match,
// and counts as a repair. A next check without the rollback fails the job.
TEST_F(CoordinatorTest, NoMajorityWithCheckpointsAwaitsTheRollback) {
  for (bool rolled_back : {true, false}) {
    SCOPED_TRACE(rolled_back);
    std::vector<std::string> w;
    const int base = rolled_back ? 0 : 2;
    for (int i = 1; i <= 2; ++i) w.push_back(Register(base + i));
    v1::JobSpec spec = Spec(2);
    spec.set_checkpoint_dir("/tmp/lockstep-ck");
    spec.set_checkpoint_every_steps(2);
    const uint64_t job = Submit(spec);
    for (const std::string& worker : w) {
      EXPECT_TRUE(Beat(worker).has_assignment());
      Beat(worker, job);
    }
    for (int t = 0; t < 3; ++t) {
      for (int r = 0; r < 2; ++r) ASSERT_TRUE(Step(job, r, w[r], t, Hash(1 + t)).ok());
    }
    ASSERT_TRUE(Step(job, 0, w[0], 3, Hash(5)).ok());
    absl::StatusOr<v1::ReportStepReply> r = Step(job, 1, w[1], 3, Hash(6));
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->stop());
    v1::JobStatus st = Job(job);
    EXPECT_EQ(st.state(), v1::RUNNING);
    EXPECT_FALSE(st.ranks(0).in_sync());
    EXPECT_EQ(st.last_divergence(),
              "step 3: ranks 0 and 1 differ, no majority (first differing block weights)");
    for (int rank = 0; rank < 2; ++rank) {
      v1::ReportStepRequest req;
      req.set_worker_id(w[rank]);
      req.set_job_id(job);
      req.set_rank(rank);
      req.set_step(4);
      req.set_weights_hash(Hash(7));
      req.set_examples(8);
      req.set_rolled_back(rolled_back);
      req.set_rolled_back_to(rolled_back ? 2 : 0);
      req.set_rolled_back_at(rolled_back ? 4 : 0);
      ASSERT_TRUE(coord_->ReportStep(req).ok());
    }
    st = Job(job);
    absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->checks(3).note(),
              "divergence: ranks 0 and 1 differ, no majority (first differing block weights); "
              "resolving from the last checkpoint");
    if (rolled_back) {
      EXPECT_EQ(st.state(), v1::RUNNING);
      EXPECT_EQ(st.repairs(), 1);
      EXPECT_FALSE(st.out_of_sync());
      EXPECT_TRUE(st.ranks(0).in_sync() && st.ranks(1).in_sync());
      EXPECT_EQ(h->checks(4).note(),
                "rolled back in the combine of step 4: no majority, every rank reloaded the "
                "checkpoint of step 2 and computed steps 2 to 3 again");
    } else {
      EXPECT_EQ(st.state(), v1::FAILED);
      EXPECT_EQ(st.reason(),
                "replicas diverged at step 3: ranks 0 and 1 differ, no majority (first differing "
                "block weights); the ranks were to roll back to a checkpoint but reported step 4 "
                "without one");
    }
  }
}

// Repair (the default) with a majority: the drifted rank keeps running,
// every reply announces the repair boundary (6 steps on), the checks in
// between await it, and the first matching check at or after it records
// the repair; the job goes on and ends SUCCEEDED.
TEST_F(CoordinatorTest, ADriftedRankIsRepairedFromTheMajority) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(3, &w);  // Spec(k): enough steps for the boundary
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Step(job, r, w[r], 0, Hash(1)).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 1, Hash(2)).ok());
  ASSERT_TRUE(Step(job, 2, w[2], 1, Hash(2)).ok());
  absl::StatusOr<v1::ReportStepReply> r = Step(job, 1, w[1], 1, Hash(3));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stop());
  EXPECT_EQ(r->repair_step(), 7);
  EXPECT_EQ(r->repair_source(), 0);
  ASSERT_EQ(r->repair_ranks_size(), 1);
  EXPECT_EQ(r->repair_ranks(0), 1);
  for (int64_t t = 2; t < 7; ++t) {
    for (int rank = 0; rank < 3; ++rank) {
      r = Step(job, rank, w[rank], t, rank == 1 ? Hash(100 + t) : Hash(10 + t));
      ASSERT_TRUE(r.ok());
      EXPECT_FALSE(r->stop()) << r->reason();
      EXPECT_EQ(r->repair_step(), 7);
    }
  }
  // A retried report (a duplicate) still announces the pending repair: the
  // worker reads a reply without one as "no repair pending".
  r = Step(job, 1, w[1], 6, Hash(106));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->repair_step(), 7);
  EXPECT_EQ(r->repair_source(), 0);
  for (int rank = 0; rank < 3; ++rank) ASSERT_TRUE(Step(job, rank, w[rank], 7, Hash(17)).ok());
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.repairs(), 1);
  EXPECT_FALSE(st.out_of_sync());
  EXPECT_TRUE(st.ranks(1).in_sync());
  r = Step(job, 0, w[0], 8, Hash(18));
  EXPECT_EQ(r->repair_step(), 0);  // done: no longer announced
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checks(1).note(),
            "divergence: rank 1 differs from the majority in block weights; repair at step 7 "
            "from rank 0");
  EXPECT_EQ(h->checks(4).note(), "awaiting repair at step 7");
  EXPECT_EQ(h->checks(7).note(),
            "repaired: rank 1 copied rank 0's state at step 7 (divergence found at step 1)");
}

TEST_F(CoordinatorTest, DuplicateReportStepIsIgnored) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(1), 1.0).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(1), 1.0).ok());
  ASSERT_TRUE(Step(job, 0, w[0], 0, Hash(6), 9.0).ok());  // first report wins
  EXPECT_EQ(Job(job).checked_steps(), 0);
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(1), 1.0).ok());
  ASSERT_TRUE(Step(job, 1, w[1], 0, Hash(1), 1.0).ok());
  const v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::RUNNING);
  EXPECT_EQ(st.checked_steps(), 1);
  EXPECT_EQ(st.mismatched_steps(), 0);
  EXPECT_DOUBLE_EQ(st.loss(), 1.0);
  absl::StatusOr<v1::SyncHistory> h = coord_->GetSyncHistory(job, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checks_size(), 1);
}

TEST_F(CoordinatorTest, ReportStepValidatesSender) {
  std::vector<std::string> w;
  const uint64_t job = StartJob(2, &w);
  absl::StatusOr<v1::ReportStepReply> r = Step(42, 0, w[0], 0, Hash(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "job 42 not found");
  r = Step(job, 1, w[0], 0, Hash(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "worker w-1 is not rank 1 of job 1 (rank 1 is w-2)");
  r = Step(job, 2, w[0], 0, Hash(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "rank: expected in [0, 2) for job 1, got 2");
  r = Step(job, 0, w[0], 0, "not-a-hash");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("weights_hash"), absl::string_view::npos);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
}

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
            "worker w-2 (rank 1, 10.0.0.2:5000) re-registered as w-3: it restarted and lost its "
            "part of the job");
  EXPECT_TRUE(Beat("w-2").reregister());
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 2);
  EXPECT_EQ(list.workers(1).worker_id(), "w-3");
  EXPECT_EQ(list.workers(1).state(), v1::IDLE);
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
  EXPECT_EQ(st.reason(), "worker w-2 (rank 1, 10.0.0.2:5000) left: shutting down (SIGTERM)");

  // No reason given; a long one is cut to 256 bytes.
  Beat(w[0]);
  Register(2);
  Register(3);
  const uint64_t second = Submit(Spec(2));
  ASSERT_EQ(Job(second).state(), v1::RUNNING);
  EXPECT_EQ(Leave(coord_.get(), w[0], "").failed_job_id(), second);
  EXPECT_EQ(Job(second).reason(), "worker w-1 (rank 0, 10.0.0.1:5000) left: it deregistered");
  const uint64_t third = Submit(Spec(1));
  ASSERT_EQ(Job(third).state(), v1::RUNNING);
  const std::string rank0 = Job(third).ranks(0).worker_id();
  EXPECT_EQ(Leave(coord_.get(), rank0, std::string(1000, 'x')).failed_job_id(), third);
  EXPECT_EQ(rank0, "w-4");
  EXPECT_EQ(Job(third).reason(),
            "worker w-4 (rank 0, 10.0.0.3:5000) left: " + std::string(256, 'x'));
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

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

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
}  // namespace lockstep
