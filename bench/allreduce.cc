// All-reduce benchmark: lockstep's gRPC peer transport + ring all-reduce
// (worker/net/grpc_transport.h, common/collective/ring_allreduce.h) against
// Open MPI's MPI_Allreduce over TCP, on one machine over loopback.
//
//   bazel run -c opt //bench:allreduce [-- --repeats=3 --worlds=2,4 ...]
//
// What it does (parent process; it never initialises gRPC itself):
//  1. Raw loopback TCP bandwidth: one socket pair sending 16 MiB messages in
//     both directions at once (the ceiling for any TCP all-reduce here).
//  2. Open MPI: runs bench/setup_mpi.sh if mpirun/mpicc are missing, then
//     compiles bench/mpi_allreduce.c with `mpicc -O2` into a temp dir.
//  3. A glibc probe: does a 64 MiB malloc use mmap under each environment
//     (as is, MALLOC_NOMMAP=1, MALLOC_MMAP_MAX_=0 + MALLOC_TRIM_THRESHOLD_)?
//  4. For each repeat and K in --worlds: K lockstep worker processes (this
//     binary re-executed with --worker; ports are OS-chosen and exchanged
//     through files in a temp dir), then mpirun -np K as is and with the
//     environment that really keeps big blocks off mmap.
//  5. Prints per (K, size) the median latency, algbw = bytes / time and
//     busbw = algbw * 2(K-1)/K (nccl-tests' definition), the ratios, and the
//     targets (met/MISSED).
//
// Timing: rank 0 times each call; warm-up calls first; per-size medians; the
// table shows the median over --repeats runs.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/allreduce_probes.h"
#include "bench/allreduce_rank.h"
#include "bench/bench_util.h"
#include "common/collective/ring_allreduce.h"

ABSL_FLAG(std::string, sizes, "4096,65536,1048576,16777216,67108864",
          "buffer sizes in bytes (float32 elements = size / 4)");
ABSL_FLAG(std::string, worlds, "2,4", "numbers of ranks K");
ABSL_FLAG(int, repeats, 3, "whole-benchmark repetitions; medians are shown");
ABSL_FLAG(bool, mpi, true, "also measure Open MPI's MPI_Allreduce");
ABSL_FLAG(bool, tcp, true, "measure raw loopback TCP bandwidth");
ABSL_FLAG(int64_t, segment_bytes, lockstep::kDefaultSegmentBytes,
          "ring all-reduce segment size");
ABSL_FLAG(int64_t, max_queued_bytes, 16 << 20,
          "GrpcTransportOptions.max_queued_bytes");
ABSL_FLAG(int64_t, direct_max_bytes, lockstep::kDefaultDirectMaxBytes,
          "AllReduceOptions.direct_max_bytes: the one-round direct exchange "
          "is used while (K-1) x buffer bytes stay within this, else the ring "
          "(0: ring only)");
ABSL_FLAG(int64_t, first_step_window_bytes, lockstep::kDefaultFirstStepWindowBytes,
          "AllReduceOptions.first_step_window_bytes");
ABSL_FLAG(int, send_buffer_bytes, 0, "TcpTransportOptions.send_buffer_bytes");
ABSL_FLAG(bool, progress_in_recv, true, "TcpTransportOptions.progress_in_recv");
ABSL_FLAG(bool, progress_mark, true,
          "TcpTransportOptions.progress / GrpcTransportOptions.progress: touch a ProgressMark "
          "whenever bytes (tcp) or messages (grpc) move, as a job's transport does (false: "
          "none, to measure what the touches cost)");
ABSL_FLAG(int, streams_per_peer, 2, "GrpcTransportOptions.streams_per_peer");
ABSL_FLAG(int, recv_spin_us, -1,
          "GrpcTransportOptions.recv_spin / TcpTransportOptions.recv_spin in "
          "microseconds; -1: the transport's default");
ABSL_FLAG(bool, stats, false, "workers print transport counters to stderr");
ABSL_FLAG(std::string, grpc_args, "",
          "extra integer gRPC channel args for the peer client channels and "
          "server, name=value,name=value");
ABSL_FLAG(std::string, mpi_source, "",
          "path of mpi_allreduce.c (default: from runfiles or the workspace)");
