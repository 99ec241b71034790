// The worker's training log lines: which steps write one, and their fields.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "worker/blobs_for_test.h"
#include "worker/job_runner.h"

namespace lockstep {
namespace {

// Every step takes 3 s of fake time: the clock moves when the job thread
// tells the observer a step ended (before that step's log line). Step
// reports are sent on another thread, so the clock does not move there.
class ClockReporter : public JobReporter, public StepObserver {
 public:
  explicit ClockReporter(FakeClock* clock) : clock_(clock) {}
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest&) override { return false; }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }
  void OnStep(const StepTiming&) override { clock_->Advance(absl::Seconds(3)); }

 private:
  FakeClock* clock_;
};

// K = 1: combining one rank's sums is the identity.
class SoloCombiner : public GradientCombiner {
 public:
  absl::Status Combine(uint64_t, int64_t, absl::Span<float>, int64_t*, absl::Duration) override {
    return absl::OkStatus();
  }
};

TEST(JobRunnerLogTest, LinesEveryTenSecondsAtEpochEndsAndEvals) {
  const TrainTest data = Blobs(290, 40);  // batch 29: 10 steps per epoch
  auto clock = std::make_shared<FakeClock>(absl::FromUnixSeconds(1796047323));
  auto sink = std::make_shared<StringLogSink>();
  const Logger logger(sink, clock, LogOptions{LogFormat::kText, LogLevel::kInfo});
  JobRunnerOptions o;
  o.job_id = 7;
  o.rank = 0;
  o.world = 1;
  o.worker_id = "w-1";
  o.spec.set_model("mlp:8");
  o.spec.set_sync_mode(v1::RING);
  o.spec.set_num_workers(1);
  o.spec.set_global_batch(29);
  o.spec.set_steps(25);
  o.spec.set_eval_each_epoch(true);
  o.spec.mutable_lr()->set_base_lr(0.05f);
  o.logger = &logger;
  o.clock = clock.get();  // log_interval: the default 10 s
  ClockReporter reporter(clock.get());
  o.observer = &reporter;
  SoloCombiner combiner;
  JobRunner runner(o, &data, &combiner, &reporter);
  ASSERT_TRUE(runner.Run().ok());

  // After step t the clock reads start + 3(t+1) s. A line after step 0,
  // then after the first step >= 10 s after the previous line (4, 8, 13,
  // 17, 23), at every epoch's last step (9, 19, 24), each followed by
  // rank 0's eval; 29 examples per 3 s = 9.66667 examples/s throughout.
  struct Want {
    std::string time, msg;
    int step;
  };
  const std::vector<Want> want = {
      {"14:02:06", "training", 0},    {"14:02:18", "training", 4},
      {"14:02:30", "training", 8},    {"14:02:33", "epoch done", 9},
      {"14:02:33", "eval", 9},        {"14:02:45", "training", 13},
      {"14:02:57", "training", 17},   {"14:03:03", "epoch done", 19},
      {"14:03:03", "eval", 19},       {"14:03:15", "training", 23},
      {"14:03:18", "epoch done", 24}, {"14:03:18", "eval", 24},
  };
  const std::vector<std::string> lines = sink->lines();
  ASSERT_EQ(lines.size(), want.size()) << sink->contents();
  for (size_t i = 0; i < want.size(); ++i) {
    const Want& w = want[i];
    const int epoch = w.step / 10 + 1;
    std::string prefix = absl::StrCat("2026-11-30T", w.time, ".000Z INFO  worker: ", w.msg,
                                      " job=7 rank=0 worker=w-1 step=", w.step);
    if (w.msg == "eval") {
      absl::StrAppend(&prefix, " epoch=", epoch, " test_examples=40 test_accuracy=");
    } else {
      absl::StrAppend(&prefix, " steps=25 epoch=", epoch, " ex_per_s=9.66667 lr=0.05 loss=");
    }
    EXPECT_EQ(lines[i].substr(0, prefix.size()), prefix) << lines[i];
  }
}

TEST(JobRunnerLogTest, JsonLinesCarryJobAndStep) {
  const TrainTest data = Blobs(58, 0);  // no test split: no eval lines
  auto clock = std::make_shared<FakeClock>(absl::FromUnixSeconds(1796047323));
  auto sink = std::make_shared<StringLogSink>();
  const Logger logger(sink, clock, LogOptions{LogFormat::kJson, LogLevel::kInfo});
  JobRunnerOptions o;
  o.job_id = 3;
  o.worker_id = "w-2";
  o.spec.set_model("softmax");
  o.spec.set_sync_mode(v1::RING);
  o.spec.set_num_workers(1);
  o.spec.set_global_batch(29);
  o.spec.set_steps(2);
  o.spec.mutable_lr()->set_base_lr(0.1f);
  o.logger = &logger;
  o.clock = clock.get();
  ClockReporter reporter(clock.get());
  o.observer = &reporter;
  SoloCombiner combiner;
  JobRunner runner(o, &data, &combiner, &reporter);
  ASSERT_TRUE(runner.Run().ok());
  const std::vector<std::string> lines = sink->lines();
  ASSERT_EQ(lines.size(), 2u) << sink->contents();
  const std::string first =
      "{\"ts\":\"2026-11-30T14:02:06.000Z\",\"level\":\"INFO\",\"component\":\"worker\","
      "\"msg\":\"training\",\"job\":3,\"rank\":0,\"worker\":\"w-2\",\"step\":0,\"steps\":2,"
      "\"epoch\":1,\"ex_per_s\":9.66667,\"lr\":0.1,\"loss\":";
  EXPECT_EQ(lines[0].substr(0, first.size()), first);
  const std::string second =
      "{\"ts\":\"2026-11-30T14:02:09.000Z\",\"level\":\"INFO\",\"component\":\"worker\","
      "\"msg\":\"epoch done\",\"job\":3,\"rank\":0,\"worker\":\"w-2\",\"step\":1,\"steps\":2,"
      "\"epoch\":1,\"ex_per_s\":9.66667,\"lr\":0.1,\"loss\":";
  EXPECT_EQ(lines[1].substr(0, second.size()), second);
  EXPECT_EQ(lines[1].back(), '}');
}

}  // namespace
}  // namespace lockstep
