#include "common/collective/ps_aggregator.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/collective/chunking.h"

namespace lockstep {

PsShard::PsShard(int num_workers, int64_t shard_len, int shard_index,
                 std::function<absl::Time()> clock)
    : num_workers_(num_workers),
      shard_len_(shard_len),
      shard_index_(shard_index),
      clock_(std::move(clock)) {
  ABSL_RAW_CHECK(num_workers >= 1, "PsShard: num_workers must be >= 1");
  ABSL_RAW_CHECK(shard_len >= 0, "PsShard: shard_len must be >= 0");
}

void PsShard::FoldLocked(Slot& slot, int worker,
                         absl::Span<const float> data) {
  if (worker == 0) {
    std::copy(data.begin(), data.end(), slot.acc.begin());
  } else {
    float* a = slot.acc.data();
    const float* x = data.data();
    for (int64_t i = 0; i < shard_len_; ++i) a[i] += x[i];
  }
  ++slot.folded;
}

absl::Status PsShard::Push(uint64_t job, int64_t step, int worker,
                           absl::Span<const float> shard_grad_sum,
                           int64_t count) {
  // Formatted only on error: no allocation on a step's hot path.
  auto where = [&] {
    return absl::StrFormat("ps shard %d: push (job %d step %d) from worker %d",
                           shard_index_, job, step, worker);
  };
  if (worker < 0 || worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: worker must be in [0, %d)", where(), num_workers_));
  }
  if (static_cast<int64_t>(shard_grad_sum.size()) != shard_len_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: gradient has %d floats, expected the shard length %d", where(),
        shard_grad_sum.size(), shard_len_));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: count is %d, expected >= 0", where(), count));
  }
  if (step < 0) {
    return absl::InvalidArgumentError(where() + ": step must be >= 0");
  }
  last_push_ns_.store(clock_ ? absl::ToUnixNanos(clock_()) : absl::GetCurrentTimeNanos(),
                      std::memory_order_relaxed);

  absl::MutexLock l(&mu_);
  Job& js = jobs_[job];
  if (IsGone(js, step)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: step is older than the retained steps %d and %d", where(),
        js.latest - 1, js.latest));
  }
  Slot& sl = js.slots[static_cast<uint64_t>(step) & 1];
  if (!sl.active || sl.step != step) {
    // The slot holds nothing or a step <= step - 2 (a newer one would have
    // made `step` gone): recycle its buffers for this step.
    sl.active = true;
    sl.step = step;
    sl.acc.resize(shard_len_);
    sl.early.resize(num_workers_);
    // Every buffer a push that overtakes its predecessors may need, sized
    // when the slot is first used (steps 0 and 1): a later step's early
    // push reuses it, so no step after the first two allocates. Worker 0 is
    // never early (it is folded first). The registry reserved these bytes
    // already (PsShardWorstCaseBytes: 2 steps x K buffers).
    for (int w = 1; w < num_workers_; ++w) sl.early[w].resize(shard_len_);
    sl.pushed.assign(num_workers_, 0);
    sl.counts.assign(num_workers_, 0);
    sl.folded = 0;
    sl.total_count = 0;
    if (!js.has_latest || step > js.latest) {
      js.has_latest = true;
      js.latest = step;
    }
    cv_.SignalAll();  // pulls of a recycled step must notice it is gone
  }
  if (sl.pushed[worker]) {
    if (sl.counts[worker] == count) return absl::OkStatus();  // duplicate
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: duplicate push with count %d, but the first push had count %d",
        where(), count, sl.counts[worker]));
  }
  int64_t total;
  if (__builtin_add_overflow(sl.total_count, count, &total)) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s: total example count overflows int64", where()));
  }
  sl.total_count = total;
  sl.pushed[worker] = 1;
  sl.counts[worker] = count;
  if (worker == sl.folded) {
    FoldLocked(sl, worker, shard_grad_sum);
  } else {
    sl.early[worker].assign(shard_grad_sum.begin(), shard_grad_sum.end());
  }
  while (sl.folded < num_workers_ && sl.pushed[sl.folded]) {
    FoldLocked(sl, sl.folded, sl.early[sl.folded]);
  }
  if (sl.folded == num_workers_) cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status PsShard::WaitComplete(uint64_t job, int64_t step, int worker,
                                   absl::Time deadline) {
  int64_t count = 0;
  return PullImpl(job, step, worker, nullptr, &count, deadline);
}

