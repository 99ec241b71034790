// Coordinator: registration, heartbeats, assignments and scheduling, a
// lost worker (server/coordinator_test_fixture.h).
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

// A registration at "vm:7071" on host vm by process `pid`, with an
// instance secret of 32 `secret` bytes (none when secret is 0).
v1::RegisterWorkerRequest VmRequest(int64_t pid, char secret = 0) {
  v1::RegisterWorkerRequest r;
  r.set_address("vm:7071");
  r.set_hostname("vm");
  r.set_pid(pid);
  if (secret != 0) r.set_instance_secret(std::string(32, secret));
  return r;
}

TEST_F(CoordinatorTest, AnotherLiveWorkersAddressIsRefusedNamingBoth) {
  v1::RegisterWorkerRequest first = VmRequest(100);
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

// A RegisterWorker whose reply was lost is repeated by the same process
// (RegisterWorkerRequest.instance_secret): it gets the registration it has,
// with the job it may have been given meanwhile, instead of ALREADY_EXISTS
// until that registration is LOST (and a job failed for want of a process).
TEST_F(CoordinatorTest, ARepeatedRegistrationOfTheSameProcessGetsItsRegistrationBack) {
  v1::RegisterWorkerRequest first = VmRequest(100, 's');
  first.set_data_address("vm:7072");
  absl::StatusOr<v1::RegisterWorkerReply> w1 = coord_->RegisterWorker(first);
  ASSERT_TRUE(w1.ok()) << w1.status();
  ASSERT_EQ(w1->worker_id(), "w-1");
  // The reply is lost; meanwhile w-1 is given a job.
  const uint64_t job = Submit(Spec(1));
  clock_.Advance(absl::Seconds(2));  // close to lost_after (3 s)
  // The repeat, with no token (the worker never saw the reply).
  absl::StatusOr<v1::RegisterWorkerReply> again = coord_->RegisterWorker(first);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->worker_id(), "w-1");
  EXPECT_EQ(again->worker_token(), w1->worker_token());
  EXPECT_EQ(again->address(), "vm:7071");
  EXPECT_EQ(again->data_address(), "vm:7072");
  EXPECT_EQ(again->heartbeat_interval_ms(), w1->heartbeat_interval_ms());
  EXPECT_EQ(again->lost_after_ms(), w1->lost_after_ms());
  EXPECT_TRUE(coord_->CheckWorkerToken("w-1", again->worker_token()).ok());
  // Nothing else changed: one worker, its job still running and still its.
  ASSERT_EQ(coord_->ListWorkers().workers_size(), 1);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
  v1::HeartbeatReply beat = Beat("w-1");
  EXPECT_FALSE(beat.reregister());
  ASSERT_TRUE(beat.has_assignment());
  EXPECT_EQ(beat.assignment().job_id(), job);
  // The repeat counted as a sign of life: 2 s later (4 s after the first
  // registration) w-1 is not LOST.
  clock_.Advance(absl::Seconds(2));
  coord_->Tick();
  EXPECT_NE(WorkerState("w-1"), v1::LOST);

  // Another secret (another process claiming host, pid and address), a
  // changed data address, or no secret at all is not a repeat: refused as
  // before while w-1 is live, and w-1 and its job are untouched.
  v1::RegisterWorkerRequest other = first;
  other.set_instance_secret(std::string(32, 't'));
  EXPECT_EQ(coord_->RegisterWorker(other).status().code(), absl::StatusCode::kAlreadyExists);
  other = first;
  other.set_data_address("vm:7073");
  EXPECT_EQ(coord_->RegisterWorker(other).status().code(), absl::StatusCode::kAlreadyExists);
  other = first;
  other.clear_instance_secret();
  EXPECT_EQ(coord_->RegisterWorker(other).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_EQ(coord_->ListWorkers().workers_size(), 1);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);

  // An oversized secret is refused naming the field.
  other = first;
  other.set_instance_secret(std::string(65, 's'));
  absl::StatusOr<v1::RegisterWorkerReply> big = coord_->RegisterWorker(other);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(big.status().message(), "instance_secret: 65 bytes, expected at most 64");

  // Once w-1 is LOST the same secret makes a new registration (the job's
  // lost-worker policy has run; the old one is not revived).
  clock_.Advance(absl::Seconds(4));
  coord_->Tick();
  ASSERT_EQ(WorkerState("w-1"), v1::LOST);
  absl::StatusOr<v1::RegisterWorkerReply> later = coord_->RegisterWorker(first);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->worker_id(), "w-2");
  EXPECT_NE(later->worker_token(), w1->worker_token());
}