// Internal modes.
ABSL_FLAG(std::string, transports, "tcp,tcp_tls,grpc",
          "lockstep peer transports to measure, in table order: tcp_tls (raw TCP "
          "with --data_plane_tls: mutual TLS 1.3, certificates from deploy/certs.sh), tcp (raw "
          "sockets, worker/net/tcp_transport.h) and/or grpc "
          "(worker/net/grpc_transport.h); targets are judged for each");
ABSL_FLAG(std::string, certs_dir, "",
          "certificates for tcp_tls (deploy/certs.sh --out=DIR); empty: made in the temp dir");
ABSL_FLAG(bool, worker, false, "internal: run as one lockstep rank");
ABSL_FLAG(std::string, transport, "tcp", "internal: this worker's transport");
ABSL_FLAG(int, rank, 0, "internal: worker rank");
ABSL_FLAG(int, world, 2, "internal: worker world size");
ABSL_FLAG(std::string, dir, "", "internal: rendezvous directory");
ABSL_FLAG(bool, malloc_probe, false, "internal: report how malloc serves 64 MiB");

namespace lockstep {
namespace {

using allreduce_bench::ParseInts;
using allreduce_bench::ReadFile;
using allreduce_bench::RawLoopbackBandwidth;
using allreduce_bench::RunMallocProbe;
using bench::Median;

std::string HumanBytes(int64_t b) {
  if (b >= (1 << 20)) return absl::StrCat(b >> 20, " MiB");
  if (b >= (1 << 10)) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

// ---------------------------------------------------------------- processes

using Env = std::vector<std::pair<std::string, std::string>>;

// fork + exec `argv` with extra environment; stdout to `out_path` if set.
pid_t Spawn(const std::vector<std::string>& argv, const Env& env,
            const std::string& out_path) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    if (!out_path.empty()) {
      const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0) _exit(126);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

// Waits for all `pids` until `timeout`; kills the rest after it. Returns true
// if every process exited with status 0.
bool WaitAll(std::vector<pid_t> pids, absl::Duration timeout,
             const std::string& what) {
  const absl::Time deadline = absl::Now() + timeout;
  bool ok = true;
  while (!pids.empty()) {
    int status = 0;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      auto it = std::find(pids.begin(), pids.end(), p);
      if (it == pids.end()) continue;
      pids.erase(it);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "%s: process %d failed (status 0x%x)\n",
                     what.c_str(), p, status);
        ok = false;
      }
      continue;
    }
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "%s: timed out; killing %zu process(es)\n",
                   what.c_str(), pids.size());
      for (pid_t q : pids) kill(q, SIGKILL);
      for (pid_t q : pids) waitpid(q, &status, 0);
      return false;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return ok;
}

int RunCommand(const std::vector<std::string>& argv) {
  const pid_t pid = Spawn(argv, {}, "");
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// "RESULT bytes iters median_us min_us" lines -> bytes -> median_us.
std::map<int64_t, double> ParseResults(const std::string& text) {
  std::map<int64_t, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 4 || f[0] != "RESULT") continue;
    int64_t bytes;
    double med;
    if (absl::SimpleAtoi(f[1], &bytes) && absl::SimpleAtod(f[3], &med)) {
      out[bytes] = med;
    }
  }
  return out;
}

struct ProbeResult {
  std::string how;  // "mmap" / "heap"
  std::string freed;  // "kept" / "returned"
  double touch_ms = 0;
};

ProbeResult ProbeMalloc(const std::string& self, const Env& env,
                        const std::string& dir) {
  const std::string out = dir + "/probe.txt";
  const pid_t pid = Spawn({self, "--malloc_probe"}, env, out);
  WaitAll({pid}, absl::Seconds(30), "malloc probe");
  std::string text;
  ProbeResult r;
  if (ReadFile(out, &text)) {
    std::istringstream in(text);
    in >> r.how >> r.freed >> r.touch_ms;
  }
  return r;
}

std::string EnvToString(const Env& env) {
  if (env.empty()) return "(as is)";
  std::vector<std::string> parts;
  for (const auto& [k, v] : env) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrJoin(parts, " ");
}

// ---------------------------------------------------------------- parent