absl::Status PsShard::Pull(uint64_t job, int64_t step, int worker,
                           absl::Span<float> out, int64_t* count,
                           absl::Time deadline) {
  return PullImpl(job, step, worker, &out, count, deadline);
}

absl::Status PsShard::PullImpl(uint64_t job, int64_t step, int worker,
                               absl::Span<float>* out_or_null, int64_t* count,
                               absl::Time deadline) {
  auto where = [&] {
    return absl::StrFormat("ps shard %d: pull (job %d step %d) by worker %d",
                           shard_index_, job, step, worker);
  };
  if (worker < 0 || worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: worker must be in [0, %d)", where(), num_workers_));
  }
  if (out_or_null != nullptr &&
      static_cast<int64_t>(out_or_null->size()) != shard_len_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: output has %d floats, expected the shard length %d", where(),
        out_or_null->size(), shard_len_));
  }
  if (count == nullptr) {
    return absl::InvalidArgumentError(where() + ": count is null");
  }
  if (step < 0) {
    return absl::InvalidArgumentError(where() + ": step must be >= 0");
  }

  absl::MutexLock l(&mu_);
  bool timed_out = false;
  for (;;) {
    auto it = jobs_.find(job);
    const Slot* sl = nullptr;
    if (it != jobs_.end()) {
      const Job& js = it->second;
      if (IsGone(js, step)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: step is older than the retained steps %d and %d (garbage "
            "collected)",
            where(), js.latest - 1, js.latest));
      }
      const Slot& s = js.slots[static_cast<uint64_t>(step) & 1];
      if (s.active && s.step == step) sl = &s;
    }
    if (sl != nullptr && sl->folded == num_workers_) {
      if (out_or_null != nullptr) {
        std::copy(sl->acc.begin(), sl->acc.end(), out_or_null->begin());
      }
      *count = sl->total_count;
      return absl::OkStatus();
    }
    if (timed_out) {
      std::vector<int> missing;
      for (int w = 0; w < num_workers_; ++w) {
        if (sl == nullptr || !sl->pushed[w]) missing.push_back(w);
      }
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s: timed out after %d of %d pushes; missing pushes from "
          "workers [%s]",
          where(), num_workers_ - static_cast<int>(missing.size()),
          num_workers_, absl::StrJoin(missing, ", ")));
    }
    timed_out = cv_.WaitWithDeadline(&mu_, deadline);
  }
}

void PsShard::ForgetJob(uint64_t job) {
  absl::MutexLock l(&mu_);
  jobs_.erase(job);
  cv_.SignalAll();
}

