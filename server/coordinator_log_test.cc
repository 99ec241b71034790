// The coordinator's event log lines, exact, with a fake clock.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/log.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

std::string Hash(int i) { return absl::StrFormat("%032x", i); }

class CoordinatorLogTest : public ::testing::Test {
 protected:
  CoordinatorLogTest()
      : clock_(std::make_shared<FakeClock>(absl::FromUnixSeconds(1796047323))),  // 2026-11-30T14:02:03Z
        sink_(std::make_shared<StringLogSink>()),
        logger_(sink_, clock_, LogOptions{LogFormat::kText, LogLevel::kInfo}) {
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    o.logger = &logger_;
    coord_ = std::make_unique<Coordinator>(o, clock_.get());
  }

  std::string Register(int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(absl::StrCat("host", i));
    req.set_pid(100 + i);
    auto r = coord_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }

  uint64_t Submit(int k, v1::PeerTransport transport = v1::GRPC) {
    v1::SubmitJobRequest req;
    v1::JobSpec& spec = *req.mutable_spec();
    spec.set_name("t");
    spec.set_model("mlp:8");
    spec.set_sync_mode(v1::RING);
    spec.set_peer_transport(transport);
    spec.set_num_workers(k);
    spec.set_global_batch(8 * k);
    spec.mutable_lr()->set_base_lr(0.1f);
    spec.set_steps(10);
    spec.set_on_divergence("halt");
    auto r = coord_->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }

  void Step(uint64_t job, int rank, const std::string& worker, int64_t step, int hash) {
    v1::ReportStepRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_step(step);
    req.set_weights_hash(Hash(hash));
    req.set_loss(1.0);
    req.set_examples(8);
    ASSERT_TRUE(coord_->ReportStep(req).ok());
  }

  void Done(uint64_t job, int rank, const std::string& worker, int hash) {
    v1::ReportDoneRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_ok(true);
    req.set_weights_hash(Hash(hash));
    req.set_test_accuracy(0.875);
    req.set_steps(10);
    ASSERT_TRUE(coord_->ReportDone(req).ok());
  }

  std::vector<std::string> TakeLines() {
    std::vector<std::string> lines = sink_->lines();
    std::vector<std::string> fresh(lines.begin() + static_cast<long>(seen_), lines.end());
    seen_ = lines.size();
    return fresh;
  }

  std::shared_ptr<FakeClock> clock_;
  std::shared_ptr<StringLogSink> sink_;
  Logger logger_;
  std::unique_ptr<Coordinator> coord_;
  size_t seen_ = 0;
};

constexpr char kT[] = "2026-11-30T14:02:03.000Z";

TEST_F(CoordinatorLogTest, WorkersJobStartAndHashMismatchNamingRanks) {
  const std::string w1 = Register(1), w2 = Register(2), w3 = Register(3);
  EXPECT_EQ(TakeLines(),
            (std::vector<std::string>{
                absl::StrCat(kT, " INFO  coordinator: worker registered worker=w-1 "
                                 "address=10.0.0.1:5000 data_address=\"\" hostname=host1 pid=101"),
                absl::StrCat(kT, " INFO  coordinator: worker registered worker=w-2 "
                                 "address=10.0.0.2:5000 data_address=\"\" hostname=host2 pid=102"),
                absl::StrCat(kT, " INFO  coordinator: worker registered worker=w-3 "
                                 "address=10.0.0.3:5000 data_address=\"\" hostname=host3 pid=103"),
            }));
  const uint64_t job = Submit(3);
  EXPECT_EQ(TakeLines(),
            (std::vector<std::string>{
                absl::StrCat(kT, " INFO  coordinator: job submitted job=1 model=mlp:8 "
                                 "mode=ring/grpc workers=3 batch=24 name=t"),
                absl::StrCat(kT, " INFO  coordinator: job started job=1 mode=ring/grpc "
                                 "workers=w-1,w-2,w-3"),
            }));
  clock_->Advance(absl::Milliseconds(250));
  Step(job, 0, w1, 0, 7);
  Step(job, 1, w2, 0, 7);
  Step(job, 2, w3, 0, 7);
  Step(job, 0, w1, 1, 8);
  Step(job, 1, w2, 1, 9);  // rank 1 drifts at step 1
  EXPECT_TRUE(TakeLines().empty());  // steps are not logged by the coordinator
  Step(job, 2, w3, 1, 8);
  EXPECT_EQ(TakeLines(),
            (std::vector<std::string>{
                "2026-11-30T14:02:03.250Z ERROR coordinator: hash mismatch job=1 step=1 ranks=1 "
                "workers=w-2 majority_hash=" + Hash(8),
                "2026-11-30T14:02:03.250Z ERROR coordinator: job failed job=1 steps=2 "
                "reason=\"replicas diverged at step 1: rank 1 differs from the majority in "
                "block weights\"",
            }));
}

