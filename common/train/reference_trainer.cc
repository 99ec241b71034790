#include "common/train/reference_trainer.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"

#include "common/data/sampler.h"

namespace lockstep {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

absl::StatusOr<TrainResult> TrainReference(
    const TrainSpec& spec, const Dataset& train, const Dataset& test,
    const std::function<void(const EpochReport&)>& on_epoch,
    std::optional<NonFinitePolicy> on_nonfinite, bool eval_each_epoch) {
  if (train.num_examples == 0) {
    return absl::InvalidArgumentError("dataset: the training split is empty");
  }
  auto replica_or = Replica::Create(spec, train.dim, train.num_classes);
  if (!replica_or.ok()) return replica_or.status();
  Replica& replica = **replica_or;

  GlobalBatchSampler sampler(train.num_examples, spec.global_batch, spec.seed);
  const int64_t total = TotalSteps(spec, train.num_examples);
  const int64_t per_epoch = sampler.steps_per_epoch();

  TrainResult result;
  double epoch_loss = 0, train_seconds = 0, epoch_seconds = 0;
  int64_t epoch_examples = 0, total_examples = 0;
  for (int64_t step = 0; step < total; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> batch = sampler.Batch(step);
    BatchStats s = replica.ComputeGradSum(train, batch);
    bool skip = false;
    if (on_nonfinite.has_value()) {
      const bool gradient_finite = AllFinite(replica.grad());
      const bool loss_finite = std::isfinite(replica.loss_sum());
      skip = !gradient_finite || !loss_finite;
      if (skip && *on_nonfinite == NonFinitePolicy::kFail) {
        return absl::AbortedError(absl::StrCat("non-finite ",
                                               gradient_finite ? "loss" : "gradient",
                                               " at step ", step, " (--on_nonfinite: fail)"));
      }
    }
    if (skip) {
      ++result.skipped_steps;
      result.last_skipped_step = step;
    } else {
      replica.Apply(step, s.count);
    }
    const double dt = Seconds(std::chrono::steady_clock::now() - start);
    train_seconds += dt;
    epoch_seconds += dt;
    if (!skip) {
      epoch_loss += s.loss_sum;
      epoch_examples += s.count;
    }
    total_examples += s.count;

    const bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (!epoch_end) continue;
    EpochReport report;
    report.epoch = step / per_epoch + 1;
    report.step = step + 1;
    report.train_loss = epoch_examples ? epoch_loss / epoch_examples : 0;
    report.examples_per_second = epoch_seconds > 0 ? epoch_examples / epoch_seconds : 0;
    if (test.num_examples > 0 && (eval_each_epoch || step + 1 == total)) {
      EvalStats e = replica.Evaluate(test);
      report.has_test = true;
      report.test_accuracy = e.accuracy();
      report.test_loss = e.mean_loss();
    }
    if (on_epoch) on_epoch(report);
    result.final_loss = report.train_loss;
    result.has_test = report.has_test;
    result.test_accuracy = report.test_accuracy;
    result.test_loss = report.test_loss;
    epoch_loss = 0;
    epoch_examples = 0;
    epoch_seconds = 0;
  }
  result.steps = total;
  result.examples_per_second = train_seconds > 0 ? total_examples / train_seconds : 0;
  result.weights_hash = replica.Hash().ToHex();
  result.replica = *std::move(replica_or);
  return result;
}

}  // namespace lockstep
