// lockstep-train: the single-process reference trainer. Parses flags and
// wires the pieces; the arithmetic lives in common/train.
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "common/train/job_flags.h"
#include "common/blas.h"
#include "common/blas_core.h"
#include "common/flags_usage.h"
#include "common/json.h"
#include "common/train/reference_trainer.h"
#include "common/train/job_spec_convert.h"
#include "worker/job_data.h"

ABSL_FLAG(bool, json, false, "Print one JSON object with the result at the end");
ABSL_FLAG(int32_t, blas_threads, 1, "OpenBLAS threads");

int main(int argc, char** argv) {
  // --help lists the job flags (common/train/job_flags.cc) and this binary's own,
  // and exits 0.
  lockstep::ConfigureFlagsUsage(
      "Single-process reference trainer.\n"
      "  lockstep-train --model=mlp:256 --dataset=fashion-mnist --epochs=10 [--json]");
  lockstep::ParseFlagsOrExit(argc, argv);
  lockstep::SetBlasThreads(absl::GetFlag(FLAGS_blas_threads));
  if (const std::string advice =
          lockstep::BlasCoreAdvice(lockstep::BlasCoreName(), lockstep::ThisCpu());
      !advice.empty()) {
    std::fprintf(stderr, "lockstep-train: warning: %s\n", advice.c_str());
  }
  auto job = lockstep::JobSpecFromFlags(lockstep::FlagsGivenOnCommandLine(argc, argv));
  if (!job.ok()) {
    std::fprintf(stderr, "lockstep-train: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  if (!job->checkpoint_dir().empty() || job->has_resume_from()) {
    std::fprintf(stderr,
                 "lockstep-train: --checkpoint_dir and --resume_from are for cluster jobs "
                 "(lockstep submit); the reference trainer does not checkpoint\n");
    return 2;
  }
  auto spec = lockstep::ToTrainSpec(*job);
  if (!spec.ok()) {
    std::fprintf(stderr, "lockstep-train: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  auto data = lockstep::LoadJobData(job->data());
  if (!data.ok()) {
    std::fprintf(stderr, "lockstep-train: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  if (spec->lr.decay == "cosine" && spec->lr.total_steps == 0) {
    spec->lr.total_steps = lockstep::TotalSteps(*spec, data->train.num_examples);
  }
  // --on_nonfinite (fail, the default, or skip): the same check and policy
  // as a worker's (common/train/nonfinite.h).
  auto on_nonfinite = lockstep::ParseNonFinitePolicy(job->on_nonfinite());
  if (!on_nonfinite.ok()) {
    std::fprintf(stderr, "lockstep-train: --on_nonfinite: %s\n",
                 std::string(on_nonfinite.status().message()).c_str());
    return 2;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  std::fprintf(stderr, "lockstep-train: %s on %s (%lld train, %lld test, dim %lld), batch %lld\n",
               spec->model.c_str(), data->train.name.c_str(),
               static_cast<long long>(data->train.num_examples),
               static_cast<long long>(data->test.num_examples),
               static_cast<long long>(data->train.dim),
               static_cast<long long>(spec->global_batch));
  auto result = lockstep::TrainReference(
      *spec, data->train, data->test, [&](const lockstep::EpochReport& e) {
        std::string line = absl::StrFormat(
            "epoch %lld  step %lld  train_loss %.4f  %.0f ex/s", static_cast<long long>(e.epoch),
            static_cast<long long>(e.step), e.train_loss, e.examples_per_second);
        if (e.has_test) {
          absl::StrAppendFormat(&line, "  test_loss %.4f  test_accuracy %.4f", e.test_loss,
                                e.test_accuracy);
        }
        std::fprintf(json ? stderr : stdout, "%s\n", line.c_str());
        std::fflush(json ? stderr : stdout);
      },
      *on_nonfinite, job->eval_each_epoch());
  if (!result.ok()) {
    std::fprintf(stderr, "lockstep-train: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  if (json) {
    // A skipped run's numbers may not be finite: JSON has no NaN, so null.
    auto number = [](double v) {
      return std::isfinite(v) ? absl::StrFormat("%.6f", v) : std::string("null");
    };
    std::printf(
        "{\"model\": %s, \"dataset\": %s, \"steps\": %lld, \"final_loss\": %s, "
        "\"test_accuracy\": %s, \"test_loss\": %s, \"examples_per_second\": %.1f, "
        "\"weights_hash\": \"%s\", \"skipped_steps\": %lld}\n",
        lockstep::JsonQuote(result->replica->model().Describe()).c_str(),
        lockstep::JsonQuote(data->train.name).c_str(),
        static_cast<long long>(result->steps), number(result->final_loss).c_str(),
        number(result->test_accuracy).c_str(), number(result->test_loss).c_str(),
        result->examples_per_second, result->weights_hash.c_str(),
        static_cast<long long>(result->skipped_steps));
  } else {
    if (result->skipped_steps > 0) {
      std::printf("non-finite gradients: %lld step(s) skipped, the last at step %lld\n",
                  static_cast<long long>(result->skipped_steps),
                  static_cast<long long>(result->last_skipped_step));
    }
    std::printf("done: %lld steps, final_loss %.4f, test_accuracy %.4f, %.0f ex/s, weights_hash %s\n",
                static_cast<long long>(result->steps), result->final_loss,
                result->test_accuracy, result->examples_per_second,
                result->weights_hash.c_str());
  }
  return 0;
}