std::string FindFile(const std::string& flag_value, const std::string& rel) {
  std::vector<std::string> candidates;
  if (!flag_value.empty()) candidates.push_back(flag_value);
  candidates.push_back(rel);  // bazel run: cwd is the runfiles root
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    candidates.push_back(absl::StrCat(ws, "/", rel));
  }
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return "";
}

bool HaveCommand(const std::string& cmd) {
  return RunCommand({"sh", "-c", absl::StrCat("command -v ", cmd, " >/dev/null 2>&1")}) == 0;
}

// bytes -> median latency (us) for one run; empty on failure.
using RunResult = std::map<int64_t, double>;

RunResult RunLockstep(const std::string& self, int k, const std::string& dir,
                      const std::string& transport) {
  const std::string run_dir = absl::StrCat(dir, "/lockstep_", transport, "_k", k, "_", getpid(), "_",
                                           absl::ToUnixNanos(absl::Now()));
  mkdir(run_dir.c_str(), 0755);
  std::vector<pid_t> pids;
  for (int r = 0; r < k; ++r) {
    std::vector<std::string> argv = {
        self,
        "--worker",
        absl::StrCat("--transport=", transport),
        absl::StrCat("--rank=", r),
        absl::StrCat("--world=", k),
        absl::StrCat("--dir=", run_dir),
        absl::StrCat("--sizes=", absl::GetFlag(FLAGS_sizes)),
        absl::StrCat("--segment_bytes=", absl::GetFlag(FLAGS_segment_bytes)),
        absl::StrCat("--max_queued_bytes=", absl::GetFlag(FLAGS_max_queued_bytes)),
        absl::StrCat("--grpc_args=", absl::GetFlag(FLAGS_grpc_args)),
        absl::StrCat("--recv_spin_us=", absl::GetFlag(FLAGS_recv_spin_us)),
        absl::StrCat("--streams_per_peer=", absl::GetFlag(FLAGS_streams_per_peer)),
        absl::StrCat("--direct_max_bytes=", absl::GetFlag(FLAGS_direct_max_bytes)),
        absl::StrCat("--send_buffer_bytes=", absl::GetFlag(FLAGS_send_buffer_bytes)),
        absl::StrCat("--progress_in_recv=", absl::GetFlag(FLAGS_progress_in_recv) ? "true" : "false"),
        absl::StrCat("--progress_mark=", absl::GetFlag(FLAGS_progress_mark) ? "true" : "false"),
        absl::StrCat("--first_step_window_bytes=",
                     absl::GetFlag(FLAGS_first_step_window_bytes)),
        absl::StrCat("--stats=", absl::GetFlag(FLAGS_stats) ? "true" : "false"),
        absl::StrCat("--certs_dir=", absl::GetFlag(FLAGS_certs_dir))};
    pids.push_back(Spawn(argv, {}, r == 0 ? run_dir + "/out.0" : ""));
  }
  if (!WaitAll(pids, absl::Minutes(5), absl::StrCat("lockstep K=", k))) return {};
  std::string text;
  ReadFile(run_dir + "/out.0", &text);
  return ParseResults(text);
}

RunResult RunMpi(const std::string& mpi_binary, int k, const Env& env,
                 const std::string& dir) {
  std::vector<std::string> argv = {
      "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", absl::StrCat(k),
      "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
      "--mca", "mpi_yield_when_idle", "1"};
  for (const auto& [name, value] : env) {
    argv.push_back("-x");
    argv.push_back(name);
  }
  argv.push_back(mpi_binary);
  for (int64_t s : ParseInts(absl::GetFlag(FLAGS_sizes))) argv.push_back(absl::StrCat(s));
  const std::string out = absl::StrCat(dir, "/mpi_k", k, ".txt");
  const pid_t pid = Spawn(argv, env, out);
  if (!WaitAll({pid}, absl::Minutes(5), absl::StrCat("mpirun -np ", k))) return {};
  std::string text;
  ReadFile(out, &text);
  return ParseResults(text);
}

double BusBw(int64_t bytes, int k, double us) {
  if (us <= 0) return 0;
  return bytes / (us * 1e-6) * 2.0 * (k - 1) / k;
}

