#include "worker/net/grpc_transport.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/collective/collective_conformance.h"
#include "common/collective/ring_allreduce.h"
#include "proto/peer.grpc.pb.h"

namespace lockstep {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// One worker: its own PeerServiceImpl on its own grpc::Server, on an
// OS-chosen loopback port.
class Node {
 public:
  // `int_args`: extra integer channel arguments of the server.
  explicit Node(const std::vector<std::pair<std::string, int>>& int_args = {})
      : service_(std::make_unique<PeerServiceImpl>()) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                       &port);
    service_->RegisterOn(b);
    for (const auto& [name, value] : int_args) b.AddChannelArgument(name, value);
    server_ = b.BuildAndStart();
    ABSL_RAW_CHECK(server_ != nullptr && port > 0, "server did not start");
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~Node() { Kill(); }

  // What a crashed worker looks like to its peers: streams finished, port
  // closed.
  void Kill() {
    absl::MutexLock l(&mu_);
    if (server_ == nullptr) return;
    service_->Shutdown();
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    server_.reset();
  }

  PeerServiceImpl* service() { return service_.get(); }
  const std::string& address() const { return address_; }

 private:
  absl::Mutex mu_;
  std::unique_ptr<PeerServiceImpl> service_;  // outlives server_
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
  std::string address_;
};

struct Cluster {
  explicit Cluster(int k, const std::vector<std::pair<std::string, int>>& server_args = {}) {
    for (int r = 0; r < k; ++r) nodes.push_back(std::make_unique<Node>(server_args));
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> a;
    for (const auto& n : nodes) a.push_back(n->address());
    return a;
  }
  std::vector<std::unique_ptr<GrpcTransport>> MakeGroup(
      uint64_t group, GrpcTransportOptions o = GrpcTransportOptions()) {
    std::vector<std::unique_ptr<GrpcTransport>> ts;
    for (size_t r = 0; r < nodes.size(); ++r) {
      auto t = GrpcTransport::Create(nodes[r]->service(), group,
                                     static_cast<int>(r), Addresses(), o);
      ABSL_RAW_CHECK(t.ok(), "GrpcTransport::Create failed");
      ts.push_back(*std::move(t));
    }
    return ts;
  }
  std::vector<std::unique_ptr<Node>> nodes;
};

std::vector<std::unique_ptr<Transport>> MakeGrpcTransports(int k) {
  auto cluster = std::make_shared<Cluster>(k);
  auto ts = cluster->MakeGroup(/*group=*/1);
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& t : ts) {
    out.push_back(std::make_unique<OwningTransport>(cluster, std::move(t)));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Grpc, TransportConformanceTest,
    ::testing::Values(TransportFactoryParam{"Grpc", MakeGrpcTransports}),
    TransportParamName);

// Runs fn(r) on k threads.
void RunRanks(int k, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Closed-form ring all-reduce on `ts`: rank r contributes r+1 everywhere.
std::vector<absl::Status> RingAllOnes(
    const std::vector<Transport*>& ts, int64_t n, int64_t step,
    absl::Duration timeout, std::vector<std::vector<float>>* bufs,
    std::vector<absl::Duration>* elapsed = nullptr) {
  const int k = static_cast<int>(ts.size());
  std::vector<absl::Status> st(k);
  bufs->assign(k, std::vector<float>(n));
  if (elapsed != nullptr) elapsed->assign(k, absl::ZeroDuration());
  RunRanks(k, [&](int r) {
    std::fill((*bufs)[r].begin(), (*bufs)[r].end(), static_cast<float>(r + 1));
    int64_t count = 1;
    AllReduceOptions o;
    o.job = 7;
    o.step = step;
    o.timeout = timeout;
    o.segment_bytes = 64 << 10;
    o.algorithm = AllReduceAlgorithm::kRing;  // many messages per call
    const absl::Time start = absl::Now();
    st[r] = RingAllReduce(*ts[r], absl::MakeSpan((*bufs)[r]), &count, o);
    if (elapsed != nullptr) (*elapsed)[r] = absl::Now() - start;
  });
  return st;
}

std::vector<Transport*> Ptrs(
    const std::vector<std::unique_ptr<GrpcTransport>>& ts) {
  std::vector<Transport*> p;
  for (const auto& t : ts) p.push_back(t.get());
  return p;
}

TEST(GrpcTransportTest, ErrorsNameThePeerRankAndAddress) {
  Cluster c(2);
  auto ts = c.MakeGroup(1);
  std::vector<uint8_t> out(4);
  absl::Status s = ts[0]->Recv(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(out),
                               absl::Now() + absl::Milliseconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()),
              StartsWith(absl::StrCat("peer rank 1 (", c.nodes[1]->address(),
                                      "): ")));
}

