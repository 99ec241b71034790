// //bench:scaling: the rows a run plans (ScalingBench::Plan) and what it
// prints (the method, the table, the targets). See scaling_bench.h.
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "bench/scaling_bench.h"

namespace lockstep::bench {

void ScalingBench::Plan() {
  runs_.push_back({"train128", absl::StrCat("lockstep-train, batch ", batch_), Run::kTrain, 1,
                   batch_, "", "", ""});
  if (strong_ != batch_) {
    runs_.push_back({absl::StrCat("train", strong_),
                     absl::StrCat("lockstep-train, batch ", strong_), Run::kTrain, 1, strong_,
                     "", "", ""});
  }
  if (torch_) {
    runs_.push_back({"torch1", "torch, 1 process, no DDP", Run::kTorch, 1, batch_, "plain", "", ""});
    runs_.push_back({"ddp1", "torch DDP gloo, 1 process", Run::kTorch, 1, batch_, "ddp", "", ""});
    runs_.push_back({"ddp2", absl::StrCat("torch DDP gloo, 2 processes (", batch_, " each)"),
                     Run::kTorch, 2, 2 * batch_, "ddp", "weak", ""});
  }
  for (int k : worlds_) {
    if (k == 1) continue;
    runs_.push_back({absl::StrCat("trainx", k),
                     absl::StrCat(k, " lockstep-train at once (ceiling)"), Run::kTrain, k,
                     batch_ * k, "", "weak", ""});
  }
  static const std::map<std::string, std::string> kModeName = {
      {"tcp", "ring tcp"},      {"shm", "ring shm"},      {"grpc", "ring grpc"},
      {"ps1", "ps S=1 grpc"},
      {"ps2", "ps S=2 grpc"},   {"ps1t", "ps S=1 tcp"},   {"ps2t", "ps S=2 tcp"}};
  for (int k : worlds_) {
    for (const std::string& m : modes_) {
      std::vector<std::pair<std::string, int64_t>> kinds;
      if (k == 1) {
        kinds.push_back({"", batch_});
      } else {
        kinds.push_back({"weak", batch_ * k});
        if (strong_ >= k) kinds.push_back({"strong", strong_});
      }
      std::string weak_key;
      for (const auto& [scaling, global] : kinds) {
        Run r;
        r.kind = Run::kCluster;
        r.k = k;
        r.global_batch = global;
        r.mode = m;
        r.scaling = scaling;
        r.key = absl::StrCat("k", k, "_", m, "_", scaling.empty() ? "one" : scaling);
        r.label = absl::StrCat("cluster K=", k, " ", scaling, scaling.empty() ? "" : " ",
                               kModeName.at(m));
        if (scaling == "weak") weak_key = r.key;
        if (scaling == "strong" && global == batch_ * k) r.same_as = weak_key;
        runs_.push_back(r);
      }
    }
  }
}

void ScalingBench::PrintMethod() const {
  std::printf(
      "How each figure is measured (process start, registration, dataset load and peer/ps\n"
      "connection are never counted):\n"
      "  lockstep-train   its own examples/s (--json): training examples / the summed time of\n"
      "                   its steps (sampling, forward, backward, update); dataset load and the\n"
      "                   final test evaluation excluded (run with --eval_each_epoch=false, as\n"
      "                   the cluster's jobs are). 'K lockstep-train at\n"
      "                   once': K of them started together, the sum of their figures (the\n"
      "                   machine's weak-scaling ceiling: no communication, no service).\n"
      "  cluster ex/s     steps after warm-up, timed by this bench: it polls GetJob every %d ms\n"
      "                   while the job runs and divides the steps completed (by every rank,\n"
      "                   as the coordinator counts them) between the first poll that saw\n"
      "                   >= %lld steps and the last poll before the final count, times the\n"
      "                   global batch, by the time between those polls. 'coord' = the\n"
      "                   coordinator's own JobStatus.examples_per_second (steps 1..N-1 over\n"
      "                   step 0's to step N-1's completion), as a cross-check. 'wall' = job\n"
      "                   started -> finished (includes the workers' dataset load on a\n"
      "                   cluster's first job, connection, the final evaluation and weight\n"
      "                   upload), for information only.\n"
      "  torch            rank 0: global examples of steps %lld..N-1 / seconds from the end of\n"
      "                   step %lld-1 to the end of step N-1 (load and process-group set-up excluded).\n"
      "  x train@%lld      per repeat, examples/s / the mean of that repeat's two lockstep-train\n"
      "                   batch-%lld runs (one at its start, one at its end); median over repeats.\n"
      "  x train@B        the same against lockstep-train at the run's global batch B, where run.\n",
      absl::GetFlag(FLAGS_poll_ms), static_cast<long long>(warmup_),
      static_cast<long long>(warmup_), static_cast<long long>(warmup_),
      static_cast<long long>(batch_), static_cast<long long>(batch_));
}

double ScalingBench::RatioMedian(const std::string& key, const std::string& denominator) const {
  auto it = samples_.find(key);
  if (it == samples_.end()) return 0;
  std::vector<double> ratios;
  for (const auto& [rep, s] : it->second) {
    double d = 0;
    if (denominator == "train128") {
      auto a = samples_.find("train128a"), b = samples_.find("train128b");
      std::vector<double> both;
      if (a != samples_.end() && a->second.count(rep)) both.push_back(a->second.at(rep).eps);
      if (b != samples_.end() && b->second.count(rep)) both.push_back(b->second.at(rep).eps);
      for (double v : both) d += v / both.size();
    } else if (auto dn = samples_.find(denominator);
               dn != samples_.end() && dn->second.count(rep)) {
      d = dn->second.at(rep).eps;
    }
    if (d > 0) ratios.push_back(s.eps / d);
  }
  return Median(ratios);
}

void ScalingBench::PrintTable() const {
  std::printf("\n%-48s %2s %6s %6s %10s %11s %9s %8s %7s  %s\n", "run", "K", "b/proc", "global",
              "ex/s", absl::StrCat("x train@", batch_).c_str(), "x train@B", "coord", "wall s",
              "ex/s of each repeat (thousands)");
  bool any_fallback = false;
  for (const Run& r : runs_) {
    const std::string key = r.same_as.empty() ? r.key : r.same_as;
    const std::string data_key = key == "train128" ? "train128a" : key;
    auto it = samples_.find(data_key);
    std::string label = r.label;
    if (!r.same_as.empty()) label += " (same job as weak)";
    if (it == samples_.end() || it->second.empty()) {
      std::printf("%-48s %2d %6lld %6lld %10s   %s\n", label.c_str(), r.k,
                  static_cast<long long>(r.global_batch / r.k),
                  static_cast<long long>(r.global_batch), "FAILED",
                  failures_.count(key) ? failures_.at(key).c_str() : "");
      continue;
    }
    std::vector<double> eps, wall, coord;
    std::vector<std::string> each;
    for (const auto& [rep, s] : it->second) {
      eps.push_back(s.eps);
      wall.push_back(s.wall);
      coord.push_back(s.coord_eps);
      each.push_back(absl::StrFormat("%.1f%s", s.eps / 1000, s.fallback ? "*" : ""));
      any_fallback |= s.fallback;
    }
    if (key == "train128") {  // both anchor runs of every repeat
      eps.clear();
      each.clear();
      for (const char* k : {"train128a", "train128b"}) {
        if (!samples_.count(k)) continue;
        for (const auto& [rep, s] : samples_.at(k)) {
          eps.push_back(s.eps);
          each.push_back(absl::StrFormat("%.1f", s.eps / 1000));
        }
      }
    }
    const std::string at_b = absl::StrCat("train", r.global_batch);
    const double rb = r.global_batch == batch_ ? RatioMedian(data_key, "train128")
                      : samples_.count(at_b)   ? RatioMedian(data_key, at_b)
                                               : 0;
    const double ra = key == "train128" ? 1.0 : RatioMedian(data_key, "train128");
    const bool cluster = r.kind == Run::kCluster;
    std::printf("%-48s %2d %6lld %6lld %10.0f %10.2fx %9s %8s %7s  %s\n", label.c_str(), r.k,
                static_cast<long long>(r.global_batch / r.k),
                static_cast<long long>(r.global_batch), Median(eps), ra,
                rb > 0 ? absl::StrFormat("%.2fx", key == "train128" ? 1.0 : rb).c_str() : "-",
                cluster ? absl::StrFormat("%.0f", Median(coord)).c_str() : "-",
                cluster ? absl::StrFormat("%.1f", Median(wall)).c_str() : "-",
                absl::StrJoin(each, " ").c_str());
  }
  if (any_fallback) {
    std::printf("* too few GetJob polls inside the timed window (a very short job): the "
                "coordinator's figure is used\n");
  }
}

int ScalingBench::PrintTargets() const {
  struct Target {
    std::string key, what;
    double min, aim;
  };
  const std::vector<Target> targets = {
      {"k1_tcp_one", "K=1 (ring tcp) >= 0.95x lockstep-train", 0.95, 0},
      {"k2_tcp_weak", "K=2 weak ring tcp >= 1.4x (aim 1.6x)", 1.4, 1.6},
      {"k2_grpc_weak", "K=2 weak ring grpc >= 1.2x", 1.2, 0},
      {"k2_shm_weak", "K=2 weak ring shm (one host) >= 1.4x (the tcp target)", 1.4, 1.6},
      {"k2_ps1_weak", "K=2 weak ps S=1 grpc (coordinator hosts the shard) >= 0.9x", 0.9, 0},
      {"k2_ps2_weak", "K=2 weak ps S=2 grpc (two lockstep-server shards) >= 0.9x", 0.9, 0},
      {"k2_ps1t_weak", "K=2 weak ps S=1 tcp (coordinator hosts the shard) >= 0.9x", 0.9, 0},
      {"k2_ps2t_weak", "K=2 weak ps S=2 tcp (two lockstep-server shards) >= 0.9x", 0.9, 0},
  };
  std::printf("\nTargets (ratio to lockstep-train at batch %lld, median over repeats):\n",
              static_cast<long long>(batch_));
  int missed = 0;
  for (const Target& t : targets) {
    if (!samples_.count(t.key) || samples_.at(t.key).empty()) {
      std::printf("  %-7s %-62s (%s)\n", "MISSED", t.what.c_str(),
                  failures_.count(t.key) ? "run failed" : "not run");
      ++missed;
      continue;
    }
    const double r = RatioMedian(t.key, "train128");
    const bool met = r >= t.min;
    missed += !met;
    std::printf("  %-7s %-62s %.3fx%s\n", met ? "met" : "MISSED", t.what.c_str(), r,
                t.aim > 0 ? (r >= t.aim ? "  (aim reached)" : "  (aim not reached)") : "");
  }
  std::printf("  %d of %zu targets missed\n", missed, targets.size());
  for (int k : worlds_) {
    const std::string key = absl::StrCat("trainx", k);
    if (k == 1 || !samples_.count(key) || samples_.at(key).empty()) continue;
    std::printf("  ceiling: %d lockstep-train processes at once (no communication, no service) "
                "reach %.3fx\n",
                k, RatioMedian(key, "train128"));
  }
  return missed;
}

}  // namespace lockstep::bench