int RunParent(const std::string& self) {
  const std::vector<int64_t> sizes = ParseInts(absl::GetFlag(FLAGS_sizes));
  const std::vector<int64_t> worlds = ParseInts(absl::GetFlag(FLAGS_worlds));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const std::vector<std::string> transports =
      absl::StrSplit(absl::GetFlag(FLAGS_transports), ',', absl::SkipEmpty());
  for (const std::string& tr : transports) {
    if (tr != "tcp" && tr != "tcp_tls" && tr != "grpc") {
      std::fprintf(stderr, "--transports: '%s' is not tcp, tcp_tls or grpc\n", tr.c_str());
      return 2;
    }
  }
  char tmpl[] = "/tmp/lockstep_allreduce_XXXXXX";
  const char* tmp = mkdtemp(tmpl);
  if (tmp == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmp;
  if (std::find(transports.begin(), transports.end(), "tcp_tls") != transports.end() &&
      absl::GetFlag(FLAGS_certs_dir).empty()) {
    // deploy/certs.sh from this binary's runfiles (bazel run).
    const std::string pki = absl::StrCat(dir, "/pki");
    const std::string cmd = absl::StrCat("bash '", self, ".runfiles/lockstep/deploy/certs.sh' --out='",
                                         pki, "' 2>/dev/null");
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "cannot make certificates for tcp_tls: %s failed (pass --certs_dir)\n",
                   cmd.c_str());
      return 1;
    }
    absl::SetFlag(&FLAGS_certs_dir, pki);
  }
  std::printf("lockstep all-reduce benchmark (temp dir %s, %d repeat(s), %u cores)\n",
              dir.c_str(), repeats, std::thread::hardware_concurrency());

  // 1. Raw loopback TCP.
  double raw_bw = 0;
  if (absl::GetFlag(FLAGS_tcp)) {
    for (int sock_buf : {0, 4 << 20}) {
      std::vector<double> v;
      for (int i = 0; i < 3; ++i) {
        v.push_back(RawLoopbackBandwidth(16 << 20, 32, sock_buf));
      }
      const double bw = Median(v);
      std::printf("raw loopback TCP, one socket pair, both directions at once, "
                  "16 MiB messages, %s: %.2f GB/s per direction (median of 3)\n",
                  sock_buf == 0 ? "autotuned socket buffers"
                                : "SO_SNDBUF/SO_RCVBUF 4 MiB",
                  bw / 1e9);
      raw_bw = std::max(raw_bw, bw);
    }
  }

  // 2. Open MPI.
  std::string mpi_binary;
  Env nommap_env;
  if (absl::GetFlag(FLAGS_mpi)) {
    if (!HaveCommand("mpirun") || !HaveCommand("mpicc")) {
      const std::string setup = FindFile("", "bench/setup_mpi.sh");
      std::printf("Open MPI not found; running %s\n",
                  setup.empty() ? "bench/setup_mpi.sh (not found!)" : setup.c_str());
      if (setup.empty() || RunCommand({"bash", setup}) != 0) {
        std::printf("Open MPI setup failed: run `sudo bash bench/setup_mpi.sh` "
                    "and re-run; continuing without MPI.\n");
      }
    }
    const std::string src = FindFile(absl::GetFlag(FLAGS_mpi_source), "bench/mpi_allreduce.c");
    if (src.empty()) {
      std::printf("bench/mpi_allreduce.c not found (pass --mpi_source); no MPI\n");
    } else if (HaveCommand("mpicc")) {
      mpi_binary = dir + "/mpi_allreduce";
      if (RunCommand({"mpicc", "-O2", "-o", mpi_binary, src}) != 0) {
        std::printf("mpicc failed; no MPI\n");
        mpi_binary.clear();
      } else {
        std::string version;
        const std::string vfile = dir + "/mpirun_version.txt";
        WaitAll({Spawn({"mpirun", "--version"}, {}, vfile)}, absl::Seconds(30), "mpirun --version");
        ReadFile(vfile, &version);
        std::printf("MPI baseline: %s compiled with mpicc -O2\n",
                    std::string(version.substr(0, version.find('\n'))).c_str());
      }
    }
  }

  // 3. glibc probe: which environment really keeps 64 MiB blocks off mmap?
  const Env as_is = {};
  const Env claimed = {{"MALLOC_NOMMAP", "1"}};
  const Env real = {{"MALLOC_MMAP_MAX_", "0"}, {"MALLOC_TRIM_THRESHOLD_", "4294967296"}};
  const std::vector<Env> probes = {as_is, claimed, real};
  for (size_t i = 0; i < probes.size(); ++i) {
    const Env& e = probes[i];
    ProbeResult p = ProbeMalloc(self, e, dir);
    std::printf("glibc probe %-55s: 64 MiB malloc via %s, after free %s to the OS, "
                "next 64 MiB first touch %.1f ms\n",
                EnvToString(e).c_str(), p.how.c_str(),
                p.freed == "kept" ? "kept, not returned" : "returned",
                p.touch_ms);
    if (i == 2 && p.how == "heap") nommap_env = real;
  }
  if (nommap_env.empty()) {
    std::printf("MALLOC_MMAP_MAX_=0 did not keep blocks off mmap; the second MPI "
                "run uses it anyway\n");
    nommap_env = real;
  }

  // 4. Runs.
  // results[system][k][bytes] = medians over repeats
  std::map<std::string, std::map<int, std::map<int64_t, std::vector<double>>>> results;
  const absl::Time bench_start = absl::Now();
  for (int rep = 0; rep < repeats; ++rep) {
    for (int64_t k64 : worlds) {
      const int k = static_cast<int>(k64);
      std::printf("repeat %d/%d K=%d:", rep + 1, repeats, k);
      for (const std::string& tr : transports) {
        std::printf(" lockstep %s...", tr.c_str());
        std::fflush(stdout);
        for (auto& [b, us] : RunLockstep(self, k, dir, tr)) {
          results["lockstep_" + tr][k][b].push_back(us);
        }
      }
      if (!mpi_binary.empty()) {
        std::printf(" MPI as is...");
        std::fflush(stdout);
        for (auto& [b, us] : RunMpi(mpi_binary, k, as_is, dir)) results["mpi"][k][b].push_back(us);
        std::printf(" MPI no-mmap...");
        std::fflush(stdout);
        for (auto& [b, us] : RunMpi(mpi_binary, k, nommap_env, dir)) results["mpi_nommap"][k][b].push_back(us);
      }
      std::printf(" done (%.0f s so far)\n", absl::ToDoubleSeconds(absl::Now() - bench_start));
    }
  }

  // 5. Table.
  auto med = [&](const std::string& sys, int k, int64_t b) {
    auto& v = results[sys][k][b];
    return v.empty() ? 0.0 : Median(v);
  };
  std::printf("\nMedians over %d run(s). lat = median per-call latency (rank 0); "
              "algbw = bytes/lat; busbw = algbw*2(K-1)/K; GB/s = 1e9 B/s.\n"
              "MPI no-mmap = %s. ratio = lockstep busbw / best MPI busbw.\n\n",
              repeats, EnvToString(nommap_env).c_str());
  std::string head = absl::StrFormat("%2s %8s |", "K", "size");
  for (const std::string& tr : transports) {
    head += absl::StrFormat(" %6s us %8s %8s |", tr, "algbw", "busbw");
  }
  head += absl::StrFormat(" %10s %8s | %10s %8s |", "MPI us", "busbw",
                          "MPInomm us", "busbw");
  for (const std::string& tr : transports) {
    head += absl::StrFormat(" %6s", tr);
  }
  std::printf("%s\n", head.c_str());
  std::vector<std::string> targets;
  std::map<std::string, int> missed;
  for (int64_t k64 : worlds) {
    const int k = static_cast<int>(k64);
    for (int64_t b : sizes) {
      const double m1 = med("mpi", k, b);
      const double m2 = med("mpi_nommap", k, b);
      const double best_mpi_us =
          (m1 > 0 && m2 > 0) ? std::min(m1, m2) : std::max(m1, m2);
      std::string row = absl::StrFormat("%2d %8s |", k, HumanBytes(b));
      std::string ratios;
      for (const std::string& tr : transports) {
        const double l = med("lockstep_" + tr, k, b);
        row += absl::StrFormat(" %9.1f %8.3f %8.3f |", l,
                               l > 0 ? b / (l * 1e-6) / 1e9 : 0,
                               BusBw(b, k, l) / 1e9);
        const double ratio = best_mpi_us > 0 && l > 0
                                 ? BusBw(b, k, l) / BusBw(b, k, best_mpi_us)
                                 : 0;
        ratios += absl::StrFormat(" %5.2fx", ratio);
        if (best_mpi_us <= 0 || l <= 0) continue;
        auto target = [&](const std::string& what, bool met) {
          targets.push_back(absl::StrFormat("  %-6s %-4s K=%d %-7s %s",
                                            met ? "met" : "MISSED", tr, k,
                                            HumanBytes(b), what));
          if (!met) ++missed[tr];
        };
        if (b >= (64 << 10)) {
          target(absl::StrFormat("busbw >= 0.5x Open MPI (%.3fx)", ratio),
                 ratio >= 0.5);
        }
        if (b == (16 << 20) || b == (64 << 20)) {
          target(absl::StrFormat("busbw >= 1.0x Open MPI (%.3fx)", ratio),
                 ratio >= 1.0);
        }
        if (b == 4096) {
          const double lat_ratio = l / best_mpi_us;
          target(absl::StrFormat(
                     "latency <= 3x Open MPI (%.2fx: %.1f us vs %.1f us)",
                     lat_ratio, l, best_mpi_us),
                 lat_ratio <= 3.0);
        }
      }
      row += absl::StrFormat(" %10.1f %8.3f | %10.1f %8.3f |", m1,
                             BusBw(b, k, m1) / 1e9, m2, BusBw(b, k, m2) / 1e9);
      std::printf("%s%s\n", row.c_str(), ratios.c_str());
    }
  }
  if (raw_bw > 0) {
    for (const std::string& tr : transports) {
      const double l = med("lockstep_" + tr, 2, 16 << 20);
      if (l <= 0) continue;
      std::printf("\nK=2 16 MiB: lockstep %s busbw %.3f GB/s = %.0f%% of raw "
                  "loopback TCP (best of the two: %.2f GB/s per direction)",
                  tr.c_str(), BusBw(16 << 20, 2, l) / 1e9,
                  100 * BusBw(16 << 20, 2, l) / raw_bw, raw_bw / 1e9);
    }
    std::printf("\n");
  }
  if (std::find(transports.begin(), transports.end(), "tcp_tls") != transports.end() &&
      std::find(transports.begin(), transports.end(), "tcp") != transports.end()) {
    // --data_plane_tls's cost: the same run's medians side by side.
    std::printf("\nTLS cost (--data_plane_tls; same run, medians): tcp_tls latency / tcp latency\n");
    for (int64_t k64 : worlds) {
      const int k = static_cast<int>(k64);
      for (int64_t b : sizes) {
        const double plain = med("lockstep_tcp", k, b);
        const double tls = med("lockstep_tcp_tls", k, b);
        if (plain <= 0 || tls <= 0) continue;
        std::printf("  K=%d %8s: tcp %9.1f us (busbw %.3f GB/s)  tcp_tls %9.1f us (busbw %.3f "
                    "GB/s)  = %.2fx the time\n",
                    k, HumanBytes(b).c_str(), plain, BusBw(b, k, plain) / 1e9, tls,
                    BusBw(b, k, tls) / 1e9, tls / plain);
      }
    }
  }
  if (!targets.empty()) {
    std::string summary;
    for (const std::string& tr : transports) {
      summary += absl::StrFormat(" %s: %d missed;", tr, missed[tr]);
    }
    std::printf("\nTargets (%s):\n%s\n", summary.c_str(),
                absl::StrJoin(targets, "\n").c_str());
  }
  std::printf("total %.0f s\n", absl::ToDoubleSeconds(absl::Now() - bench_start));
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_malloc_probe)) return lockstep::RunMallocProbe();
  if (absl::GetFlag(FLAGS_worker)) return lockstep::allreduce_bench::RunRank();
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::perror("readlink /proc/self/exe");
    return 1;
  }
  self[n] = '\0';
  return lockstep::RunParent(self);
}