TEST_F(CoordinatorLogTest, SucceededCancelledLostAndBackInJson) {
  sink_ = std::make_shared<StringLogSink>();
  logger_ = Logger(sink_, clock_, LogOptions{LogFormat::kJson, LogLevel::kInfo});
  CoordinatorOptions o;
  o.advertise_address = "coord:7070";
  o.logger = &logger_;
  o.lost_after = absl::Seconds(3);
  coord_ = std::make_unique<Coordinator>(o, clock_.get());
  const std::string w1 = Register(1), w2 = Register(2);
  const uint64_t a = Submit(2);
  for (int s = 0; s < 10; ++s) {
    Step(a, 0, w1, s, s);
    Step(a, 1, w2, s, s);
  }
  Done(a, 0, w1, 9);
  Done(a, 1, w2, 9);
  const std::string ts = "{\"ts\":\"2026-11-30T14:02:03.000Z\",\"level\":";
  const std::string later = "{\"ts\":\"2026-11-30T14:02:06.500Z\",\"level\":";
  std::vector<std::string> lines = TakeLines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(),
            ts + "\"INFO\",\"component\":\"coordinator\",\"msg\":\"job succeeded\",\"job\":1,"
                 "\"steps\":10,\"final_hash\":\"" + Hash(9) + "\",\"test_accuracy\":0.875}");
  // The finished workers heartbeat idle; the next job waits for 3 workers
  // and is cancelled; w-2 goes silent, is lost, then comes back.
  for (const std::string& w : {w1, w2}) {
    v1::HeartbeatRequest hb;
    hb.set_worker_id(w);
    ASSERT_TRUE(coord_->Heartbeat(hb).ok());
  }
  const uint64_t b = Submit(3);
  ASSERT_TRUE(coord_->CancelJob(b).ok());
  clock_->Advance(absl::Milliseconds(3500));
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w1);
  ASSERT_TRUE(coord_->Heartbeat(hb).ok());
  coord_->Tick();
  hb.set_worker_id(w2);
  ASSERT_TRUE(coord_->Heartbeat(hb).ok());
  EXPECT_EQ(TakeLines(),
            (std::vector<std::string>{
                ts + "\"INFO\",\"component\":\"coordinator\",\"msg\":\"job submitted\",\"job\":2,"
                     "\"model\":\"mlp:8\",\"mode\":\"ring/grpc\",\"workers\":3,\"batch\":24,"
                     "\"name\":\"t\"}",
                ts + "\"INFO\",\"component\":\"coordinator\",\"msg\":\"job cancelled\",\"job\":2,"
                     "\"steps\":0,\"reason\":\"cancelled by user\"}",
                later + "\"WARN\",\"component\":\"coordinator\",\"msg\":\"worker lost\","
                        "\"worker\":\"w-2\",\"address\":\"10.0.0.2:5000\",\"silent_s\":3.5,"
                        "\"job\":0}",
                later + "\"INFO\",\"component\":\"coordinator\",\"msg\":\"worker back\","
                        "\"worker\":\"w-2\",\"address\":\"10.0.0.2:5000\",\"job\":0}",
            }));
}

}  // namespace
}  // namespace lockstep
