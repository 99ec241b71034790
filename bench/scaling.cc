// Scaling benchmark: the lockstep cluster (real coordinator, worker and ps
// processes on 127.0.0.1) against the single-process `lockstep-train` on
// the same job, and PyTorch DistributedDataParallel (gloo) beside it.
//
//   bazel run -c opt //bench:scaling [-- --steps=1500 --repeats=3 --skip_torch
//                                        --extra_job_flags="--flag=v ..."]
//
// The job everywhere: MLP 784-256-10 on Debian's Fashion-MNIST (60,000
// training images, loaded from disk by every process as the cluster does),
// SGD momentum 0.9, lr 0.05 with cosine decay, seed 1, a fixed number of
// steps, no per-epoch evaluation, one OpenBLAS (or torch) thread per
// process. Each repeat runs, in this order: lockstep-train at batch 128 and
// the global strong-scaling batch; the PyTorch runs; then per world size K
// (1, then --worlds) a fresh cluster of exactly K workers (plus a second
// cluster with 2 ps servers for ps S=2) running every mode's weak job
// (128 per worker) and strong job (--strong_batch global); and
// lockstep-train at batch 128 again. A ratio divides by the mean of that
// repeat's two lockstep-train@128 runs; tables show medians over repeats.
//
// What is timed (setup never is) is printed with the results; see
// PrintMethod(). Exit code: 0 when every run succeeded (targets may be
// MISSED), 1 when a run failed, 2 bad flags.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_process.h"
#include "bench/bench_util.h"
#include "bench/local_cluster.h"
#include "bench/scaling_bench.h"
#include "common/blas.h"
#include "common/blas_core.h"

ABSL_FLAG(int64_t, steps, 1500, "training steps of every run");
ABSL_FLAG(int, repeats, 3, "repetitions of the whole matrix; medians are shown");
ABSL_FLAG(int64_t, batch, 128,
          "per-worker batch of weak scaling; lockstep-train's and torch's batch");
ABSL_FLAG(int64_t, strong_batch, 256, "global batch of strong scaling");
ABSL_FLAG(std::string, worlds, "2,4", "cluster sizes K besides K=1");
ABSL_FLAG(std::string, modes, "tcp,shm,grpc,ps1,ps2,ps1t,ps2t",
          "combine modes: tcp (ring, raw TCP), shm (ring, shared memory), grpc (ring, gRPC "
          "streams), ps1 (ps, the "
          "coordinator hosts the shard), ps2 (ps, two lockstep-server shards), both with "
          "--ps_transport=grpc; ps1t, ps2t: the same with --ps_transport=tcp");
ABSL_FLAG(bool, skip_torch, false, "do not run the PyTorch DDP anchor");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "interpreter with Debian's python3-torch (bench/setup_torch.sh)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Fashion-MNIST IDX directory for the PyTorch anchor (lockstep uses --dataset)");
ABSL_FLAG(std::string, dataset, "fashion-mnist", "job flag --dataset for every lockstep run");
ABSL_FLAG(double, lr, 0.05, "learning rate everywhere");
ABSL_FLAG(std::string, extra_job_flags, "",
          "space-separated flags appended to every `lockstep submit` (e.g. job flags other "
          "helpers add); not given to lockstep-train");
ABSL_FLAG(std::string, extra_train_flags, "", "space-separated flags for lockstep-train");
ABSL_FLAG(std::string, extra_worker_flags, "", "space-separated flags for lockstep-worker");
ABSL_FLAG(std::string, extra_coordinator_flags, "",
          "space-separated flags for lockstep-coordinator");
ABSL_FLAG(std::string, extra_ps_flags, "", "space-separated flags for lockstep-server");
ABSL_FLAG(std::string, bin_dir, "",
          "directory holding server/, worker/, client/, bench/ (default: the runfiles)");
ABSL_FLAG(int, job_timeout_s, 900, "deadline of one run");
ABSL_FLAG(int64_t, warmup_steps, -1,
          "cluster and torch runs: steps before the timed window (-1: steps / 20, at least 1)");
ABSL_FLAG(int, poll_ms, 50, "GetJob poll interval while a cluster job runs");
ABSL_FLAG(bool, keep_logs, false, "keep the temp directory with every process's log");
ABSL_FLAG(bool, snapshot_binaries, true,
          "copy the binaries into the temp directory first, so a rebuild during the run "
          "cannot mix versions");

