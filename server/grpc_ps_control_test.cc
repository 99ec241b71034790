// GrpcPsControl against a real ps service and TCP data plane in process
// (plain-text gRPC on 127.0.0.1, OS-chosen ports), the plane in the mode a
// TLS lockstep-server runs it (secrets only from the coordinator).
#include "server/grpc_ps_control.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/time/clock.h"
#include "common/net/data_auth.h"
#include "common/psnet/ps_tcp_server.h"
#include "server/ps/dual_ps_test_util.h"

namespace lockstep {
namespace {

// The ps side: DualPs with the plane in the mode of a TLS lockstep-server.
PsTcpServerOptions FromCoordinator() {
  PsTcpServerOptions o;
  o.secrets_from_coordinator = true;
  return o;
}

class GrpcPsControlTest : public ::testing::Test {
 protected:
  // A worker's DataAddress registration, as worker_daemon_job.cc makes it.
  grpc::Status WorkerRegisters(uint64_t job, const std::string& secret, absl::Duration wait) {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait));
    v1::DataAddressRequest req;
    req.set_job(job);
    req.set_data_plane_secret(secret);
    v1::DataAddressReply reply;
    return stub->DataAddress(&ctx, req, &reply);
  }

  DualPs ps_{FromCoordinator()};
  PsShardRegistry& registry_ = ps_.registry;
  const std::string& address_ = ps_.address;
  // Declared last, so destroyed first: before the server it may be calling.
  std::unique_ptr<GrpcPsControl> control_ = std::make_unique<GrpcPsControl>(
      [](const std::string& a) {
        return grpc::CreateChannel(a, grpc::InsecureChannelCredentials());
      },
      nullptr);
};