std::vector<int64_t> PsShard::RetainedSteps(uint64_t job) const {
  absl::MutexLock l(&mu_);
  std::vector<int64_t> steps;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return steps;
  for (const Slot& s : it->second.slots) {
    if (s.active && !IsGone(it->second, s.step)) steps.push_back(s.step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

int64_t PsShardWorstCaseBytes(int num_workers, int64_t shard_len) {
  int64_t b = 0;
  if (num_workers < 0 || shard_len < 0 ||
      __builtin_mul_overflow(shard_len, int64_t{2} * sizeof(float), &b) ||
      __builtin_mul_overflow(b, static_cast<int64_t>(num_workers), &b)) {
    return -1;
  }
  return b;
}

namespace {
// The memory this process may use: physical memory, or its cgroup's limit
// when that is lower (a container or a Kubernetes pod: cgroup v2
// memory.max, v1 memory.limit_in_bytes; "max" or absent = none).
int64_t MemoryLimitBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  int64_t limit = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{8} << 30;
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    int64_t v = 0;
    if (f >> v && v > 0 && v < limit) limit = v;  // "max" fails to parse: no limit
  }
  return limit;
}

// Half of what the process may use: a shard's worst case is held from its
// first two steps (every early-push buffer is sized then).
int64_t DefaultMaxBytes() { return MemoryLimitBytes() / 2; }
}  // namespace

PsShardRegistry::PsShardRegistry(int max_jobs, int64_t max_shard_floats)
    : PsShardRegistry([&] {
        PsRegistryLimits l;
        l.max_jobs = max_jobs;
        l.max_shard_floats = max_shard_floats;
        return l;
      }()) {}

PsShardRegistry::PsShardRegistry(PsRegistryLimits limits)
    : limits_(std::move(limits)) {
  ABSL_RAW_CHECK(limits_.max_jobs >= 1, "PsShardRegistry: max_jobs must be >= 1");
  if (limits_.max_bytes <= 0) limits_.max_bytes = DefaultMaxBytes();
}

absl::Time PsShardRegistry::Now() const {
  return limits_.clock ? limits_.clock() : absl::Now();
}

void PsShardRegistry::EraseLocked(std::map<uint64_t, JobEntry>::iterator it) {
  held_bytes_ -= it->second.bytes;
  jobs_.erase(it);
}

PsShardRegistry::Eviction PsShardRegistry::EvictIdlestLocked(absl::Time now, uint64_t keep) {
  // Last activity of a key: its last GetShard, or a push into one of its
  // shards (the TCP data plane asks for a shard once per connection).
  auto last = [](const JobEntry& e) {
    absl::Time t = e.last_used;
    for (const auto& [i, sh] : e.shards) t = std::max(t, sh->last_push());
    return t;
  };
  Eviction out;
  auto idlest = jobs_.end();
  absl::Time idlest_last = absl::InfiniteFuture();
  for (auto j = jobs_.begin(); j != jobs_.end(); ++j) {
    if (j->first == keep) continue;
    const absl::Time t = last(j->second);
    if (t < idlest_last) {
      idlest = j;
      idlest_last = t;
    }
  }
  if (idlest == jobs_.end()) return out;
  out.idlest_job = idlest->first;
  out.idle_for = now - idlest_last;
  if (out.idle_for < limits_.active_window) return out;
  EraseLocked(idlest);
  out.evicted = true;
  return out;
}

absl::StatusOr<std::shared_ptr<PsShard>> PsShardRegistry::GetShard(
    uint64_t job, int shard, int num_workers, int64_t shard_len, absl::Time deadline) {
  auto bad = [&](const char* field, int64_t value, const std::string& expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: job ", job, " shard ", shard, ": ", field, " is ", value, ", expected ",
        expected));
  };
  if (num_workers < 1 || num_workers > kMaxWorkers) {
    return bad("num_workers", num_workers, absl::StrCat("1..", kMaxWorkers));
  }
  if (shard < 0 || shard >= kMaxShards) {
    return bad("shard", shard, absl::StrCat("0..", kMaxShards - 1));
  }
  if (shard_len < 0 || shard_len > limits_.max_shard_floats) {
    return bad("shard_len", shard_len,
               absl::StrCat("0..", limits_.max_shard_floats,
                            " floats (this server's largest shard)"));
  }
  // A key not held yet exists only if its coordinator started it (asked
  // without the registry's lock: key_shape may take the coordinator's,
  // which is held while it calls Forget).
  PsKeyShape shape;
  if (limits_.key_shape) {
    bool held = false;
    {
      absl::MutexLock lock(&mu_);
      held = jobs_.count(job) > 0;
    }
    if (!held) {
      absl::StatusOr<PsKeyShape> s = limits_.key_shape(job, deadline);
      if (!s.ok()) {
        return absl::Status(s.status().code(), absl::StrCat("ps: job ", job, " shard ", shard,
                                                            ": ", s.status().message()));
      }
      shape = *s;
      if (num_workers != shape.num_workers) {
        return bad("num_workers", num_workers,
                   absl::StrCat(shape.num_workers, " (the job's K, from its coordinator)"));
      }
    }
  }
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() && limits_.key_shape &&
      (shape.num_workers == 0 || forgotten_.count(job) > 0)) {
    // Held at the first look, or started by the coordinator, and dropped
    // since: a forgotten key (its job ended or regrouped) stays gone; one
    // evicted idle is asked for again by the next request.
    return absl::FailedPreconditionError(absl::StrCat(
        "ps: job ", job, " shard ", shard, ": the job key was ",
        forgotten_.count(job) > 0 ? "forgotten (its job ended or regrouped)"
                                  : "dropped meanwhile (evicted idle); retry"));
  }
  if (it != jobs_.end() && it->second.num_workers != num_workers) {
    return bad("num_workers", num_workers,
               absl::StrCat(it->second.num_workers, " (the job's K)"));
  }
  if (it != jobs_.end()) {
    auto sh = it->second.shards.find(shard);
    if (sh != it->second.shards.end()) {
      if (sh->second->shard_len() != shard_len) {
        return bad("shard_len", shard_len,
                   absl::StrCat(sh->second->shard_len(), " (the shard's length)"));
      }
      it->second.last_used = now;
      return sh->second;
    }
  }
  const int num_shards = it != jobs_.end() ? it->second.num_shards : shape.num_shards;
  if (num_shards > 0 && shard >= num_shards) {
    return bad("shard", shard,
               absl::StrCat("0..", num_shards - 1, " (the job's shards, from its coordinator)"));
  }
  const int64_t need = PsShardWorstCaseBytes(num_workers, shard_len);
  auto too_big = [&](bool all_active) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "ps: job ", job, " shard ", shard, ": K=", num_workers, " x shard_len ",
        shard_len, " needs up to ", need < 0 ? std::string("more than int64") : absl::StrCat(need),
        " bytes (2 steps x K buffers x 4 bytes); this server holds ", held_bytes_,
        " of its limit ", limits_.max_bytes, " bytes",
        all_active ? absl::StrCat(", all of it for jobs with a request in the last ",
                                  absl::FormatDuration(limits_.active_window))
                   : std::string()));
  };
  if (need < 0 || need > limits_.max_bytes) return too_big(false);
  // Memory of keys idle for active_window is given back (idlest first)
  // before a new shard is refused: finished jobs never say so.
  while (need > limits_.max_bytes - held_bytes_) {
    if (!EvictIdlestLocked(now, job).evicted) return too_big(true);
  }
  // The shape-agreement key of a group held here rides on its group.
  if (it == jobs_.end() && !RidesLocked(job, /*creating=*/job)) {
    while (CountedKeysLocked(job) >= limits_.max_jobs) {
      const Eviction e = EvictIdlestLocked(now, job);
      if (!e.evicted) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "ps: job ", job, ": this server holds ", CountedKeysLocked(job),
            " job keys (its limit, --max_jobs) and every one had a request in the last ",
            absl::FormatDuration(limits_.active_window),
            "; retry when one ends (the idlest, job ", e.idlest_job, ", was last used ",
            absl::FormatDuration(e.idle_for), " ago)"));
      }
    }
  }
  if (it == jobs_.end()) {
    it = jobs_.emplace(job, JobEntry()).first;
    it->second.num_workers = num_workers;
    it->second.num_shards = shape.num_shards;
  }
  std::shared_ptr<PsShard>& s = it->second.shards[shard];
  s = std::make_shared<PsShard>(num_workers, shard_len, shard, limits_.clock);
  it->second.bytes += need;
  held_bytes_ += need;
  it->second.last_used = now;
  return s;
}

