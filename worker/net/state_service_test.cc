#include "worker/net/state_service.h"

#include <atomic>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/train/replica.h"
#include "common/train/replica_state.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::unique_ptr<Replica> Make(const std::string& model, int64_t dim, uint64_t seed) {
  TrainSpec spec;
  spec.model = model;
  spec.seed = seed;
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.9f;
  spec.lr.base_lr = 0.1f;
  auto r = Replica::Create(spec, dim, 3);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

struct Server {
  explicit Server(grpc::Service* service) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service);
    server = b.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~Server() { Stop(); }
  void Stop() {
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now());
    server.reset();
  }
  int port = 0;
  std::string address;
  std::unique_ptr<grpc::Server> server;
};

FetchStateOptions Options(uint64_t group, int64_t step, int64_t bytes, absl::Duration within) {
  FetchStateOptions o;
  o.group = group;
  o.step = step;
  o.expected_bytes = bytes;
  o.deadline = absl::Now() + within;
  o.requester = "rank 1 (test)";
  return o;
}

// A model of 1,050,002 parameters + as many momentum slots: 8.4 MB, nine
// chunks, the last one short (not a multiple of the chunk size).
TEST(StateService, FetchesALargeStateInChunks) {
  auto source = Make("mlp:350", 3000, 1);
  auto receiver = Make("mlp:350", 3000, 2);
  const int64_t bytes = ExpectedStateBytes(*receiver);
  ASSERT_GT(bytes, 8 * kStateChunkBytes);
  ASSERT_NE(bytes % kStateChunkBytes, 0);
  StateBoard board;
  StateServiceImpl service(&board);
  Server server(&service);
  board.Publish(42, 17, EncodeReplicaState(*source, 17));
  const absl::Time t0 = absl::Now();
  auto got = FetchReplicaState(server.address, Options(42, 17, bytes, absl::Seconds(20)));
  ASSERT_TRUE(got.ok()) << got.status();
  auto next = RestoreReplicaState(*got, receiver.get());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 17);
  EXPECT_EQ(ReplicaIdentity(*receiver), ReplicaIdentity(*source));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

TEST(StateService, WaitsForTheBoundaryThenFetches) {
  auto source = Make("softmax", 7, 1);
  StateBoard board;
  StateServiceImpl service(&board);
  Server server(&service);
  absl::StatusOr<std::string> got;
  std::thread fetcher([&] {
    got = FetchReplicaState(server.address,
                            Options(5, 3, ExpectedStateBytes(*source), absl::Seconds(20)));
  });
  // The peer has not reached step 3 yet: the fetcher is told NOT_FOUND and
  // asks again; publish once it has been refused at least once.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (service.misses() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_GT(service.misses(), 0);
  board.Publish(5, 2, "wrong step");
  board.Publish(5, 3, EncodeReplicaState(*source, 3));
  fetcher.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, EncodeReplicaState(*source, 3));
}

TEST(StateService, NeverPublishedEndsAtTheDeadline) {
  StateBoard board;
  StateServiceImpl service(&board);
  Server server(&service);
  board.Publish(5, 2, "other");
  const absl::Time t0 = absl::Now();
  auto got = FetchReplicaState(server.address, Options(5, 3, 100, absl::Milliseconds(300)));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("published: steps 2"), absl::string_view::npos)
      << got.status();
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(StateService, ASizeThatDoesNotFitTheJobIsRefused) {
  auto source = Make("mlp:4", 5, 1);
  auto receiver = Make("mlp:5", 5, 1);
  StateBoard board;
  StateServiceImpl service(&board);
  Server server(&service);
  board.Publish(1, 0, EncodeReplicaState(*source, 0));
  auto got = FetchReplicaState(server.address,
                               Options(1, 0, ExpectedStateBytes(*receiver), absl::Seconds(10)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_NE(got.status().message().find(absl::StrCat("offers ", ExpectedStateBytes(*source))),
            absl::string_view::npos)
      << got.status();
}

TEST(StateService, NoDeadlineIsAnError) {
  FetchStateOptions o;
  EXPECT_EQ(FetchReplicaState("127.0.0.1:1", o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StateService, APeerThatNeverListensEndsAtTheDeadline) {
  const absl::Time t0 = absl::Now();
  // Port 1 on loopback: connection refused, retried until the deadline.
  auto got = FetchReplicaState("127.0.0.1:1", Options(1, 0, 100, absl::Milliseconds(500)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

// A peer that sends the first chunk and then stalls (hangs, or is frozen):
// the fetch ends at its deadline, saying how far it got.
class StallingService final : public v1::ReplicaState::CallbackService {
 public:
  class Reactor final : public grpc::ServerWriteReactor<v1::StateChunk> {
   public:
    Reactor(StallingService* s) : s_(s) {
      chunk_.set_total_bytes(s->total);
      chunk_.set_offset(0);
      chunk_.set_data(std::string(1000, 'x'));
      StartWrite(&chunk_);
    }
    void OnWriteDone(bool) override { s_->sent.Notify(); }  // and never writes again
    void OnCancel() override { Finish(grpc::Status::CANCELLED); }
    void OnDone() override { delete this; }

   private:
    StallingService* s_;
    v1::StateChunk chunk_;
  };
  grpc::ServerWriteReactor<v1::StateChunk>* FetchState(grpc::CallbackServerContext*,
                                                       const v1::FetchStateRequest*) override {
    return new Reactor(this);
  }
  int64_t total = 5000;
  absl::Notification sent;
};

TEST(StateService, APeerThatStallsMidTransferEndsAtTheDeadline) {
  StallingService service;
  Server server(&service);
  const absl::Time t0 = absl::Now();
  auto got = FetchReplicaState(server.address, Options(1, 0, 5000, absl::Milliseconds(500)));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("1000 of 5000 bytes"), absl::string_view::npos)
      << got.status();
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(StateService, APeerThatDiesMidTransferFailsAtOnce) {
  StallingService service;
  auto server = std::make_unique<Server>(&service);
  absl::StatusOr<std::string> got;
  absl::Time t_stop;
  std::thread fetcher([&] {
    got = FetchReplicaState(server->address, Options(1, 0, 5000, absl::Seconds(30)));
  });
  ASSERT_TRUE(service.sent.WaitForNotificationWithTimeout(absl::Seconds(20)));
  t_stop = absl::Now();
  server->Stop();  // the peer goes away with the transfer half done
  fetcher.join();
  EXPECT_FALSE(got.ok());
  EXPECT_NE(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find(server->address), absl::string_view::npos)
      << got.status();
  EXPECT_LT(absl::Now() - t_stop, absl::Seconds(5));
}

}  // namespace
}  // namespace lockstep
