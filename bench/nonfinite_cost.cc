// What the non-finite check (issue 10; common/train/nonfinite.h) costs a
// training step of the main job's model: MLP 784-256-10 on Fashion-MNIST,
// batch 128, SGD momentum 0.9, 1 BLAS thread. Each step: ComputeGradSum
// (forward + backward into a replica with one flag slot, as a K = 1 worker
// lays it out), then AllFinite over the fresh gradient (what StepCombiner
// runs without overlap, the pass with the most data out of cache), then
// Apply; and at K > 1 a worker also checks the COMBINED gradient and loss
// before Apply (the same pass over the buffer after the combine: timed
// here on the same buffer as "combined check"). Reports the medians over repeats of the step (compute + check +
// apply) and of the check alone, per step, and their ratio. The combine is
// not included (it only adds to the step), so the ratio is an upper bound
// for the distributed step.
//   bazel run -c opt //bench:nonfinite_cost
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_util.h"
#include "common/blas.h"
#include "common/data/dataset.h"
#include "common/data/sampler.h"
#include "common/train/nonfinite.h"
#include "common/train/replica.h"

ABSL_FLAG(int64_t, steps, 400, "Training steps per repeat");
ABSL_FLAG(int32_t, repeats, 7, "Repeats; medians are reported");
ABSL_FLAG(int64_t, batch, 128, "Batch size");
ABSL_FLAG(std::string, model, "mlp:256", "Model spec");

namespace lockstep {
namespace {

using bench::Median;
using bench::NowSeconds;

int Main() {
  SetBlasThreads(1);
  const int64_t steps = absl::GetFlag(FLAGS_steps), batch = absl::GetFlag(FLAGS_batch);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  auto job = bench::LoadMainJobBench(absl::GetFlag(FLAGS_model), batch, "fashion-mnist", /*flag_slots=*/1);
  if (!job.ok()) {
    std::fprintf(stderr, "nonfinite_cost: %s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  const Dataset& data = job->data.train;
  const TrainSpec& spec = job->spec;
  Replica& replica = *job->replica;
  GlobalBatchSampler sampler(data.num_examples, batch, spec.seed);
  std::vector<int64_t> indices;
  int64_t step = 0;
  double check_seconds = 0, combined_seconds = 0;
  int64_t finite_steps = 0, combined_finite = 0;
  auto train_step = [&] {
    sampler.SliceInto(step, 0, 1, &indices);
    BatchStats st = replica.ComputeGradSum(data, indices);
    const double t0 = NowSeconds();
    const bool finite = AllFinite(replica.grad());
    check_seconds += NowSeconds() - t0;
    finite_steps += finite;
    replica.flags()[0] = finite ? 0.0f : 1.0f;
    const double t1 = NowSeconds();
    const absl::Span<float> buffer = replica.combine_buffer();
    const int64_t g = replica.grad_offset();
    combined_finite += AllFinite(buffer.subspan(g, buffer.size() - g));
    combined_seconds += NowSeconds() - t1;
    replica.Apply(step, st.count);
    ++step;
  };
  train_step();  // warm-up: first touch of the replica's buffers
  std::vector<double> step_us, check_us, combined_us;
  for (int r = 0; r < repeats; ++r) {
    check_seconds = 0;
    combined_seconds = 0;
    const double t0 = NowSeconds();
    for (int64_t s = 0; s < steps; ++s) train_step();
    const double dt = NowSeconds() - t0;
    step_us.push_back(1e6 * dt / steps);
    check_us.push_back(1e6 * check_seconds / steps);
    combined_us.push_back(1e6 * combined_seconds / steps);
  }
  std::printf("nonfinite_cost: %s, batch %lld, %lld gradient floats, 1 BLAS thread (core %s), "
              "%lld steps x %d repeats (%lld of %lld steps finite, %lld combined)\n",
              replica.model().Describe().c_str(), static_cast<long long>(batch),
              static_cast<long long>(replica.num_params()), BlasCoreName(),
              static_cast<long long>(steps), repeats, static_cast<long long>(finite_steps),
              static_cast<long long>(step), static_cast<long long>(combined_finite));
  std::printf("%-40s %10.1f\n", "step: compute + check + apply (us)", Median(step_us));
  std::printf("%-40s %10.1f\n", "non-finite check alone (us)", Median(check_us));
  std::printf("%-40s %10.1f\n", "combined check (K > 1) (us)", Median(combined_us));
  std::printf("%-40s %9.2f%%\n", "check / step", 100 * Median(check_us) / Median(step_us));
  std::printf("%-40s %9.2f%%\n", "both checks / step",
              100 * (Median(check_us) + Median(combined_us)) / Median(step_us));
  std::printf("%-40s %10.2f\n", "check throughput (GB/s)",
              replica.num_params() * 4.0 / Median(check_us) / 1e3);
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lockstep::Main();
}
