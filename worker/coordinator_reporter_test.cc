// GrpcReporter against an in-process fake coordinator: step reports go on
// one ReportStream per reporter, one reply per batch; a coordinator without
// the stream gets ReportSteps calls; a stream that does not answer in time
// is cancelled and the next batch goes on a new one; a restarted coordinator
// gets the kept reports again, then the next batch, on a new stream.
#include "worker/coordinator_reporter.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/grpcutil/worker_token.h"
#include "common/log.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

constexpr char kToken[] = "t0k3n";

// Records every report it receives and how; says stop once it has seen
// step `stop_at`.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  bool has_stream = true;          // false: ReportStream is UNIMPLEMENTED
  bool hang_first_stream = false;  // the first stream reads and never answers
  int64_t stop_at = 1 << 30;
  // >= 0: answers probes (StepReports.probe) with this resend_from_step;
  // -1: a coordinator without probes (records the probe's report).
  int64_t probe_from = -1;

  grpc::Status ReportSteps(grpc::ServerContext* context, const v1::StepReports* request,
                           v1::ReportStepReply* reply) override {
    absl::MutexLock l(&mu_);
    ++unary_calls_;
    return Answer(*context, *request, reply);
  }

  grpc::Status ReportStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ReportStepReply, v1::StepReports>* stream) override {
    if (!has_stream) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no ReportStream");
    bool hang;
    {
      absl::MutexLock l(&mu_);
      hang = hang_first_stream && streams_ == 0;
      ++streams_;
    }
    v1::StepReports request;
    while (stream->Read(&request)) {
      if (hang) {
        // Answers nothing; the reporter must give up and cancel.
        while (!context->IsCancelled()) {
          absl::MutexLock l(&mu_);
          mu_.AwaitWithTimeout(absl::Condition(&never_), absl::Milliseconds(20));
        }
        absl::MutexLock l(&mu_);
        ++cancelled_;
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      v1::ReportStepReply reply;
      {
        absl::MutexLock l(&mu_);
        ++stream_messages_;
        grpc::Status s = Answer(*context, request, &reply);
        if (!s.ok()) return s;
      }
      if (!stream->Write(reply)) break;
    }
    return grpc::Status::OK;
  }

  std::vector<int64_t> steps() {
    absl::MutexLock l(&mu_);
    return steps_;
  }
  // The generation of each recorded report, and of each probe's.
  std::vector<int64_t> generations() {
    absl::MutexLock l(&mu_);
    return generations_;
  }
  std::vector<int64_t> probe_generations() {
    absl::MutexLock l(&mu_);
    return probe_generations_;
  }
  int streams() {
    absl::MutexLock l(&mu_);
    return streams_;
  }
  int stream_messages() {
    absl::MutexLock l(&mu_);
    return stream_messages_;
  }
  int unary_calls() {
    absl::MutexLock l(&mu_);
    return unary_calls_;
  }
  int cancelled() {
    absl::MutexLock l(&mu_);
    return cancelled_;
  }
  int probes() {
    absl::MutexLock l(&mu_);
    return probes_;
  }

 private:
  grpc::Status Answer(const grpc::ServerContext& context, const v1::StepReports& request,
                      v1::ReportStepReply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (WorkerTokenOf(context) != kToken) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no or wrong worker token");
    }
    if (request.probe() && probe_from >= 0) {
      ++probes_;
      if (request.reports_size() > 0) {
        probe_generations_.push_back(request.reports(0).generation());
      }
      reply->set_probe_answered(true);
      reply->set_resend_from_step(probe_from);
      return grpc::Status::OK;
    }
    for (const v1::ReportStepRequest& r : request.reports()) {
      steps_.push_back(r.step());
      generations_.push_back(r.generation());
      if (r.step() >= stop_at) {
        reply->set_stop(true);
        reply->set_reason("cancelled");
      }
    }
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  bool never_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> generations_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> probe_generations_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  int stream_messages_ ABSL_GUARDED_BY(mu_) = 0;
  int unary_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  int probes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A fake coordinator on an OS-chosen (or a given) loopback port.
struct Server {
  explicit Server(FakeCoordinator* service, int want_port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", want_port),
                             grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
  }
  ~Server() { Stop(); }
  void Stop() {
    if (server == nullptr) return;
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server->Wait();
    server.reset();
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

class Reporting {
 public:
  explicit Reporting(int port, absl::Duration timeout = absl::Seconds(10),
                     int replay_reports = kReplayReports, const Logger* logger = nullptr)
      : stub_(v1::Coordinator::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                           grpc::InsecureChannelCredentials()))),
        reporter_(std::make_unique<GrpcReporter>(
            stub_.get(), timeout, "w-1", kToken, [this] { ++stops_; }, &stop_, absl::Seconds(5),
            replay_reports, logger)) {}

  // Reports steps [first, first + n) of `generation` in one batch.
  absl::StatusOr<bool> Batch(int64_t first, int n, int64_t generation = 0) {
    std::vector<v1::ReportStepRequest> reports(n);
    std::vector<const v1::ReportStepRequest*> ptrs;
    for (int i = 0; i < n; ++i) {
      reports[i].set_worker_id("w-1");
      reports[i].set_job_id(7);
      reports[i].set_step(first + i);
      reports[i].set_generation(generation);
      ptrs.push_back(&reports[i]);
    }
    v1::ReportStepReply reply;
    return reporter_->ReportStepsWithReply(ptrs, &reply);
  }
  void Destroy() { reporter_.reset(); }
  void set_stop(bool stop) { stop_.store(stop); }
  int stops() const { return stops_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> stops_{0};
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<GrpcReporter> reporter_;
};

// A logging reporter that keeps 11 answered reports, after steps 0-13
// were reported to `before` on the loopback port `port`, whose server has
// stopped since (as a killed coordinator's): its next batch opens a new
// stream there. Construct in a test; check `ok`.
struct ReplayAfterFourteenSteps {
  explicit ReplayAfterFourteenSteps(FakeCoordinator* before) {
    Server first(before);
    if (first.server == nullptr) return;
    port = first.port;
    reporting = std::make_unique<Reporting>(port, absl::Seconds(10), /*replay_reports=*/11,
                                            &logger);
    for (int64_t step = 0; step < 14; step += 2) {
      if (!reporting->Batch(step, 2).ok()) return;
    }
    ok = true;
  }  // first stops here
  std::shared_ptr<FakeClock> clock =
      std::make_shared<FakeClock>(absl::FromUnixSeconds(1796047323));
  std::shared_ptr<StringLogSink> sink = std::make_shared<StringLogSink>();
  const Logger logger{sink, clock, LogOptions{LogFormat::kText, LogLevel::kInfo}};
  int port = 0;
  std::unique_ptr<Reporting> reporting;
  bool ok = false;
};

TEST(CoordinatorReporterTest, BatchesGoOnOneStreamWithOneReplyEach) {
  FakeCoordinator fake;
  fake.stop_at = 9;
  Server server(&fake);
  ASSERT_NE(server.server, nullptr);
  Reporting r(server.port);
  for (int64_t step = 0; step < 8; step += 2) {
    absl::StatusOr<bool> stop = r.Batch(step, 2);
    ASSERT_TRUE(stop.ok()) << stop.status();
    EXPECT_FALSE(*stop);
  }
  // A single report goes on the stream too.
  ASSERT_TRUE(r.Batch(8, 1).ok());
  absl::StatusOr<bool> stop = r.Batch(9, 2);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_TRUE(*stop) << "the reply to the batch holding step 9 says stop";
  EXPECT_EQ(r.stops(), 1);
  EXPECT_EQ(fake.streams(), 1);
  EXPECT_EQ(fake.stream_messages(), 6);
  EXPECT_EQ(fake.unary_calls(), 0);
  EXPECT_EQ(fake.steps(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  // The reporter half-closes its stream; the handler ends.
  r.Destroy();
}

TEST(CoordinatorReporterTest, ACoordinatorWithoutTheStreamGetsReportSteps) {
  FakeCoordinator fake;
  fake.has_stream = false;
  Server server(&fake);
  ASSERT_NE(server.server, nullptr);
  Reporting r(server.port);
  for (int64_t step = 0; step < 6; step += 2) ASSERT_TRUE(r.Batch(step, 2).ok());
  EXPECT_EQ(fake.streams(), 0);
  EXPECT_EQ(fake.unary_calls(), 3) << "the stream is tried once, then never again";
  EXPECT_EQ(fake.steps(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(CoordinatorReporterTest, AStreamThatDoesNotAnswerIsCancelledAtTheDeadline) {
  FakeCoordinator fake;
  fake.hang_first_stream = true;
  Server server(&fake);
  ASSERT_NE(server.server, nullptr);
  Reporting r(server.port, absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  absl::StatusOr<bool> stop = r.Batch(0, 2);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(stop.status().code(), absl::StatusCode::kDeadlineExceeded) << stop.status();
  EXPECT_NE(stop.status().message().find("coordinator: ReportStream"), std::string::npos)
      << stop.status();
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(5));
  // The batch is resent on a new stream (reports are idempotent).
  stop = r.Batch(0, 2);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(fake.streams(), 2);
  EXPECT_EQ(fake.steps(), (std::vector<int64_t>{0, 1}));
  r.Destroy();
  server.Stop();
  EXPECT_EQ(fake.cancelled(), 1) << "the hung handler saw the cancel";
}

TEST(CoordinatorReporterTest, ARestartedCoordinatorGetsTheNextBatchOnANewStream) {
  FakeCoordinator before, after;
  auto first = std::make_unique<Server>(&before);
  ASSERT_NE(first->server, nullptr);
  const int port = first->port;
  Reporting r(port);
  ASSERT_TRUE(r.Batch(0, 2).ok());
  first->Stop();  // cancels the open stream, as a killed coordinator's does
  // While nothing listens, the call's error is the refusal itself (what
  // RetryWhileCoordinatorDown retries on), not "the stream ended". With
  // the job stopping, the first error is returned instead of retried.
  r.set_stop(true);
  absl::StatusOr<bool> down = r.Batch(2, 2);
  EXPECT_TRUE(CoordinatorDown(down.status())) << down.status();
  r.set_stop(false);
  // Retried (the channel reconnects with backoff) until the new one answers.
  Server second(&after, port);
  ASSERT_NE(second.server, nullptr) << "port " << port << " taken meanwhile";
  absl::StatusOr<bool> stop = r.Batch(2, 2);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(before.steps(), (std::vector<int64_t>{0, 1}));
  // The answered reports first (the restarted coordinator may not have
  // stored their checks; this one answers no probe, so the probe's report,
  // step 0, counts as the first), then the batch.
  EXPECT_EQ(after.steps(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(after.streams(), 1);
}

// The replay keeps the newest reports only, goes 8 per message, and a
// replayed reply that says stop ends the call before the batch is sent.
TEST(CoordinatorReporterTest, ANewStreamBeginsWithTheNewestKeptReports) {
  FakeCoordinator before, after, third;
  ReplayAfterFourteenSteps setup(&before);
  ASSERT_TRUE(setup.ok);
  const int port = setup.port;
  Reporting& r = *setup.reporting;
  StringLogSink* sink = setup.sink.get();
  auto second = std::make_unique<Server>(&after, port);
  ASSERT_NE(second->server, nullptr) << "port " << port << " taken meanwhile";
  ASSERT_TRUE(r.Batch(14, 1).ok());
  std::vector<int64_t> want;
  for (int64_t s = 3; s <= 14; ++s) want.push_back(s);
  EXPECT_EQ(after.steps(), want) << "steps 3-13 (the newest 11), then 14";
  EXPECT_EQ(after.stream_messages(), 4)
      << "the probe (recorded: a coordinator without probes), 10 more kept reports in 2 "
         "messages, then the batch";
  const std::string log = sink->contents();
  EXPECT_NE(log.find("resent step reports"), std::string::npos) << log;
  EXPECT_NE(log.find("reports=11 from_step=-1 kept=11"), std::string::npos) << log;
  EXPECT_NE(log.find("first_step=3"), std::string::npos) << log;
  EXPECT_NE(log.find("last_step=13"), std::string::npos) << log;
  EXPECT_NE(log.find("not_kept=3"), std::string::npos) << log;

  second->Stop();
  third.stop_at = 5;
  Server last(&third, port);
  ASSERT_NE(last.server, nullptr) << "port " << port << " taken meanwhile";
  absl::StatusOr<bool> stop = r.Batch(15, 2);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_TRUE(*stop) << "the reply to the replayed steps 5-12 says stop";
  EXPECT_EQ(r.stops(), 1);
  std::vector<int64_t> replayed;  // the probe's step 4, then 5-12
  for (int64_t s = 4; s <= 12; ++s) replayed.push_back(s);
  EXPECT_EQ(third.steps(), replayed) << "the batch (15, 16) is not sent after a stop";
}

// A coordinator that answers probes gets only the kept reports it lacks:
// after a restart those from where its database left off, after a stream
// that merely ended on a live coordinator none.
TEST(CoordinatorReporterTest, ANewStreamResendsOnlyWhatTheProbeAsksFor) {
  FakeCoordinator before, restarted, live;
  ReplayAfterFourteenSteps setup(&before);
  ASSERT_TRUE(setup.ok);
  const int port = setup.port;
  Reporting& r = *setup.reporting;
  StringLogSink* sink = setup.sink.get();
  restarted.probe_from = 9;  // its database had the checks of steps 0-8
  auto second = std::make_unique<Server>(&restarted, port);
  ASSERT_NE(second->server, nullptr) << "port " << port << " taken meanwhile";
  ASSERT_TRUE(r.Batch(14, 1).ok());
  EXPECT_EQ(restarted.probes(), 1);
  EXPECT_EQ(restarted.steps(), (std::vector<int64_t>{9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(restarted.stream_messages(), 3) << "the probe, steps 9-13, the batch";
  EXPECT_NE(sink->contents().find("reports=5 from_step=9 kept=11 first_step=3 last_step=13"),
            std::string::npos)
      << sink->contents();

  second->Stop();
  live.probe_from = 15;  // has every answered report (0-14)
  Server last(&live, port);
  ASSERT_NE(last.server, nullptr) << "port " << port << " taken meanwhile";
  ASSERT_TRUE(r.Batch(15, 2).ok());
  EXPECT_EQ(live.probes(), 1);
  EXPECT_EQ(live.steps(), (std::vector<int64_t>{15, 16})) << "nothing resent";
  EXPECT_EQ(live.stream_messages(), 2) << "the probe, the batch";
  EXPECT_NE(sink->contents().find("reports=0 from_step=15"), std::string::npos)
      << sink->contents();
}

// A job regrouped by a coordinator restart (a ps job on its own shard):
// the reporter's kept reports span two generations. The probe names the
// oldest kept report's generation (the closed one, whose late reports the
// coordinator takes: coordinator.h), and the reports from its answer go in
// the order they were answered, both generations, before the batch.
TEST(CoordinatorReporterTest, AProbeOfTheClosedGenerationResendsBothGenerationsInOrder) {
  FakeCoordinator before, restarted;
  auto first = std::make_unique<Server>(&before);
  ASSERT_NE(first->server, nullptr);
  const int port = first->port;
  Reporting r(port, absl::Seconds(10), /*replay_reports=*/11);
  for (int64_t step = 0; step < 8; step += 2) ASSERT_TRUE(r.Batch(step, 2, 0).ok());
  for (int64_t step = 8; step < 14; step += 2) ASSERT_TRUE(r.Batch(step, 2, 1).ok());
  first->Stop();
  restarted.probe_from = 6;
  Server second(&restarted, port);
  ASSERT_NE(second.server, nullptr) << "port " << port << " taken meanwhile";
  ASSERT_TRUE(r.Batch(14, 1, 1).ok());
  EXPECT_EQ(restarted.probe_generations(), (std::vector<int64_t>{0}))
      << "the probe carries the oldest kept report (step 3, generation 0)";
  EXPECT_EQ(restarted.steps(), (std::vector<int64_t>{6, 7, 8, 9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(restarted.generations(), (std::vector<int64_t>{0, 0, 1, 1, 1, 1, 1, 1, 1}));
}

// A finished job's kept reports (GrpcReporter::TakeReplay) go again in
// unary ReportSteps calls of 8, before its ReportDone; a reply that says
// stop ends them.
TEST(CoordinatorReporterTest, AFinishedJobsKeptReportsGoAgainInCallsOfEight) {
  FakeCoordinator fake;
  Server server(&fake);
  ASSERT_NE(server.server, nullptr);
  ReportReplayLog log(20);
  for (int64_t s = 0; s < 23; ++s) {
    v1::ReportStepRequest r;
    r.set_worker_id("w-1");
    r.set_job_id(7);
    r.set_step(s);
    log.Add(r);
  }
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server.port), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(ResendReports(stub.get(), kToken, log, absl::Seconds(10)).ok());
  std::vector<int64_t> want;
  for (int64_t s = 3; s < 23; ++s) want.push_back(s);
  EXPECT_EQ(fake.steps(), want);
  EXPECT_EQ(fake.unary_calls(), 3) << "20 reports, 8 per call";

  // From the first step the coordinator lacks (HeartbeatReply
  // .resend_reports_from_step): 15..22, one call.
  FakeCoordinator from;
  Server third(&from);
  ASSERT_NE(third.server, nullptr);
  auto stub3 = v1::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", third.port), grpc::InsecureChannelCredentials()));
  int sent = -1;
  ASSERT_TRUE(ResendReports(stub3.get(), kToken, log, absl::Seconds(10), 15, &sent).ok());
  EXPECT_EQ(sent, 8);
  EXPECT_EQ(from.steps(), std::vector<int64_t>(want.end() - 8, want.end()));
  EXPECT_EQ(from.unary_calls(), 1);
  ASSERT_TRUE(ResendReports(stub3.get(), kToken, log, absl::Seconds(10), 23, &sent).ok());
  EXPECT_EQ(sent, 0);
  EXPECT_EQ(from.unary_calls(), 1) << "nothing to send, no call";

  FakeCoordinator stopping;
  stopping.stop_at = 4;
  Server second(&stopping);
  ASSERT_NE(second.server, nullptr);
  auto stub2 = v1::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", second.port), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(ResendReports(stub2.get(), kToken, log, absl::Seconds(10)).ok());
  EXPECT_EQ(stopping.unary_calls(), 1) << "the first call's reply says stop";
  EXPECT_EQ(ResendReports(stub2.get(), "wrong", log, absl::Seconds(10)).code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace lockstep