// A worker cut off long enough to be LOST comes back to find another
// worker-role caller registered at its address (claiming its host and pid,
// or not). Its instance secret proves it held the address first: it takes
// the address back at once, and the usurper's job fails naming both. A third
// process cannot do the same, nor the usurper take it back again.
TEST_F(CoordinatorTest, AProcessWhoseLostAddressWasTakenTakesItBack) {
  const v1::RegisterWorkerRequest real = VmRequest(100, 'r');
  absl::StatusOr<v1::RegisterWorkerReply> w1 = coord_->RegisterWorker(real);
  ASSERT_TRUE(w1.ok()) << w1.status();
  clock_.Advance(absl::Seconds(4));
  coord_->Tick();
  ASSERT_EQ(WorkerState("w-1"), v1::LOST);
  const v1::RegisterWorkerRequest usurper = VmRequest(666, 'u');
  absl::StatusOr<v1::RegisterWorkerReply> w2 = coord_->RegisterWorker(usurper);
  ASSERT_TRUE(w2.ok()) << w2.status();
  ASSERT_EQ(w2->worker_id(), "w-2");
  const uint64_t job = Submit(Spec(1));
  ASSERT_EQ(Job(job).state(), v1::RUNNING);

  // A third process (another secret) is refused while w-2 is live.
  const v1::RegisterWorkerRequest third = VmRequest(100, 't');
  EXPECT_EQ(coord_->RegisterWorker(third).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_EQ(Job(job).state(), v1::RUNNING);

  // The real process, with its old (now useless) token and its secret.
  absl::StatusOr<v1::RegisterWorkerReply> back =
      coord_->RegisterWorker(real, "", w1->worker_token());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->worker_id(), "w-3");
  v1::WorkerList list = coord_->ListWorkers();
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).worker_id(), "w-3");
  const v1::JobStatus failed = Job(job);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.reason(),
              ::testing::HasSubstr("worker w-2 (rank 0, host vm, vm:7071) lost its address to "
                                   "w-3, the process that held it before w-2 did (it proved so)"));
  EXPECT_TRUE(Beat("w-2").reregister());

  // The usurper cannot take it back in turn (w-3 displaced a live
  // registration, not a LOST one), with its secret or its old token.
  EXPECT_EQ(coord_->RegisterWorker(usurper).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(coord_->RegisterWorker(usurper, "", w2->worker_token()).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(coord_->ListWorkers().workers(0).worker_id(), "w-3");
}

// The right to take an address back stays with the process that held it
// first: a usurper that went LOST before the real process came back (or a
// third process after it) cannot use it to evict the real one.
TEST_F(CoordinatorTest, OnlyTheFirstHolderOfAnAddressMayTakeItBack) {
  const v1::RegisterWorkerRequest real = VmRequest(100, 'r');
  const v1::RegisterWorkerRequest usurper = VmRequest(666, 'u');
  const v1::RegisterWorkerRequest third = VmRequest(777, 't');
  auto lose_all = [&] {
    clock_.Advance(absl::Seconds(4));
    coord_->Tick();
  };
  ASSERT_TRUE(coord_->RegisterWorker(real).ok());     // w-1
  lose_all();
  ASSERT_TRUE(coord_->RegisterWorker(usurper).ok());  // w-2 displaces w-1
  lose_all();
  // The real process comes back the ordinary way (w-2 is LOST) ...
  absl::StatusOr<v1::RegisterWorkerReply> back = coord_->RegisterWorker(real);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->worker_id(), "w-3");
  const uint64_t job = Submit(Spec(1));
  ASSERT_EQ(Job(job).state(), v1::RUNNING);
  // ... and the usurper cannot take the address from it.
  EXPECT_EQ(coord_->RegisterWorker(usurper).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(coord_->ListWorkers().workers(0).worker_id(), "w-3");
  EXPECT_EQ(Job(job).state(), v1::RUNNING);

  // A chain: the real process LOST, the usurper takes the address and goes
  // LOST, a third process takes it: the real one may still take it back,
  // the usurper may not.
  lose_all();
  ASSERT_TRUE(coord_->RegisterWorker(usurper).ok());  // w-4 displaces w-3 (real)
  lose_all();
  ASSERT_TRUE(coord_->RegisterWorker(third).ok());  // w-5: the right passes on
  EXPECT_EQ(coord_->RegisterWorker(usurper).status().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<v1::RegisterWorkerReply> again = coord_->RegisterWorker(real);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->worker_id(), "w-6");
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

}  // namespace
}  // namespace testing_coordinator
}  // namespace lockstep