TEST(GrpcTransportTest, SendToAPeerThatIsDownIsUnavailable) {
  Cluster c(2);
  GrpcTransportOptions o;
  o.connect_timeout = absl::Milliseconds(300);
  auto ts = c.MakeGroup(1, o);
  const std::string dead = c.nodes[1]->address();
  c.nodes[1]->Kill();  // its port is closed now
  const absl::Time start = absl::Now();
  absl::Status s = ts[0]->Send(1, MakeKey(1, 0, 0, 0), std::vector<uint8_t>(8),
                               absl::Now() + absl::Seconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()),
              StartsWith(absl::StrCat("peer rank 1 (", dead, "): ")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// Calls `on_send(n)` before forwarding the n-th Send (0-based) to `inner`.
class TriggerTransport : public Transport {
 public:
  TriggerTransport(Transport* inner, std::function<void(int64_t)> on_send)
      : inner_(inner), on_send_(std::move(on_send)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  absl::Status Send(int to, const MessageKey& key,
                    absl::Span<const uint8_t> data,
                    absl::Time deadline) override {
    on_send_(sends_++);
    return inner_->Send(to, key, data, deadline);
  }
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    return inner_->Recv(from, key, out, deadline);
  }

 private:
  Transport* const inner_;
  std::function<void(int64_t)> on_send_;
  int64_t sends_ = 0;
};

// A worker dies in the middle of a ring all-reduce (its server and its
// transport go away after its 3rd send): nobody hangs, everyone fails with
// UNAVAILABLE or DEADLINE_EXCEEDED naming a peer within the deadline, and
// the dead rank's direct neighbours name it (rank and address).
TEST(GrpcTransportTest, WorkerDyingMidCallFailsEveryoneWithinTheDeadline) {
  for (int k : {2, 3, 4}) {
    SCOPED_TRACE(absl::StrCat("K=", k));
    Cluster c(k);
    auto ts = c.MakeGroup(1);
    const int dead = 1;
    TriggerTransport trigger(ts[dead].get(), [&](int64_t n) {
      if (n == 3) {
        c.nodes[dead]->Kill();
        ts[dead]->Shutdown();
      }
    });
    std::vector<Transport*> group = Ptrs(ts);
    group[dead] = &trigger;
    const absl::Duration timeout = absl::Seconds(3);
    std::vector<std::vector<float>> bufs;
    std::vector<absl::Duration> elapsed;
    // 1 MiB per rank in 64 KiB segments: many sends per rank.
    std::vector<absl::Status> st =
        RingAllOnes(group, 1 << 18, 0, timeout, &bufs, &elapsed);
    const std::string dead_name =
        absl::StrCat("peer rank ", dead, " (", c.nodes[dead]->address(), ")");
    for (int r = 0; r < k; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r, ": ", st[r].ToString()));
      EXPECT_FALSE(st[r].ok());
      EXPECT_LE(elapsed[r], timeout + absl::Seconds(5));
      if (r == dead) continue;
      EXPECT_THAT(st[r].code(), AnyOf(absl::StatusCode::kUnavailable,
                                      absl::StatusCode::kDeadlineExceeded));
      EXPECT_THAT(std::string(st[r].message()), HasSubstr("peer rank "));
      // The rank after the dead one receives from it.
      if (r == (dead + 1) % k) {
        EXPECT_THAT(std::string(st[r].message()), HasSubstr(dead_name));
      }
    }
  }
}

// A raw PeerService client (the generated protobuf stub, not the transport):
// checks wire compatibility and lets tests inject arbitrary messages.
class RawPeerClient {
 public:
  explicit RawPeerClient(const std::string& address)
      : stub_(lockstep::v1::PeerService::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))),
        writer_(stub_->Stream(&ctx_, &reply_)) {}

  bool Write(uint64_t group, int from, const MessageKey& k,
             const std::string& data, uint64_t seq = 0) {
    lockstep::v1::PeerMessage m;
    m.set_group(group);
    m.set_from_rank(from);
    m.set_seq(seq);
    m.set_job(k.job);
    m.set_step(k.step);
    m.set_phase(k.phase);
    m.set_chunk(k.chunk);
    m.set_data(data);
    return writer_->Write(m);
  }
  grpc::Status Finish() {
    writer_->WritesDone();
    return writer_->Finish();
  }

 private:
  grpc::ClientContext ctx_;
  lockstep::v1::PeerStreamReply reply_;
  std::unique_ptr<lockstep::v1::PeerService::Stub> stub_;
  std::unique_ptr<grpc::ClientWriter<lockstep::v1::PeerMessage>> writer_;
};

