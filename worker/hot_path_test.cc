// "No allocation or page fault on a step's hot path after the first step"
// (issue 9), measured.
//
// Each case runs K JobRunners, one per thread (the job thread: the thread
// that calls JobRunner::Run), over the in-process transport (K = 1, 2, 4)
// or the raw-TCP transport on loopback (K = 2), for kSteps steps of an MLP
// on a generated 784-feature dataset whose epochs end inside the run (a
// short last batch, a new permutation).
//
// Which threads are counted: rank r's thread group = its job thread plus
// every thread started from a thread of the group (this binary wraps
// pthread_create so a new thread inherits its creator's group): the
// StepCombiner's combine thread, and with TCP the transport's writer
// thread (the test creates rank r's TcpTransport on rank r's thread). Not
// counted: gtest's main thread, the TCP hub's accept thread.
//
// What is counted, per group and per step window. The observer's OnStep(t)
// is called on the job thread at the end of step t; window t is the
// group's work between OnStep(t-1) and OnStep(t), i.e. step t.
//   * heap allocations: this binary links worker/alloc_counting, which
//     replaces malloc/calloc/realloc/memalign/posix_memalign/aligned_alloc/
//     valloc/pvalloc (operator new calls malloc) with wrappers that count
//     per group and call glibc's __libc_* functions. What a thread allocates on behalf of a peer
//     (e.g. an in-process Send that queues a message in the peer's mailbox)
//     counts for the sender's group.
//   * minor page faults: getrusage(RUSAGE_THREAD).ru_minflt of the job
//     thread plus field 10 (minflt) of /proc/self/task/TID/stat of each
//     other thread of the group.
//   * threads started: a thread started per step would be a cost too.
// Expected, over the windows t >= 2 that write no log line:
//   * the worker's data path (the raw-TCP transport, and K = 1): 0
//     allocations, 0 threads started, at most 1 minor fault per rank (a
//     cold path's first run: the TCP writer thread's first backlog, a lazily
//     bound libc symbol; printed when it happens);
//   * the in-process test transport (K = 2, 4): 0 threads started, at most
//     8 allocations per rank: its mailbox pool adds a buffer whenever more
//     messages are queued at once than ever before, which the scheduling of
//     K ranks as threads on two cores can make happen a few steps in.
// Windows that write a log line (the job runner's "epoch done" line at an
// epoch's end; "training" lines every 10 s) are reported, not required to
// be zero: formatting a log line allocates, and it happens once per epoch
// or per 10 s, not per step.
// Before each case K threads run large gemms at once (WarmBlasBuffers):
// OpenBLAS packs into buffers from a shared pool, so K job threads in one
// process may meet a buffer that is not yet touched late in a run; a worker
// process has one job thread computing.
//
// With `state_board` (on_divergence=repair armed, as lockstep-worker runs
// every K > 1 job): each rank has a StateBoard and a fetch function, so the
// divergence check rides in every combine (8 identity floats per rank
// written by the id writer, which waits for the reporter thread's weights +
// block + optimizer hashes of the previous step, and read back after the
// combine); no fault is injected, so no state is ever copied.
//
// The reporter, observer and log sink are fakes that do not allocate.
// Under AddressSanitizer (which owns malloc) the test is skipped.
//
// Diagnosis: LOCKSTEP_HOT_PATH_TRACE=1 prints the stack of every allocation
// a group makes in windows 2.. (after its step 1) to stderr.
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/collective/ps_aggregator.h"
#include "common/blas.h"
#include "common/collective/inproc_transport.h"
#include "common/log.h"
#include "common/process_stats.h"
#include "common/rng.h"
#include "common/train/state_board.h"
#include "gtest/gtest.h"
#include "worker/combiner.h"
#include "worker/job_runner.h"
#include "common/net/data_auth.h"
#include "worker/alloc_counting.h"
#include "worker/net/tcp_transport.h"