namespace lockstep::bench {
namespace {

std::vector<std::string> Words(const std::string& s) {
  return absl::StrSplit(s, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
}

std::string LoadAvg() {
  absl::StatusOr<std::string> s = ReadFile("/proc/loadavg");
  if (!s.ok()) return "?";
  std::vector<std::string> f = Words(*s);
  return f.size() >= 3 ? absl::StrCat(f[0], " ", f[1], " ", f[2]) : "?";
}

// ps with two lockstep-server shards (a cluster with --ps_addresses).
bool TwoServers(const std::string& mode) { return mode == "ps2" || mode == "ps2t"; }

// Examples/s from the GetJob polls: from the first poll that saw at least
// `warmup` steps completed to the last poll that saw fewer steps than the
// most any poll saw (so the plateau after the last step, while the workers
// evaluate and upload, is not counted). 0 when fewer than two such polls.
double PolledRate(const JobRun& run, int64_t warmup, int64_t global_batch) {
  int64_t max_step = 0;
  for (const auto& p : run.progress) max_step = std::max(max_step, p.step);
  const JobRun::Progress* first = nullptr;
  const JobRun::Progress* last = nullptr;
  for (const auto& p : run.progress) {
    if (first == nullptr && p.step >= warmup) first = &p;
    if (p.step < max_step) last = &p;
  }
  if (first == nullptr || last == nullptr || last->step <= first->step) return 0;
  const double seconds = absl::ToDoubleSeconds(last->at - first->at);
  return seconds > 0 ? static_cast<double>(last->step - first->step) * global_batch / seconds : 0;
}

}  // namespace

absl::StatusOr<Sample> ScalingBench::RunTrain(int64_t batch, const std::string& tag) {
  absl::StatusOr<pid_t> pid = StartTrain(batch, tag);
  if (!pid.ok()) return pid.status();
  return FinishTrain(*pid, batch, tag);
}

absl::StatusOr<Sample> ScalingBench::RunTrainTogether(int k, int64_t batch,
                                                     const std::string& tag) {
  std::vector<pid_t> pids;
  absl::Status failed;
  for (int i = 0; i < k && failed.ok(); ++i) {
    absl::StatusOr<pid_t> pid = StartTrain(batch, absl::StrCat(tag, "_", i));
    if (pid.ok()) {
      pids.push_back(*pid);
    } else {
      failed = pid.status();
    }
  }
  Sample sum;
  for (size_t i = 0; i < pids.size(); ++i) {
    absl::StatusOr<Sample> one = FinishTrain(pids[i], batch, absl::StrCat(tag, "_", i));
    if (one.ok()) {
      sum.eps += one->eps;
    } else if (failed.ok()) {
      failed = one.status();
    }
  }
  if (!failed.ok()) return failed;
  return sum;
}

absl::StatusOr<pid_t> ScalingBench::StartTrain(int64_t batch, const std::string& tag) {
  const std::string out = absl::StrCat(dir_, "/", tag, ".json");
  const std::string err = absl::StrCat(dir_, "/", tag, ".log");
  std::vector<std::string> argv = {
      absl::StrCat(root_, "/worker/lockstep-train"), "--json", "--model=mlp:256",
      absl::StrCat("--dataset=", absl::GetFlag(FLAGS_dataset)), absl::StrCat("--batch=", batch),
      absl::StrCat("--steps=", steps_), "--optimizer=sgd", "--momentum=0.9",
      absl::StrCat("--lr=", absl::GetFlag(FLAGS_lr)), "--decay=cosine", "--seed=1",
      "--eval_each_epoch=false", "--blas_threads=1"};
  for (std::string& f : Words(absl::GetFlag(FLAGS_extra_train_flags))) argv.push_back(f);
  return Spawn(argv, {{"OPENBLAS_NUM_THREADS", "1"}}, out, err);
}

absl::StatusOr<Sample> ScalingBench::FinishTrain(pid_t pid, int64_t batch,
                                                 const std::string& tag) {
  const std::string out = absl::StrCat(dir_, "/", tag, ".json");
  const std::string err = absl::StrCat(dir_, "/", tag, ".log");
  absl::StatusOr<int> rc =
      WaitExit(pid, absl::Seconds(absl::GetFlag(FLAGS_job_timeout_s)), "lockstep-train");
  if (!rc.ok()) {
    Stop({pid}, absl::Seconds(1));
    return rc.status();
  }
  absl::StatusOr<std::string> json = ReadFile(out);
  const std::string key = "\"examples_per_second\": ";
  size_t at = json.ok() ? json->find(key) : std::string::npos;
  Sample s;
  if (*rc != 0 || at == std::string::npos ||
      !absl::SimpleAtod(std::string(json->substr(at + key.size(),
                                                 json->find_first_of(",}", at) - at - key.size())),
                        &s.eps)) {
    absl::StatusOr<std::string> log = ReadFile(err);
    return absl::InternalError(absl::StrCat("lockstep-train exited ", *rc, ": ",
                                            absl::StripAsciiWhitespace(log.ok() ? *log : "")));
  }
  const std::string hkey = "\"weights_hash\": \"";
  if (size_t h = json->find(hkey); h != std::string::npos && batch == batch_) {
    train_hash_ = json->substr(h + hkey.size(), 32);
  }
  return s;
}

absl::StatusOr<Sample> ScalingBench::RunTorch(const Run& r) {
  const std::string script = absl::StrCat(root_, "/bench/torch_ddp.py");
  const std::string store = absl::StrCat(dir_, "/", r.key, "_store_", absl::ToUnixNanos(absl::Now()));
  std::vector<pid_t> pids;
  const std::string out0 = absl::StrCat(dir_, "/", r.key, ".out");
  for (int rank = 0; rank < r.k; ++rank) {
    std::vector<std::string> argv = {
        absl::GetFlag(FLAGS_python), script, absl::StrCat("--rank=", rank),
        absl::StrCat("--world=", r.k), absl::StrCat("--store=", store),
        absl::StrCat("--data_dir=", absl::GetFlag(FLAGS_data_dir)),
        absl::StrCat("--batch=", batch_), absl::StrCat("--steps=", steps_),
        absl::StrCat("--warmup=", warmup_),
        absl::StrCat("--lr=", absl::GetFlag(FLAGS_lr)), "--momentum=0.9", "--seed=1"};
    if (r.mode == "plain") argv.push_back("--no_ddp");
    absl::StatusOr<pid_t> pid =
        Spawn(argv,
              {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"MKL_NUM_THREADS", "1"},
               {"GLOO_SOCKET_IFNAME", "lo"}},
              rank == 0 ? out0 : "/dev/null", absl::StrCat(dir_, "/", r.key, ".", rank, ".log"));
    if (!pid.ok()) {
      Stop(pids, absl::Seconds(2));
      return pid.status();
    }
    pids.push_back(*pid);
  }
  absl::Status failed;
  for (pid_t p : pids) {
    absl::StatusOr<int> rc =
        WaitExit(p, absl::Seconds(absl::GetFlag(FLAGS_job_timeout_s)), "torch_ddp.py");
    if (!rc.ok() && failed.ok()) failed = rc.status();
    if (rc.ok() && *rc != 0 && failed.ok()) {
      failed = absl::InternalError(absl::StrCat("torch_ddp.py exited ", *rc, " (log ", dir_, "/",
                                                r.key, ".*.log)"));
    }
  }
  if (!failed.ok()) {
    Stop(pids, absl::Seconds(2));
    return failed;
  }
  absl::StatusOr<std::string> text = ReadFile(out0);
  const std::string key = "examples_per_second=";
  Sample s;
  size_t at = text.ok() ? text->find(key) : std::string::npos;
  if (at == std::string::npos ||
      !absl::SimpleAtod(text->substr(at + key.size(), text->find(' ', at) - at - key.size()),
                        &s.eps)) {
    return absl::InternalError(absl::StrCat("torch_ddp.py printed no RESULT (", out0, ")"));
  }
  return s;
}

std::vector<std::string> ScalingBench::JobFlags(const Run& r) const {
  std::vector<std::string> f = {
      "--model=mlp:256", absl::StrCat("--dataset=", absl::GetFlag(FLAGS_dataset)),
      absl::StrCat("--workers=", r.k), absl::StrCat("--batch=", r.global_batch),
      absl::StrCat("--steps=", steps_), "--optimizer=sgd", "--momentum=0.9",
      absl::StrCat("--lr=", absl::GetFlag(FLAGS_lr)), "--decay=cosine", "--seed=1",
      "--eval_each_epoch=false", absl::StrCat("--name=bench-", r.key)};
  if (r.mode == "tcp" || r.mode == "grpc" || r.mode == "shm") {
    f.push_back("--sync=ring");
    f.push_back(absl::StrCat("--peer_transport=", r.mode));
  } else {
    f.push_back("--sync=ps");
    f.push_back(absl::StrCat("--ps_shards=", TwoServers(r.mode) ? 2 : 1));
    f.push_back(absl::StrCat("--ps_transport=", r.mode.back() == 't' ? "tcp" : "grpc"));
  }
  for (std::string& w : Words(absl::GetFlag(FLAGS_extra_job_flags))) f.push_back(w);
  return f;
}

void ScalingBench::Record(const Run& r, int rep, const absl::StatusOr<Sample>& s) {
  if (s.ok()) {
    samples_[r.key][rep] = *s;
    return;
  }
  std::printf("\n  FAILED %s (repeat %d): %s\n", r.label.c_str(), rep + 1,
              s.status().ToString().c_str());
  failures_.emplace(r.key, s.status().ToString());
}

void ScalingBench::RunClusters(int rep) {
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_job_timeout_s));
  for (int k : worlds_) {
    // Cluster A hosts the ps shard in the coordinator; cluster B has two ps servers.
    for (int servers : {0, 2}) {
      std::vector<const Run*> todo;
      for (const Run& r : runs_) {
        if (r.kind != Run::kCluster || r.k != k || !r.same_as.empty()) continue;
        if (TwoServers(r.mode) == (servers == 2)) todo.push_back(&r);
      }
      if (todo.empty()) continue;
      ClusterConfig c;
      c.root = root_;
      c.log_dir = absl::StrCat(dir_, "/rep", rep + 1, "_k", k, "_s", servers);
      mkdir(c.log_dir.c_str(), 0755);
      c.workers = k;
      c.ps_servers = servers;
      c.coordinator_flags = Words(absl::GetFlag(FLAGS_extra_coordinator_flags));
      c.worker_flags = Words(absl::GetFlag(FLAGS_extra_worker_flags));
      c.ps_flags = Words(absl::GetFlag(FLAGS_extra_ps_flags));
      std::printf(" [K=%d%s", k, servers ? " 2 ps" : "");
      std::fflush(stdout);
      absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(c);
      for (const Run* r : todo) {
        absl::StatusOr<Sample> s;
        if (!cluster.ok()) {
          s = cluster.status();
        } else {
          std::printf(" %s%s", r->mode.c_str(), r->scaling == "strong" ? "/s" : "");
          std::fflush(stdout);
          absl::StatusOr<JobRun> run = (*cluster)->RunJob(
              JobFlags(*r), timeout, absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms)));
          const v1::JobStatus* job = run.ok() ? &run->status : nullptr;
          if (!run.ok()) {
            s = run.status();
          } else if (job->state() != v1::SUCCEEDED || job->step() != steps_ || job->out_of_sync()) {
            s = absl::InternalError(absl::StrCat("job ", job->job_id(), " ",
                                                 v1::JobState_Name(job->state()), " at step ",
                                                 job->step(), job->out_of_sync() ? " out of sync" : "",
                                                 ": ", job->reason(), " (logs in ", c.log_dir, ")"));
          } else {
            Sample x;
            x.coord_eps = job->examples_per_second();
            x.eps = PolledRate(*run, warmup_, r->global_batch);
            if (x.eps <= 0) {
              x.eps = x.coord_eps;
              x.fallback = true;
            }
            x.wall = job->finished_unix_s() - job->started_unix_s();
            s = x;
            if (r->k == 1 && r->mode == "tcp") k1_hash_ = job->final_hash();
          }
        }
        Record(*r, rep, s);
      }
      std::printf("]");
      std::fflush(stdout);
    }  // the cluster stops here
  }
}