TEST(GrpcTransportTest, MessageWithAWrongKeyIsReported) {
  Cluster c(2);
  auto ts = c.MakeGroup(5);
  RawPeerClient raw(c.nodes[1]->address());
  ASSERT_TRUE(raw.Write(5, 0, MakeKey(3, 4, 1, 9), "abcd"));
  std::vector<uint8_t> out(4);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::Status s = ts[1]->Recv(0, MakeKey(3, 4, 1, 8), absl::MakeSpan(out), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("peer rank 0 (", c.nodes[0]->address())));
  EXPECT_THAT(std::string(s.message()), HasSubstr(KeyToString(MakeKey(3, 4, 1, 9))));
  EXPECT_THAT(std::string(s.message()), HasSubstr(KeyToString(MakeKey(3, 4, 1, 8))));
  // Not consumed: the right key gets it (protobuf-encoded payload intact).
  s = ts[1]->Recv(0, MakeKey(3, 4, 1, 9), absl::MakeSpan(out), deadline);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::string(out.begin(), out.end()), "abcd");
  grpc::Status fin = raw.Finish();
  EXPECT_TRUE(fin.ok()) << fin.error_message();
}

TEST(GrpcTransportTest, StreamClaimingAnotherRankMidStreamIsRejected) {
  Cluster c(3);
  auto ts = c.MakeGroup(5);
  RawPeerClient raw(c.nodes[1]->address());
  ASSERT_TRUE(raw.Write(5, 0, MakeKey(1, 0, 0, 0), "a"));
  raw.Write(5, 2, MakeKey(1, 0, 0, 1), "b");  // may fail once rejected
  grpc::Status fin = raw.Finish();
  EXPECT_EQ(fin.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << fin.error_message();
  // The first message was delivered.
  std::vector<uint8_t> out(1);
  EXPECT_TRUE(ts[1]->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(out),
                          absl::Now() + absl::Seconds(30))
                  .ok());
}

// A sender's messages may arrive on different streams in any order; the
// receiver delivers them in seq order and rejects a repeated seq.
TEST(GrpcTransportTest, MessagesAreDeliveredInSeqOrderAcrossStreams) {
  Cluster c(2);
  auto ts = c.MakeGroup(8);
  RawPeerClient late(c.nodes[1]->address()), early(c.nodes[1]->address());
  ASSERT_TRUE(late.Write(8, 0, MakeKey(1, 0, 0, 2), "two", /*seq=*/2));
  ASSERT_TRUE(late.Write(8, 0, MakeKey(1, 0, 0, 3), "three", /*seq=*/3));
  ASSERT_TRUE(early.Write(8, 0, MakeKey(1, 0, 0, 0), "zero", /*seq=*/0));
  ASSERT_TRUE(early.Write(8, 0, MakeKey(1, 0, 0, 1), "one", /*seq=*/1));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const std::vector<std::string> want = {"zero", "one", "two", "three"};
  for (int j = 0; j < 4; ++j) {
    std::vector<uint8_t> out(want[j].size());
    absl::Status s = ts[1]->Recv(0, MakeKey(1, 0, 0, j), absl::MakeSpan(out), deadline);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::string(out.begin(), out.end()), want[j]);
  }
  // seq 1 again: rejected, the stream ends with an error.
  early.Write(8, 0, MakeKey(1, 0, 0, 9), "dup", /*seq=*/1);
  grpc::Status fin = early.Finish();
  EXPECT_EQ(fin.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << fin.error_message();
  EXPECT_THAT(fin.error_message(), HasSubstr("seq 1"));
  EXPECT_TRUE(late.Finish().ok());
}