bool PsShardRegistry::Forget(uint64_t job) {
  std::map<int, std::shared_ptr<PsShard>> shards;
  {
    absl::MutexLock lock(&mu_);
    if (limits_.key_shape && forgotten_.insert(job).second) {
      forgotten_order_.push_back(job);
      if (forgotten_order_.size() > kMaxForgotten) {
        forgotten_.erase(forgotten_order_.front());
        forgotten_order_.pop_front();
      }
    }
    auto it = jobs_.find(job);
    if (it == jobs_.end()) return false;
    shards.swap(it->second.shards);
    EraseLocked(it);
  }
  for (auto& [index, shard] : shards) shard->ForgetJob(job);  // outside the registry's lock
  return true;
}

bool PsShardRegistry::RidesLocked(uint64_t key, uint64_t creating) const {
  if ((key & kPsShapeKeyBit) == 0) return false;
  const uint64_t group = key & ~kPsShapeKeyBit;
  return group == creating || jobs_.count(group) > 0;
}

int PsShardRegistry::CountedKeysLocked(uint64_t creating) const {
  int n = 0;
  for (const auto& [key, entry] : jobs_) {
    if (!RidesLocked(key, creating)) ++n;
  }
  return n;
}

int PsShardRegistry::num_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

int64_t PsShardRegistry::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