// A worker that asks before the coordinator's secret arrived waits for it;
// a worker certificate's own secret never fixes a job key.
TEST_F(GrpcPsControlTest, WorkersWaitForTheCoordinatorsSecretAndMustMatchIt) {
  const std::string secret = dataauth::RandomSecret();
  const std::string bogus = dataauth::RandomSecret();
  const uint64_t key = 7, shape = 7 | (uint64_t{1} << 63);
  // A stranger claims the key first: refused at its deadline, nothing kept.
  grpc::Status early = WorkerRegisters(key, bogus, absl::Milliseconds(200));
  EXPECT_EQ(early.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << early.error_message();
  grpc::Status waiting;
  std::thread worker([&] { waiting = WorkerRegisters(key, secret, absl::Seconds(20)); });
  control_->StartKeys({address_}, {PsKeyStart{key, secret}, PsKeyStart{shape, secret}});
  worker.join();
  EXPECT_TRUE(waiting.ok()) << waiting.error_message();
  ASSERT_TRUE(control_->WaitIdle(absl::Now() + absl::Seconds(20)));
  EXPECT_EQ(control_->delivered(), 1);
  EXPECT_TRUE(WorkerRegisters(shape, secret, absl::Seconds(5)).ok());
  // Now that the coordinator set it, another secret is refused at once.
  grpc::Status wrong = WorkerRegisters(key, bogus, absl::Seconds(20));
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(wrong.error_message().find("not the data-plane secret the coordinator set"),
            std::string::npos)
      << wrong.error_message();
}

// The coordinator's forget drops the job key's shards and its secret.
TEST_F(GrpcPsControlTest, ForgetDropsTheShardsAndTheSecret) {
  const std::string secret = dataauth::RandomSecret();
  control_->StartKeys({address_}, {PsKeyStart{9, secret}});
  ASSERT_TRUE(registry_.GetShard(9, 0, 2, 16).ok());
  ASSERT_TRUE(registry_.GetShard(10, 0, 2, 16).ok());
  ASSERT_TRUE(control_->WaitIdle(absl::Now() + absl::Seconds(20)));
  EXPECT_TRUE(WorkerRegisters(9, secret, absl::Seconds(5)).ok());
  EXPECT_EQ(registry_.num_jobs(), 2);
  control_->Forget({address_}, {9});
  ASSERT_TRUE(control_->WaitIdle(absl::Now() + absl::Seconds(20)));
  EXPECT_EQ(registry_.num_jobs(), 1);  // job 10 stays
  EXPECT_EQ(WorkerRegisters(9, secret, absl::Milliseconds(200)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(control_->delivered(), 2);
  EXPECT_EQ(control_->failed(), 0);
}

// A shard that cannot be reached is tried kTries times, then counted failed;
// the next message still goes out.
TEST_F(GrpcPsControlTest, AnUnreachableShardIsCountedAndTheRestGoOn) {
  const std::string secret = dataauth::RandomSecret();
  control_->StartKeys({"127.0.0.1:1", address_}, {PsKeyStart{11, secret}});
  ASSERT_TRUE(control_->WaitIdle(absl::Now() + absl::Seconds(60)));
  EXPECT_EQ(control_->failed(), 1);
  EXPECT_EQ(control_->delivered(), 1);
  EXPECT_TRUE(WorkerRegisters(11, secret, absl::Seconds(5)).ok());
}

// Control checks the whole request before applying any of it.
TEST_F(GrpcPsControlTest, ControlRefusesMalformedRequestsWhole) {
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  auto call = [&](const v1::PsControlRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::PsControlReply reply;
    return stub->Control(&ctx, req, &reply);
  };
  v1::PsControlRequest req;
  v1::JobSecret* good = req.add_secrets();
  good->set_job(12);
  good->set_data_plane_secret(dataauth::RandomSecret());
  v1::JobSecret* bad = req.add_secrets();
  bad->set_job(13);
  bad->set_data_plane_secret("short");
  grpc::Status s = call(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("job 13: data_plane_secret has 5 bytes, expected 32"),
            std::string::npos)
      << s.error_message();
  // Job 12's secret was not applied either.
  EXPECT_EQ(WorkerRegisters(12, good->data_plane_secret(), absl::Milliseconds(200)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  v1::PsControlRequest many;
  for (int i = 0; i <= PsService::kMaxControlEntries; ++i) many.add_forget_jobs(i);
  s = call(many);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("expected at most 256"), std::string::npos) << s.error_message();
}

// Each shard has its own lane: one that accepts connections but never
// answers (every call runs to its 5 s deadline, 4 tries) does not delay
// another shard's messages.
TEST_F(GrpcPsControlTest, AShardThatDoesNotAnswerDelaysNoOther) {
  const int hung = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(hung, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(hung, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(hung, 16), 0);  // never accepted: the handshake never ends
  socklen_t len = sizeof(sa);
  ASSERT_EQ(getsockname(hung, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const std::string hung_address = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  const std::string secret = dataauth::RandomSecret();
  control_->StartKeys({hung_address, address_}, {PsKeyStart{15, secret, 2, 2}});
  // The healthy shard has it well within a worker's 10 s wait.
  const absl::Time start = absl::Now();
  EXPECT_TRUE(WorkerRegisters(15, secret, absl::Seconds(4)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  control_.reset();  // ends the hung call by its deadline
  close(hung);
}

// A lockstep-server creates only the keys its coordinator started, with the
// job's K and S (--keys_from_coordinator, the default): a request for any
// other key waits for the coordinator's word, then is NOT_FOUND; a request
// naming another K or a shard index past S is INVALID_ARGUMENT; a forgotten
// key is gone.
TEST(GrpcPsControlKeysTest, AShardCreatesOnlyTheKeysItsCoordinatorStarted) {
  DualPs ps({}, /*keys_from_coordinator=*/true);
  GrpcPsControl control(
      [](const std::string& a) { return grpc::CreateChannel(a, grpc::InsecureChannelCredentials()); },
      nullptr);
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials()));
  auto push = [&](uint64_t job, int shard, int k, absl::Duration wait) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait));
    v1::PushRequest req;
    req.set_job(job);
    req.set_shard(shard);
    req.set_num_workers(k);
    req.set_count(1);
    req.set_shard_len(4);
    req.set_grad_sum(std::string(16, '\0'));
    v1::PushReply reply;
    return stub->Push(&ctx, req, &reply);
  };
  grpc::Status s = push(21, 0, 2, absl::Milliseconds(600));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("ps: job 21 shard 0: job key 21 was not started on this "
                                   "server by its coordinator"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(ps.registry.num_jobs(), 0);
  // A push that arrives before the coordinator's word waits for it.
  grpc::Status early;
  std::thread worker([&] { early = push(21, 0, 2, absl::Seconds(20)); });
  control.StartKeys({ps.address}, {PsKeyStart{21, "", 2, 1}});
  worker.join();
  EXPECT_TRUE(early.ok()) << early.error_message();
  ASSERT_TRUE(control.WaitIdle(absl::Now() + absl::Seconds(20)));
  EXPECT_EQ(ps.registry.num_jobs(), 1);
  control.StartKeys({ps.address}, {PsKeyStart{22, "", 2, 1}});
  ASSERT_TRUE(control.WaitIdle(absl::Now() + absl::Seconds(20)));
  s = push(22, 0, 3, absl::Seconds(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("num_workers is 3, expected 2 (the job's K, from its "
                                   "coordinator)"),
            std::string::npos)
      << s.error_message();
  s = push(22, 1, 2, absl::Seconds(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("shard is 1, expected 0..0 (the job's shards"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(ps.registry.num_jobs(), 1);  // neither created key 22
  // Key 21 is held: another shard index past S is refused there too.
  s = push(21, 1, 2, absl::Seconds(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  control.Forget({ps.address}, {21, 22});
  ASSERT_TRUE(control.WaitIdle(absl::Now() + absl::Seconds(20)));
  EXPECT_EQ(ps.registry.num_jobs(), 0);
  EXPECT_EQ(push(21, 0, 2, absl::Milliseconds(600)).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ps.keys.size(), 0);
  EXPECT_EQ(control.failed(), 0);
}

// An entry with neither a secret nor a shape, or a shape out of range, is
// refused whole.
TEST_F(GrpcPsControlTest, ControlRefusesAnEntryWithoutSecretOrValidShape) {
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  for (int k : {0, -1, PsShardRegistry::kMaxWorkers + 1}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::PsControlRequest req;
    v1::JobSecret* e = req.add_secrets();
    e->set_job(30);
    e->set_num_workers(k);
    e->set_num_shards(k == 0 ? 0 : 1);
    v1::PsControlReply reply;
    grpc::Status s = stub->Control(&ctx, req, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k;
    EXPECT_NE(s.error_message().find("job 30: "), std::string::npos) << s.error_message();
  }
}

}  // namespace
}  // namespace lockstep