// Copies the programs the bench starts (same relative paths) under `to`.
absl::StatusOr<std::string> SnapshotBinaries(const std::string& root, const std::string& to) {
  for (const char* rel : {"server/lockstep-coordinator", "server/ps/lockstep-server",
                          "worker/lockstep-worker", "worker/lockstep-train", "client/lockstep",
                          "bench/torch_ddp.py", "bench/setup_torch.sh"}) {
    const std::filesystem::path dst = std::filesystem::path(to) / rel;
    std::error_code ec;
    std::filesystem::create_directories(dst.parent_path(), ec);
    if (!ec) std::filesystem::copy_file(std::filesystem::path(root) / rel, dst, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("copying ", root, "/", rel, " to ", dst.string(),
                                              ": ", ec.message(), " (or pass --nosnapshot_binaries)"));
    }
  }
  return to;
}

int ScalingBench::Main() {
  steps_ = absl::GetFlag(FLAGS_steps);
  warmup_ = absl::GetFlag(FLAGS_warmup_steps) >= 0 ? absl::GetFlag(FLAGS_warmup_steps)
                                                    : std::max<int64_t>(1, steps_ / 20);
  batch_ = absl::GetFlag(FLAGS_batch);
  strong_ = absl::GetFlag(FLAGS_strong_batch);
  repeats_ = absl::GetFlag(FLAGS_repeats);
  if (steps_ < 2 || batch_ < 1 || strong_ < 1 || repeats_ < 1 || warmup_ < 1 ||
      warmup_ >= steps_ || absl::GetFlag(FLAGS_poll_ms) < 1) {
    std::fprintf(stderr, "scaling: --steps must be >= 2, 1 <= --warmup_steps < --steps, --batch, "
                         "--strong_batch, --repeats, --poll_ms >= 1\n");
    return 2;
  }
  worlds_ = {1};
  for (const std::string& w : Words(absl::StrReplaceAll(absl::GetFlag(FLAGS_worlds), {{",", " "}}))) {
    int k = 0;
    if (!absl::SimpleAtoi(w, &k) || k < 2 || k > 64) {
      std::fprintf(stderr, "scaling: --worlds: expected sizes 2..64, got \"%s\"\n", w.c_str());
      return 2;
    }
    if (std::find(worlds_.begin(), worlds_.end(), k) == worlds_.end()) worlds_.push_back(k);
  }
  for (const std::string& m : Words(absl::StrReplaceAll(absl::GetFlag(FLAGS_modes), {{",", " "}}))) {
    if (m != "tcp" && m != "shm" && m != "grpc" && m != "ps1" && m != "ps2" && m != "ps1t" &&
        m != "ps2t") {
      std::fprintf(stderr,
                   "scaling: --modes: expected tcp, shm, grpc, ps1, ps2, ps1t or ps2t, got "
                   "\"%s\"\n",
                   m.c_str());
      return 2;
    }
    modes_.push_back(m);
  }
  std::printf("lockstep scaling benchmark, %s, %u cores, load average %s\n",
              absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()).c_str(),
              std::thread::hardware_concurrency(), LoadAvg().c_str());
  std::printf("job: MLP 784-256-10 on %s (train split), SGD momentum 0.9, lr %g cosine, seed 1, "
              "%lld steps, no per-epoch eval; 1 OpenBLAS/torch thread per process; %d repeat(s)\n",
              absl::GetFlag(FLAGS_dataset).c_str(), absl::GetFlag(FLAGS_lr),
              static_cast<long long>(steps_), repeats_);
  {
    // Every process this bench starts inherits its environment, so this
    // process's OpenBLAS kernel set is theirs (common/blas_core.h).
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    const std::string env = forced != nullptr ? absl::StrCat("=", forced) : " not set";
    const std::string advice = BlasCoreAdvice(BlasCoreName(), ThisCpu());
    std::printf("OpenBLAS kernels: %s (OPENBLAS_CORETYPE%s)%s%s\n", BlasCoreName(), env.c_str(),
                advice.empty() ? "" : "; ", advice.c_str());
  }
  if (!absl::GetFlag(FLAGS_extra_job_flags).empty()) {
    std::printf("extra job flags: %s\n", absl::GetFlag(FLAGS_extra_job_flags).c_str());
  }
  torch_ = !absl::GetFlag(FLAGS_skip_torch);
  if (torch_) {
    if (!Succeeds({absl::GetFlag(FLAGS_python), "-c", "import torch, numpy, torch.distributed"},
                  absl::Seconds(120))) {
      std::printf("PyTorch anchor skipped: %s cannot import torch (a bench-only dependency: "
                  "run `bash bench/setup_torch.sh` to install Debian's python3-torch)\n",
                  absl::GetFlag(FLAGS_python).c_str());
      torch_ = false;
    } else {
      std::printf("PyTorch anchor: %s bench/torch_ddp.py (Debian python3-torch), "
                  "torch.set_num_threads(1), DDP over gloo on loopback\n",
                  absl::GetFlag(FLAGS_python).c_str());
    }
  }
  Plan();
  PrintMethod();
  const absl::Time start = absl::Now();
  for (int rep = 0; rep < repeats_; ++rep) {
    std::printf("repeat %d/%d: train", rep + 1, repeats_);
    std::fflush(stdout);
    Run anchor_a = runs_[0];
    anchor_a.key = "train128a";
    Record(anchor_a, rep, RunTrain(batch_, absl::StrCat("train128a_", rep)));
    if (strong_ != batch_) Record(runs_[1], rep, RunTrain(strong_, absl::StrCat("train_b_", rep)));
    for (const Run& r : runs_) {
      if (r.kind != Run::kTorch) continue;
      std::printf(" %s", r.key.c_str());
      std::fflush(stdout);
      Record(r, rep, RunTorch(r));
    }
    for (const Run& r : runs_) {
      if (r.kind != Run::kTrain || r.k == 1) continue;
      std::printf(" %s", r.key.c_str());
      std::fflush(stdout);
      Record(r, rep, RunTrainTogether(r.k, batch_, absl::StrCat(r.key, "_", rep)));
    }
    RunClusters(rep);
    std::printf(" train");
    std::fflush(stdout);
    Run anchor_b = runs_[0];
    anchor_b.key = "train128b";
    Record(anchor_b, rep, RunTrain(batch_, absl::StrCat("train128b_", rep)));
    std::printf(" (%.0f s, load %s)\n", absl::ToDoubleSeconds(absl::Now() - start),
                LoadAvg().c_str());
  }
  PrintTable();
  if (!train_hash_.empty() && !k1_hash_.empty()) {
    std::printf("\nK=1 cluster final weights hash %s lockstep-train's at batch %lld (%s)\n",
                train_hash_ == k1_hash_ ? "equals" : "DIFFERS FROM",
                static_cast<long long>(batch_), train_hash_.c_str());
  }
  PrintTargets();
  std::printf("total %.0f s; load average at the end %s. This machine is shared: figures are "
              "noisy, compare ratios within one run.\n",
              absl::ToDoubleSeconds(absl::Now() - start), LoadAvg().c_str());
  if (!failures_.empty()) {
    std::printf("%zu run(s) failed%s\n", failures_.size(),
                absl::GetFlag(FLAGS_keep_logs) ? "" : " (logs kept)");
  }
  return failures_.empty() ? 0 : 1;
}

}  // namespace lockstep::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::string> root =
      lockstep::bench::FindRunfilesRoot(absl::GetFlag(FLAGS_bin_dir), "server/lockstep-coordinator");
  if (!root.ok()) {
    std::fprintf(stderr, "scaling: %s\n", std::string(root.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::string> dir = lockstep::bench::MakeTempDir("lockstep_scaling_");
  if (!dir.ok()) {
    std::fprintf(stderr, "scaling: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  std::string bin = *root;
  if (absl::GetFlag(FLAGS_snapshot_binaries)) {
    absl::StatusOr<std::string> copy = lockstep::bench::SnapshotBinaries(*root, *dir + "/bin");
    if (!copy.ok()) {
      std::fprintf(stderr, "scaling: %s\n", std::string(copy.status().message()).c_str());
      return 1;
    }
    bin = *copy;
  }
  std::printf("binaries from %s%s; logs in %s\n", root->c_str(),
              bin == *root ? "" : absl::StrCat(" (copied to ", bin, ")").c_str(), dir->c_str());
  lockstep::bench::ScalingBench bench(bin, *dir);
  const int rc = bench.Main();
  if (rc == 0 && !absl::GetFlag(FLAGS_keep_logs)) {
    lockstep::bench::RemoveTree(*dir);
  } else {
    std::printf("logs kept in %s\n", dir->c_str());
  }
  return rc;
}