void PsShardRegistry::CountPush(int64_t bytes) {
  pushes_.fetch_add(1, std::memory_order_relaxed);
  pushed_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void PsShardRegistry::CountPull(int64_t bytes) {
  pulls_.fetch_add(1, std::memory_order_relaxed);
  pulled_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

PsShardRegistry::Stats PsShardRegistry::stats() const {
  Stats s;
  s.pushes = pushes_.load(std::memory_order_relaxed);
  s.pulls = pulls_.load(std::memory_order_relaxed);
  s.pushed_bytes = pushed_bytes_.load(std::memory_order_relaxed);
  s.pulled_bytes = pulled_bytes_.load(std::memory_order_relaxed);
  return s;
}

absl::Status PsClient::StartRound(uint64_t job, int64_t step, int worker,
                                  absl::Span<const float> shard_grad_sum, int64_t count,
                                  absl::Time deadline, WireFormat wire) {
  if (wire == WireFormat::kFloat32) {
    return Push(job, step, worker, shard_grad_sum, count, deadline);
  }
  // What a 16-bit wire would deliver: each value rounded once.
  std::vector<float> rounded(shard_grad_sum.begin(), shard_grad_sum.end());
  RoundTrip16(wire, rounded.data(), static_cast<int64_t>(rounded.size()));
  return Push(job, step, worker, rounded, count, deadline);
}

absl::Status PsClient::FinishRound(uint64_t job, int64_t step, int worker,
                                   absl::Span<float> out, int64_t* count, absl::Time deadline,
                                   WireFormat wire) {
  absl::Status s = Pull(job, step, worker, out, count, deadline);
  if (s.ok() && wire != WireFormat::kFloat32) {
    RoundTrip16(wire, out.data(), static_cast<int64_t>(out.size()));
  }
  return s;
}

InProcessPsClient::InProcessPsClient(std::shared_ptr<PsShard> shard)
    : shard_(std::move(shard)) {
  ABSL_RAW_CHECK(shard_ != nullptr, "InProcessPsClient: shard is null");
}

absl::Status InProcessPsClient::Push(uint64_t job, int64_t step, int worker,
                                     absl::Span<const float> shard_grad_sum,
                                     int64_t count,
                                     absl::Time /*deadline: never blocks*/) {
  return shard_->Push(job, step, worker, shard_grad_sum, count);
}

absl::Status InProcessPsClient::Pull(uint64_t job, int64_t step, int worker,
                                     absl::Span<float> out, int64_t* count,
                                     absl::Time deadline) {
  return shard_->Pull(job, step, worker, out, count, deadline);
}

std::vector<std::unique_ptr<PsClient>> MakeInProcessPsClients(int num_workers,
                                                              int num_shards,
                                                              int64_t n) {
  ABSL_RAW_CHECK(num_shards >= 1, "MakeInProcessPsClients: num_shards < 1");
  std::vector<std::unique_ptr<PsClient>> clients;
  clients.reserve(num_shards);
  for (int s = 0; s < num_shards; ++s) {
    clients.push_back(std::make_unique<InProcessPsClient>(
        std::make_shared<PsShard>(num_workers,
                                  ShardBounds(n, num_shards, s).size(), s)));
  }
  return clients;
}

absl::Status PsAllReduce(absl::Span<PsClient* const> shards,
                         absl::Span<float> grad, int64_t* count,
                         const PsAllReduceOptions& o) {
  const int S = static_cast<int>(shards.size());
  const int64_t n = static_cast<int64_t>(grad.size());
  auto where = [&] {
    return absl::StrFormat("ps all-reduce (job %d step %d, worker %d, %d shards)",
                           o.job, o.step, o.worker, S);
  };
  if (S == 0) return absl::InvalidArgumentError(where() + ": no shards");
  for (int s = 0; s < S; ++s) {
    if (shards[s] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: client for shard %d is null", where(), s));
    }
  }
  if (count == nullptr) {
    return absl::InvalidArgumentError(where() + ": count is null");
  }
  if (*count < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: count is %d, expected >= 0", where(), *count));
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: timeout is %s, expected > 0", where(),
                        absl::FormatDuration(o.timeout)));
  }
  const absl::Time deadline = absl::Now() + o.timeout;
  auto fail = [&](const char* what, int s, const absl::Status& st) {
    return absl::Status(st.code(), absl::StrFormat("%s: %s shard %d: %s", where(),
                                                   what, s, st.message()));
  };
  for (int s = 0; s < S; ++s) {
    const Range rg = ShardBounds(n, S, s);
    absl::Status st = shards[s]->StartRound(
        o.job, o.step, o.worker, grad.subspan(rg.begin, rg.size()), *count,
        deadline, o.wire);
    if (!st.ok()) return fail("push to", s, st);
  }
  int64_t total = 0;
  for (int s = 0; s < S; ++s) {
    const Range rg = ShardBounds(n, S, s);
    int64_t c = 0;
    absl::Status st = shards[s]->FinishRound(
        o.job, o.step, o.worker, grad.subspan(rg.begin, rg.size()), &c,
        deadline, o.wire);
    if (!st.ok()) return fail("pull from", s, st);
    if (s == 0) {
      total = c;
    } else if (c != total) {
      return absl::InternalError(absl::StrFormat(
          "%s: shard %d reports a total count of %d but shard 0 reports %d",
          where(), s, c, total));
    }
  }
  *count = total;
  return absl::OkStatus();
}

}  // namespace lockstep