namespace lockstep {
namespace {

using alloc_counting::kMaxThreadsPerGroup;
#ifdef LOCKSTEP_COUNT_ALLOCATIONS
using alloc_counting::CurrentGroup;
using alloc_counting::GroupAllocations;
using alloc_counting::GroupMinorFaults;
using alloc_counting::GroupThreads;
using alloc_counting::JoinGroup;
using alloc_counting::LeaveGroup;
using alloc_counting::ResetGroups;
using alloc_counting::ThreadAllocations;
using alloc_counting::TraceGroup;
#endif

constexpr int64_t kSteps = 24;
constexpr int64_t kPerRankBatch = 128;
constexpr int64_t kDim = 784;
constexpr int kClasses = 10;

// Log lines written by this thread (the sink is called on the logging
// thread).
thread_local int64_t t_log_lines = 0;

class CountingNullSink final : public LogSink {
 public:
  void Write(absl::string_view) override { ++t_log_lines; }
};

// Snapshots its group's counters at every OnStep (no allocation: the
// arrays are sized before Run()).
class SnapshotObserver final : public StepObserver {
 public:
  explicit SnapshotObserver(int group)
      : group_(group),
        allocations_(kSteps, -1),
        faults_(kSteps, -1),
        threads_(kSteps, -1),
        lines_(kSteps, -1),
        thread_faults_(kSteps * kMaxThreadsPerGroup, 0) {}
  // Which of the group's threads faulted in window t, e.g. " #0:84".
  std::string FaultingThreads(int64_t t) const {
    std::string out;
    for (int i = 0; i < kMaxThreadsPerGroup; ++i) {
      const int64_t d = thread_faults_[t * kMaxThreadsPerGroup + i] -
                        thread_faults_[(t - 1) * kMaxThreadsPerGroup + i];
      if (d != 0) absl::StrAppend(&out, " #", i, ":", d);
    }
    return out;
  }
  void OnStep(const StepTiming& t) override {
    if (t.step < 0 || t.step >= kSteps) {
      ++bad_calls_;
      return;
    }
    if (calls_ == 0) first_thread_ = pthread_self();
    if (!pthread_equal(first_thread_, pthread_self())) ++bad_calls_;
    ++calls_;
#ifdef LOCKSTEP_COUNT_ALLOCATIONS
    faults_[t.step] = GroupMinorFaults(group_, &thread_faults_[t.step * kMaxThreadsPerGroup]);
    allocations_[t.step] = GroupAllocations(group_);
    threads_[t.step] = GroupThreads(group_);
    lines_[t.step] = t_log_lines;
    TraceGroup(group_, trace_ && t.step >= 1);  // traces windows 2..
#endif
  }
  const int group_;
  const bool trace_ = getenv("LOCKSTEP_HOT_PATH_TRACE") != nullptr;
  int64_t calls_ = 0;
  int64_t bad_calls_ = 0;
  pthread_t first_thread_{};
  std::vector<int64_t> allocations_, faults_, threads_, lines_;
  std::vector<int64_t> thread_faults_;  // [step][thread of the group]
};

class SilentReporter final : public JobReporter {
 public:
  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest&) override { return false; }
  absl::Status ReportEval(const v1::ReportEvalRequest&) override { return absl::OkStatus(); }
  absl::Status UploadWeights(uint64_t, const Replica&) override { return absl::OkStatus(); }
};

// A 784-feature, 10-class dataset (uniform features, class = a function of
// the first features); 8 batches per epoch with a short last one.
TrainTest Generated(int world) {
  TrainTest data;
  Dataset& d = data.train;
  d.name = "generated";
  d.dim = kDim;
  d.num_classes = kClasses;
  d.num_examples = 8 * kPerRankBatch * world - 24;
  SplitMix64 rng(11);
  d.x.resize(d.num_examples * kDim);
  d.y.resize(d.num_examples);
  for (int64_t i = 0; i < d.num_examples; ++i) {
    float best = -1;
    int label = 0;
    for (int64_t j = 0; j < kDim; ++j) {
      const float v = rng.NextFloat();
      d.x[i * kDim + j] = v;
      if (j < kClasses && v > best) best = v, label = static_cast<int>(j);
    }
    d.y[i] = static_cast<float>(label);
  }
  return data;
}

struct Case {
  std::string model;
  int world;
  bool tcp;
  std::string optimizer = "sgd";
  int ps_shards = 0;  // > 0: ps mode over in-process shards
  bool state_board = false;  // divergence repair armed (see the header)
};

std::string CaseName(const Case& c) {
  return absl::StrCat(c.model, " K=", c.world,
                      c.ps_shards > 0 ? absl::StrCat(" ps S=", c.ps_shards)
                                      : std::string(c.tcp ? " tcp" : " inproc"),
                      " ", c.optimizer, c.state_board ? " +state board" : "");
}

struct RankResult {
  explicit RankResult(int group) : observer(group) {}
  absl::Status status;
  SnapshotObserver observer;
  int64_t id_slots = -1;  // the replica's identity slots after the run
};

// OpenBLAS hands each gemm call a packing buffer from a shared pool (the
// first free slot), touching only as much of it as that call's shape needs.
// Here K job threads in ONE process call gemm at once, so a thread may get
// a slot that only smaller calls (or none) used before and fault in its
// pages late in the run; in a worker process one job thread computes and
// always gets the same slot. So first, K threads run large gemms at once,
// several rounds, until every slot they can meet is fully touched.
void WarmBlasBuffers(int k) {
  const int64_t n = 768;
  std::vector<float> a(n * n, 1.0f), b(n * n, 1.0f);
  std::vector<std::vector<float>> c(k, std::vector<float>(n * n));
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < k; ++i) {
      threads.emplace_back([&, i] {
        for (bool ta : {false, true}) {
          for (bool tb : {false, true}) {
            Gemm(ta, tb, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c[i].data(), n);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
}

#ifndef LOCKSTEP_COUNT_ALLOCATIONS
void RunCase(const Case&) {
  GTEST_SKIP() << "ASan/TSan replace malloc; allocations are not counted";
}
#else
void RunCase(const Case& c) {
  // As the worker daemon does (--blas_threads, default 1): a multi-threaded
  // OpenBLAS gemm mallocs its job table on every call.
  SetBlasThreads(1);
  const int k = c.world;
  WarmBlasBuffers(k);
  const TrainTest data = Generated(k);
  v1::JobSpec spec;
  spec.set_model(c.model);
  spec.set_sync_mode(c.ps_shards > 0 ? v1::PS : v1::RING);
  if (c.ps_shards > 0) spec.set_ps_shards(c.ps_shards);
  spec.set_num_workers(k);
  spec.set_global_batch(kPerRankBatch * k);
  spec.set_steps(kSteps);
  spec.set_seed(3);
  spec.mutable_optimizer()->set_kind(c.optimizer);
  if (c.optimizer == "sgd") spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(0.01f);

  ResetGroups();
  // Rank r's transport is made on rank r's thread (so a TCP transport's
  // writer thread is in rank r's group); the hub's accept thread is not
  // counted.
  InProcessHub inproc(k);
  std::unique_ptr<TcpPeerHub> tcp_hub;
  std::string tcp_addr;
  if (c.tcp) {
    auto hub = TcpPeerHub::Start("127.0.0.1", 0);
    ASSERT_TRUE(hub.ok()) << hub.status();
    tcp_hub = *std::move(hub);
    tcp_addr = absl::StrCat("127.0.0.1:", tcp_hub->port());
  }
  auto sink = std::make_shared<CountingNullSink>();
  const Logger logger(sink, std::make_shared<RealClock>());
  SilentReporter reporter;
  // ps: all ranks share one set of in-process shards per buffer length
  // (the shape-agreement round is shorter), made on first use.
  absl::Mutex ps_mu;
  std::map<int64_t, std::vector<std::unique_ptr<PsClient>>> ps_by_len;
  PsCombiner::Connect connect = [&](int64_t n) -> absl::StatusOr<std::vector<PsClient*>> {
    absl::MutexLock l(&ps_mu);
    auto& clients = ps_by_len[n];
    if (clients.empty()) clients = MakeInProcessPsClients(k, c.ps_shards, n);
    std::vector<PsClient*> ptrs;
    for (auto& client : clients) ptrs.push_back(client.get());
    return ptrs;
  };
  // Repair armed: each rank's state board, and a fetch from a peer's (as
  // FetchState does, polling until the peer publishes; never called here).
  std::vector<std::unique_ptr<StateBoard>> boards;
  for (int r = 0; r < k; ++r) boards.push_back(std::make_unique<StateBoard>());
  auto fetch = [&boards](int peer, int64_t step, int64_t expected,
                         absl::Time deadline) -> absl::StatusOr<std::string> {
    while (absl::Now() < deadline) {
      if (auto s = boards[peer]->Find(42, step); s != nullptr) {
        if (static_cast<int64_t>(s->size()) != expected) {
          return absl::FailedPreconditionError("state size");
        }
        return *s;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    return absl::DeadlineExceededError("not published");
  };
  std::vector<std::unique_ptr<RankResult>> results;
  for (int r = 0; r < k; ++r) results.push_back(std::make_unique<RankResult>(r + 1));
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r) {
    threads.emplace_back([&, r] {
      JoinGroup(r + 1);
      std::unique_ptr<TcpTransport> tcp;
      Transport* transport = inproc.endpoint(r);
      if (c.tcp) {
        TcpTransportOptions to;
        to.secret = std::string(dataauth::kSecretBytes, 'h');  // the job's data-plane secret
        auto t = TcpTransport::Create(tcp_hub.get(), /*group=*/42, r,
                                      std::vector<std::string>(k, tcp_addr), to);
        if (!t.ok()) {
          results[r]->status = t.status();
          return;
        }
        tcp = *std::move(t);
        transport = tcp.get();
      }
      JobRunnerOptions o;
      o.job_id = 42;
      o.spec = spec;
      o.rank = r;
      o.world = k;
      o.worker_id = absl::StrCat("w-", r);
      o.combine_timeout = absl::Seconds(60);
      o.observer = &results[r]->observer;
      o.logger = &logger;
      if (c.state_board) {
        o.state_board = boards[r].get();
        o.fetch_state = fetch;
      }
      RingCombiner ring(transport);
      PsCombiner ps(connect, r);
      GradientCombiner* combiner = &ring;
      if (c.ps_shards > 0) combiner = &ps;
      JobRunner runner(o, &data, combiner, &reporter);
      results[r]->status = runner.Run().status();
      if (runner.replica() != nullptr) results[r]->id_slots = runner.replica()->id_slots();
      LeaveGroup();
    });
  }
  for (auto& t : threads) t.join();

  // Per window: allocations, faults; split by "wrote a log line".
  int64_t quiet_windows = 0, quiet_allocs = 0, quiet_faults = 0, quiet_threads = 0;
  std::string log_windows;
  for (int r = 0; r < k; ++r) {
    const SnapshotObserver& ob = results[r]->observer;
    ASSERT_TRUE(results[r]->status.ok()) << CaseName(c) << " rank " << r << ": "
                                         << results[r]->status;
    ASSERT_EQ(ob.calls_, kSteps) << "OnStep must be called once per step";
    // The divergence check rode in every combine exactly when armed.
    ASSERT_EQ(results[r]->id_slots, c.state_board ? 8 * k : 0) << CaseName(c);
    ASSERT_EQ(ob.bad_calls_, 0) << "OnStep must be called on the job thread, steps 0.."
                                << kSteps - 1;
    std::string per_step;
    int64_t rank_allocs = 0, rank_faults = 0, rank_threads = 0;
    for (int64_t t = 2; t < kSteps; ++t) {
      const int64_t allocs = ob.allocations_[t] - ob.allocations_[t - 1];
      const int64_t faults = ob.faults_[t] - ob.faults_[t - 1];
      const int64_t started = ob.threads_[t] - ob.threads_[t - 1];
      const bool logged = ob.lines_[t] != ob.lines_[t - 1];
      if (logged) {
        absl::StrAppend(&log_windows, " r", r, "/step", t, ":", allocs, "a,", faults, "f,",
                        started, "t");
        continue;
      }
      ++quiet_windows;
      rank_allocs += allocs;
      rank_faults += faults;
      rank_threads += started;
      if (allocs != 0 || faults != 0 || started != 0) {
        absl::StrAppend(&per_step, " step", t, ":", allocs, "a,", faults, "f,", started, "t");
        if (faults != 0) absl::StrAppend(&per_step, " (faults by thread", ob.FaultingThreads(t), ")");
      }
    }
    quiet_allocs += rank_allocs;
    quiet_faults += rank_faults;
    quiet_threads += rank_threads;
    const std::string what = absl::StrCat(
        CaseName(c), " rank ", r,
        ": allocations (a) / minor page faults (f) / threads started (t) in steps that write "
        "no log line:", per_step);
    EXPECT_EQ(rank_threads, 0) << what;
    if (c.tcp || k == 1 || c.ps_shards > 0) {
      // The worker's data path (and the ps shards, which need no mailbox):
      // nothing. One fault is allowed for a cold path's first run (the TCP
      // writer thread's first backlog, a page of stack or code) and is
      // printed.
      EXPECT_EQ(rank_allocs, 0) << what;
      EXPECT_LE(rank_faults, 1) << what;
    } else {
      // The in-process test transport (ranks as threads, one mailbox per
      // rank): its buffer pool grows whenever more messages are queued at
      // once than ever before, which two cores' scheduling can make happen
      // a few steps in. Bounded, and printed.
      EXPECT_LE(rank_allocs, 8) << what;
    }
    if (!per_step.empty()) std::printf("  %s\n", what.c_str());
    // Steps 0 and 1, for the record.
    std::printf("  %s rank %d: %lld thread(s) in its group; step 1: %lld allocations, %lld "
                "minor faults\n",
                CaseName(c).c_str(), r, static_cast<long long>(ob.threads_[kSteps - 1]),
                static_cast<long long>(ob.allocations_[1] - ob.allocations_[0]),
                static_cast<long long>(ob.faults_[1] - ob.faults_[0]));
  }
  std::printf(
      "hot path %s: steps 2..%lld, %d rank(s): %lld step windows without a log line: %lld "
      "allocations, %lld minor page faults, %lld threads started; windows with a log "
      "line:%s\n",
      CaseName(c).c_str(), static_cast<long long>(kSteps - 1), k,
      static_cast<long long>(quiet_windows), static_cast<long long>(quiet_allocs),
      static_cast<long long>(quiet_faults), static_cast<long long>(quiet_threads),
      log_windows.empty() ? " none" : log_windows.c_str());
  std::fflush(stdout);
}

#endif  // LOCKSTEP_COUNT_ALLOCATIONS

TEST(HotPathTest, CountingWorks) {
#ifndef LOCKSTEP_COUNT_ALLOCATIONS
  GTEST_SKIP() << "ASan/TSan replace malloc";
#else
  ResetGroups();
  const int64_t before = ThreadAllocations();
  static std::vector<int>* volatile keep;
  auto* p = new std::vector<int>(1000);
  keep = p;
  (void)keep;
  const int64_t after = ThreadAllocations();
  delete p;
  EXPECT_GE(after - before, 2);  // the vector object and its buffer
  EXPECT_EQ(GroupAllocations(7), 0);
  // A thread of group 7 and the thread it starts count for group 7.
  int64_t grandchild_faults = -1;
  std::thread([&] {
    JoinGroup(7);
    const int64_t g0 = GroupAllocations(7);
    std::string s(100, 'x');
    EXPECT_EQ(GroupAllocations(7) - g0, 1);
    std::thread([&] {
      EXPECT_EQ(CurrentGroup(), 7);
      const int64_t f0 = ThreadMinorPageFaults();
      const int64_t g1 = GroupAllocations(7);
      std::vector<char> big(8 << 20, 1);  // 2048 fresh pages
      EXPECT_EQ(GroupAllocations(7) - g1, 1);
      grandchild_faults = ThreadMinorPageFaults() - f0;
      EXPECT_GE(GroupMinorFaults(7), grandchild_faults);
    }).join();
    LeaveGroup();
  }).join();
  EXPECT_EQ(GroupThreads(7), 2);
  EXPECT_GE(grandchild_faults, 4);  // 2 MiB pages at worst
  // The other threads' allocations are not this thread's: it only made
  // the std::thread (its state object; at most 2 allocations).
  EXPECT_LE(ThreadAllocations() - after, 2);
#endif
}

TEST(HotPathTest, MlpInProcessK1) { RunCase({"mlp:256", 1, false}); }
TEST(HotPathTest, MlpInProcessK2) { RunCase({"mlp:256", 2, false}); }
TEST(HotPathTest, MlpInProcessK4) { RunCase({"mlp:256", 4, false}); }
// 407k parameters: the ring (not the direct exchange) at K = 2.
TEST(HotPathTest, WideMlpInProcessK2Ring) { RunCase({"mlp:512", 2, false}); }
TEST(HotPathTest, MlpAdamInProcessK2) { RunCase({"mlp:256", 2, false, "adam"}); }
TEST(HotPathTest, MlpTcpK2) { RunCase({"mlp:256", 2, true}); }
TEST(HotPathTest, WideMlpTcpK2Ring) { RunCase({"mlp:512", 2, true}); }
// ps mode over in-process shards: the worker side and the aggregator
// (PsAllReduce, PsShard) on the ranks' threads. Error context is formatted
// only on error (it was 6 allocations per rank and step), and the shard
// sizes every early-push buffer when a step slot is first used (it
// allocated them at the first push that overtook its predecessor:
// 2026-11-30, 4 allocations and ~400 faults at steps 2 and 5): held to the
// data path's bound, no allocation (no mailbox in ps mode).
TEST(HotPathTest, MlpInProcessPsK2S2) { RunCase({"mlp:256", 2, false, "sgd", 2}); }
// Divergence repair armed (a state board per rank; the identities ride in
// every combine): the same bounds as without it.
TEST(HotPathTest, MlpTcpK2StateBoard) { RunCase({"mlp:256", 2, true, "sgd", 0, true}); }
TEST(HotPathTest, MlpTcpK3StateBoard) { RunCase({"mlp:256", 3, true, "sgd", 0, true}); }

}  // namespace
}  // namespace lockstep
