// Training throughput of one replica: MLP 784-256-10, batch 128, one
// OpenBLAS thread, on the real Fashion-MNIST training set (Debian's
// dataset-fashion-mnist, loaded as a worker loads it: worker/job_data.h,
// scale255) with the cluster's sampler (a shuffled global batch per step,
// gathered from the 188 MB training set, not a few batches that stay in
// cache), with the share of step time spent inside BLAS.
//
//   bazel run -c opt //bench:train_throughput [-- --steps=200 --repeats=7]
//
// Timing: the dataset load and one warm-up step are outside the clock; each
// repeat continues the same run (steps r*steps .. (r+1)*steps-1), so every
// repeat walks a fresh part of the epoch's permutation.
//
// The anchor printed beside it is the same step's matrix work alone: the
// five GEMMs and two GEMVs of forward+backward called back to back on
// the same shapes, with nothing else. Its rate is the ceiling this step
// could reach if everything outside BLAS cost nothing.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_util.h"
#include "common/blas.h"
#include "common/data/dataset.h"
#include "common/data/sampler.h"
#include "common/train/replica.h"

ABSL_FLAG(int64_t, steps, 200, "Training steps per repeat");
ABSL_FLAG(int32_t, repeats, 7, "Repeats; medians are reported");
ABSL_FLAG(int64_t, batch, 128, "Batch size");
ABSL_FLAG(std::string, model, "mlp:256", "Model spec");
ABSL_FLAG(std::string, dataset, "fashion-mnist",
          "Dataset spec, as the job flag --dataset (default: Debian's Fashion-MNIST)");

namespace lockstep {
namespace {

using bench::Median;
using bench::NowSeconds;

int Main() {
  SetBlasThreads(1);
  const int64_t steps = absl::GetFlag(FLAGS_steps), batch = absl::GetFlag(FLAGS_batch);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  auto job = bench::LoadMainJobBench(absl::GetFlag(FLAGS_model), batch, absl::GetFlag(FLAGS_dataset));
  if (!job.ok()) {
    std::fprintf(stderr, "train_throughput: %s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  const Dataset& data = job->data.train;
  const TrainSpec& spec = job->spec;
  Replica& replica = *job->replica;
  GlobalBatchSampler sampler(data.num_examples, batch, spec.seed);
  int64_t step = 0;
  auto train_step = [&] {
    const std::vector<int64_t> indices = sampler.Batch(step);
    BatchStats st = replica.ComputeGradSum(data, indices);
    replica.Apply(step, st.count);
    ++step;
  };
  train_step();  // warm-up: first touch of the replica's buffers

  // Anchor buffers: the GEMM/GEMV shapes of one forward+backward step.
  const auto& dims = replica.model().dims();  // anchor: synthetic activations, no data
  std::vector<std::vector<float>> acts(dims.size()), ws(dims.size());
  for (size_t l = 0; l < dims.size(); ++l) acts[l].assign(batch * dims[l], 0.5f);
  for (size_t l = 0; l + 1 < dims.size(); ++l) ws[l].assign(dims[l] * dims[l + 1], 0.01f);
  size_t max_w = 0, max_d = 0;
  for (size_t l = 0; l < dims.size(); ++l) {
    max_d = std::max<size_t>(max_d, dims[l]);
    if (l + 1 < dims.size()) max_w = std::max<size_t>(max_w, dims[l] * dims[l + 1]);
  }
  std::vector<float> gw(max_w), ones(batch, 1.0f), gb(max_d), dprev(batch * max_d);
  auto anchor_step = [&] {
    for (size_t l = 0; l + 1 < dims.size(); ++l)  // forward
      Gemm(false, false, batch, dims[l + 1], dims[l], 1.0f, acts[l].data(), dims[l],
           ws[l].data(), dims[l + 1], 1.0f, acts[l + 1].data(), dims[l + 1]);
    for (size_t l = dims.size() - 1; l-- > 0;) {  // backward
      Gemm(true, false, dims[l], dims[l + 1], batch, 1.0f, acts[l].data(), dims[l],
           acts[l + 1].data(), dims[l + 1], 0.0f, gw.data(), dims[l + 1]);
      Gemv(true, batch, dims[l + 1], 1.0f, acts[l + 1].data(), dims[l + 1], ones.data(), 0.0f,
           gb.data());
      if (l > 0)
        Gemm(false, true, batch, dims[l], dims[l + 1], 1.0f, acts[l + 1].data(), dims[l + 1],
             ws[l].data(), dims[l + 1], 0.0f, dprev.data(), dims[l]);
    }
  };

  std::vector<double> eps, blas_share, gemm_share, anchor_eps;
  for (int r = 0; r < repeats; ++r) {
    BlasProfile profile;
    double t0;
    {
      ScopedBlasProfile scope(&profile);
      t0 = NowSeconds();
      for (int64_t s = 0; s < steps; ++s) train_step();
    }
    const double dt = NowSeconds() - t0;
    eps.push_back(steps * batch / dt);
    blas_share.push_back(profile.seconds / dt);
    gemm_share.push_back(profile.gemm_seconds / dt);
    const double a0 = NowSeconds();
    for (int64_t s = 0; s < steps; ++s) anchor_step();
    anchor_eps.push_back(steps * batch / (NowSeconds() - a0));
  }
  std::printf("train_throughput: %s %s, batch %lld, 1 BLAS thread (core %s), %lld steps x %d repeats\n",
              replica.model().Describe().c_str(), spec.optimizer.kind.c_str(),
              static_cast<long long>(batch), BlasCoreName(), static_cast<long long>(steps),
              repeats);
  std::printf("data: %s, %lld examples x %lld features (shuffled global batches, as the "
              "cluster samples them); load and 1 warm-up step not timed\n",
              data.name.c_str(), static_cast<long long>(data.num_examples),
              static_cast<long long>(data.dim));
  std::printf("%-34s %14s\n", "", "median");
  std::printf("%-34s %14.0f\n", "training step (examples/s)", Median(eps));
  std::printf("%-34s %14.0f\n", "anchor: BLAS calls alone (ex/s)", Median(anchor_eps));
  std::printf("%-34s %14.2f\n", "ratio step / anchor", Median(eps) / Median(anchor_eps));
  std::printf("%-34s %13.1f%%\n", "share of step time in BLAS", 100 * Median(blas_share));
  std::printf("%-34s %13.1f%%\n", "share of step time in sgemm", 100 * Median(gemm_share));
  std::printf("%-34s %14s\n", "target: share in BLAS >= 70%",
              Median(blas_share) >= 0.70 ? "met" : "MISSED");
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lockstep::Main();
}