// Issue 11: "gRPC peer-stream reordering after a sequence gap" was
// unbounded: a message far ahead of the next seq was held forever. It is
// refused now, naming the peer, its seq and the expected one.
TEST(GrpcTransportTest, AMessageFarAheadOfItsPredecessorsIsRefused) {
  Cluster c(2);
  auto ts = c.MakeGroup(8);
  RawPeerClient far(c.nodes[1]->address());
  far.Write(8, 0, MakeKey(1, 0, 0, 0), "far", /*seq=*/kMaxHeldGap + 5);
  grpc::Status fin = far.Finish();
  EXPECT_EQ(fin.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << fin.error_message();
  EXPECT_THAT(fin.error_message(), HasSubstr("seq 4101 while seq 0 is the next to deliver"));
  // The link goes on: in-order messages are delivered.
  RawPeerClient ok(c.nodes[1]->address());
  ASSERT_TRUE(ok.Write(8, 0, MakeKey(1, 0, 0, 0), "zero", /*seq=*/0));
  std::vector<uint8_t> out(4);
  absl::Status s = ts[1]->Recv(0, MakeKey(1, 0, 0, 0), absl::MakeSpan(out),
                               absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(ok.Finish().ok());
}

// Issue 11: parked streams had no cap. Beyond it a stream for a group not
// attached is refused naming the cap; parked ones still resume.
TEST(GrpcTransportTest, ParkedStreamsAreCapped) {
  Cluster c(2);
  c.nodes[1]->service()->SetMaxParkedStreams(2);
  std::vector<std::unique_ptr<RawPeerClient>> raw;
  for (int i = 0; i < 2; ++i) {
    raw.push_back(std::make_unique<RawPeerClient>(c.nodes[1]->address()));
    ASSERT_TRUE(raw.back()->Write(42, 0, MakeKey(42, 0, 0, i), "p", /*seq=*/i));
  }
  ASSERT_TRUE(c.nodes[1]->service()->AwaitParked(2, absl::Now() + absl::Seconds(30)));
  RawPeerClient third(c.nodes[1]->address());
  third.Write(43, 0, MakeKey(43, 0, 0, 0), "q");
  grpc::Status fin = third.Finish();
  EXPECT_EQ(fin.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << fin.error_message();
  EXPECT_THAT(fin.error_message(), HasSubstr("2 streams are already parked"));
  EXPECT_EQ(c.nodes[1]->service()->streams_parked_now(), 2);
  auto ts = c.MakeGroup(42);
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t> out(1);
    absl::Status s = ts[1]->Recv(0, MakeKey(42, 0, 0, i), absl::MakeSpan(out),
                                 absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(c.nodes[1]->service()->streams_parked_now(), 0);
  for (auto& r : raw) EXPECT_TRUE(r->Finish().ok());
}

TEST(GrpcTransportTest, TwoConsecutiveJobsOnTheSameServices) {
  Cluster c(3);
  for (uint64_t job : {100, 101}) {
    SCOPED_TRACE(job);
    auto ts = c.MakeGroup(job);
    std::vector<std::vector<float>> bufs;
    std::vector<absl::Status> st =
        RingAllOnes(Ptrs(ts), 100003, 0, absl::Seconds(60), &bufs);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      for (float x : bufs[r]) ASSERT_EQ(x, 6.0f);
    }
  }
  // A late message for the finished job 100 is rejected by the receiver.
  RawPeerClient raw(c.nodes[0]->address());
  raw.Write(100, 1, MakeKey(100, 9, 0, 0), "late");
  grpc::Status fin = raw.Finish();
  EXPECT_EQ(fin.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << fin.error_message();
  EXPECT_THAT(fin.error_message(), HasSubstr("group 100 has finished"));
}

TEST(GrpcTransportTest, StreamForAGroupNotYetAttachedIsParkedThenDelivered) {
  Cluster c(2);
  RawPeerClient raw(c.nodes[1]->address());
  ASSERT_TRUE(raw.Write(42, 0, MakeKey(42, 0, 0, 0), "early"));
  ASSERT_TRUE(c.nodes[1]->service()->AwaitParked(1, absl::Now() + absl::Seconds(30)));
  auto ts = c.MakeGroup(42);
  std::vector<uint8_t> out(5);
  absl::Status s = ts[1]->Recv(0, MakeKey(42, 0, 0, 0), absl::MakeSpan(out),
                               absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::string(out.begin(), out.end()), "early");
  EXPECT_TRUE(raw.Finish().ok());
}

TEST(GrpcTransportTest, AttachingAGroupTwiceFails) {
  Cluster c(2);
  auto ts = c.MakeGroup(3);
  auto again = GrpcTransport::Create(c.nodes[0]->service(), 3, 0, c.Addresses());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  auto bad = GrpcTransport::Create(c.nodes[0]->service(), 4, 2, c.Addresses());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrpcTransportTest, ShutdownUnblocksAWaitingRecv) {
  Cluster c(2);
  auto ts = c.MakeGroup(1);
  absl::Status got;
  std::thread waiter([&] {
    std::vector<uint8_t> out(4);
    got = ts[0]->Recv(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(out),
                      absl::Now() + absl::Seconds(120));
  });
  const absl::Time start = absl::Now();
  ts[0]->Shutdown();
  waiter.join();
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled) << got;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // Later calls fail at once.
  EXPECT_EQ(ts[0]->Send(1, MakeKey(1, 0, 0, 0), std::vector<uint8_t>(4),
                        absl::Now() + absl::Seconds(120))
                .code(),
            absl::StatusCode::kCancelled);
}

TEST(GrpcTransportTest, PeerShutdownMakesRecvFailFastAfterQueuedMessages) {
  Cluster c(2);
  auto ts = c.MakeGroup(1);
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  ASSERT_TRUE(ts[1]->Send(0, MakeKey(1, 0, 0, 0), std::vector<uint8_t>(3, 7),
                          deadline).ok());
  ts[1]->Shutdown();  // drains, then half-closes its stream to rank 0
  std::vector<uint8_t> out(3);
  ASSERT_TRUE(ts[0]->Recv(1, MakeKey(1, 0, 0, 0), absl::MakeSpan(out), deadline).ok());
  EXPECT_EQ(out, std::vector<uint8_t>(3, 7));
  const absl::Time start = absl::Now();
  absl::Status s = ts[0]->Recv(1, MakeKey(1, 0, 0, 1), absl::MakeSpan(out), deadline);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1 ("));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// The receiver never reads (its group is not attached, so the stream is
// parked): Send fills the queue and then fails by its deadline.
TEST(GrpcTransportTest, SendBlockedByFlowControlTimesOut) {
  Cluster c(2);
  GrpcTransportOptions o;
  o.max_queued_bytes = 1 << 20;
  o.close_timeout = absl::Milliseconds(100);  // the stream never drains
  auto t0 = GrpcTransport::Create(c.nodes[0]->service(), 9, 0, c.Addresses(), o);
  ASSERT_TRUE(t0.ok());
  const std::vector<uint8_t> chunk(256 << 10, 1);
  absl::Status s;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 4096 && s.ok(); ++i) {
    s = (*t0)->Send(1, MakeKey(9, 0, 0, i), chunk,
                    absl::Now() + absl::Milliseconds(300));
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1 ("));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}


// A wait counts from the last message moved (common/collective/peer_wait.h):
// the receiver touches its job's mark per message it receives, the sender
// per message written. Rank 1 attaches only after rank 0 queued 32 MiB:
// until then its stream is parked and unread, so gRPC takes a few MiB of
// it into its buffers and flow control holds the rest (with 3 messages of
// 2 MiB, 10 of 30 runs had every write done before the attach); the writes
// that complete after the attach must touch rank 0's mark then. The
// receiving servers do not probe the bandwidth-delay product, so their
// flow-control window stays small while nothing is read.
TEST(GrpcTransportTest, MessagesMovedTouchBothSidesProgressMarks) {
  Cluster c(2, {{GRPC_ARG_HTTP2_BDP_PROBE, 0}});
  auto mark0 = std::make_shared<ProgressMark>();
  auto mark1 = std::make_shared<ProgressMark>();
  GrpcTransportOptions o0;
  o0.progress = mark0;
  o0.streams_per_peer = 1;  // one write in flight; its write-done starts the next
  o0.max_queued_bytes = 64 << 20;  // every Send queues while rank 1 is away
  GrpcTransportOptions o1;
  o1.progress = mark1;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  auto t0 = GrpcTransport::Create(c.nodes[0]->service(), 9, 0, c.Addresses(), o0);
  ASSERT_TRUE(t0.ok()) << t0.status();
  const std::vector<uint8_t> chunk(2 << 20, 5);
  constexpr int kMessages = 16;
  const int64_t before = ProgressMark::SteadyNanos();
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE((*t0)->Send(1, MakeKey(9, 0, 0, i), chunk, deadline).ok());
  }
  ASSERT_TRUE(c.nodes[1]->service()->AwaitParked(1, deadline));
  const int64_t attached = ProgressMark::SteadyNanos();
  auto t1 = GrpcTransport::Create(c.nodes[1]->service(), 9, 1, c.Addresses(), o1);
  ASSERT_TRUE(t1.ok()) << t1.status();
  std::vector<uint8_t> out(chunk.size());
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE((*t1)->Recv(0, MakeKey(9, 0, 0, i), absl::MakeSpan(out), deadline).ok()) << i;
    EXPECT_EQ(out, chunk) << i;
  }
  EXPECT_GE(mark1->last_ns(), attached);
  // The last message arrived, so the write-done of the one before ran (it
  // touched, then started the last write), and that message could not be
  // written before rank 1 read.
  EXPECT_GE(mark0->last_ns(), before);
  EXPECT_GE(mark0->last_ns(), attached) << (attached - mark0->last_ns()) / 1000 << " us";
}

}  // namespace
}  // namespace lockstep
