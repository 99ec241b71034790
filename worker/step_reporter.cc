#include "worker/step_reporter.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {

namespace {
// How often a wait looks at the stop flag.
constexpr absl::Duration kStopPoll = absl::Milliseconds(20);

// WeightHash::ToHex into *out, reusing its storage (no allocation once the
// slots' strings have grown to 32 characters).
void SetHex(const WeightHash& h, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out->resize(32);
  for (int i = 0; i < 16; ++i) {
    (*out)[i] = kDigits[(h.hi >> (60 - 4 * i)) & 0xf];
    (*out)[16 + i] = kDigits[(h.lo >> (60 - 4 * i)) & 0xf];
  }
}
}  // namespace

void WarmReport(const std::string& worker_id, v1::ReportStepRequest* report) {
  report->set_worker_id(worker_id);
  report->mutable_weights_hash()->assign(32, '0');
  report->clear_weights_hash();  // keeps the storage
}

StepReporter::StepReporter(JobReporter* reporter, StepReporterOptions options)
    : reporter_(reporter), options_(std::move(options)) {
  {
    absl::MutexLock l(&mu_);
    slots_.resize(static_cast<size_t>(std::max(0, options_.lag)) + 1);
    for (Slot& s : slots_) {
      WarmReport(options_.worker_id, &s.report);
      Warm(&s.report);
    }
    repair_.ranks.reserve(64);
  }
  batch_.reserve(static_cast<size_t>(std::max(0, options_.lag)) + 1);
  thread_ = std::thread([this] { Loop(); });
}

StepReporter::~StepReporter() {
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
    // What is queued (an odd last report of a pair: the job thread ended
    // without Flush, e.g. with an error) goes out before the thread stops,
    // so the coordinator's check of that step completes; not for a job
    // whose stop flag is set (cancelled, or its worker is stopping), which
    // must not wait for another call.
    flushing_ = options_.stop == nullptr || !options_.stop->load();
  }
  thread_.join();
}

bool StepReporter::Ended() const { return stop_step_ >= 0 || !error_.ok(); }

bool StepReporter::HasRoom() const {
  return Ended() || submitted_ - answered_ <= std::max(0, options_.lag);
}

bool StepReporter::AllAnswered() const { return Ended() || answered_ == submitted_; }

int64_t StepReporter::Sendable(int64_t next) const {
  const int64_t queued = submitted_ - next;
  if (queued <= 0) return 0;
  // At most lag + 1 reports are ever queued: a batch of that size is full
  // whenever the job thread waits for room, so it never waits for a report
  // that was not sent.
  const int64_t batch = std::max(1, std::min(options_.batch, std::max(0, options_.lag) + 1));
  // A full batch, or what is queued once the job thread flushes (or nothing
  // more will come: the job ended).
  if (queued >= batch) return batch;
  return flushing_ || Ended() ? queued : 0;
}

absl::Status StepReporter::StateLocked() const {
  if (!error_.ok()) return error_;
  if (stop_step_ >= 0) {
    return absl::CancelledError(absl::StrCat(
        "job ", options_.job_id, " stopped by the coordinator (its reply to ",
        stop_first_ < stop_step_ ? absl::StrCat("the reports of steps ", stop_first_, "-")
                                 : "step ",
        stop_step_, stop_first_ < stop_step_ ? "" : "'s report", " said stop)"));
  }
  return absl::OkStatus();
}

absl::Status StepReporter::Await(bool (StepReporter::*ready)() const, const char* what) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (!(this->*ready)()) {
    if (options_.stop != nullptr && options_.stop->load()) {
      return absl::CancelledError(absl::StrCat("job ", options_.job_id, " stopped"));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      const int64_t step =
          answered_ < submitted_ ? SlotOf(answered_).report.step() : submitted_;
      return absl::DeadlineExceededError(
          absl::StrCat("coordinator: ", what, " (step ", step, " of job ", options_.job_id,
                       ") not there within ", absl::FormatDuration(options_.timeout)));
    }
    mu_.AwaitWithTimeout(absl::Condition(this, ready), std::min(kStopPoll, deadline - now));
  }
  return absl::OkStatus();
}

absl::Status StepReporter::WaitForRoom() {
  absl::MutexLock l(&mu_);
  if (absl::Status s = StateLocked(); !s.ok()) return s;
  if (absl::Status s = Await(&StepReporter::HasRoom, "the reply to a step report"); !s.ok()) {
    return s;
  }
  return StateLocked();
}

absl::Status StepReporter::WaitHashed() {
  // Submit hashes on the calling thread, so the last weights are hashed.
  absl::MutexLock l(&mu_);
  return StateLocked();
}

void StepReporter::Submit(v1::ReportStepRequest* report, absl::Span<const float> weights) {
  Slot* s = nullptr;
  {
    absl::MutexLock l(&mu_);
    // WaitForRoom made sure this slot's previous report is answered.
    ABSL_RAW_CHECK(submitted_ - answered_ <= std::max(0, options_.lag),
                   "StepReporter::Submit without room (call WaitForRoom first)");
    s = &SlotOf(submitted_);
  }
  // The slot at submitted_ is this thread's until ++submitted_ below (the
  // reporter thread reads slots below submitted_ only): hash here, right
  // after the update wrote the weights, while they are in this core's cache.
  s->report.Swap(report);
  s->weights = weights;
  UpdateHash& u = update_hash_;
  const Optimizer* opt = options_.optimizer;
  if (u.armed && u.weights.data() == weights.data() && u.weights.size() == weights.size() &&
      fused_.position() == weights.size() && (opt == nullptr || opt->steps() == u.steps_after)) {
    // Hashed while the update wrote them (HashDuringUpdate).
    ++update_hashes_used_;
    s->hash = fused_.Finish();
    auto* blocks = s->report.mutable_block_hashes();
    blocks->Resize(static_cast<int>(u.blocks.size()), 0);
    std::copy(u.blocks.begin(), u.blocks.end(), blocks->mutable_data());
    s->identity = s->hash.Fold();
    if (opt != nullptr) {
      if (!u.slots_streamed) {
        BeginOptimizerHash(opt->steps());
        job_hasher_.Update(opt->slots());
      }
      FinishOptimizerHash(s, job_hasher_.Finish());
    }
  } else {
    HashSlot(s);
  }
  u.armed = false;
  SetHex(s->hash, s->report.mutable_weights_hash());
  absl::MutexLock l(&mu_);
  ++submitted_;
}

absl::Status StepReporter::Flush() {
  absl::MutexLock l(&mu_);
  flushing_ = true;  // the reporter sends what is queued without a full batch
  if (absl::Status s = Await(&StepReporter::AllAnswered, "the reply to the last step report");
      !s.ok()) {
    return s;
  }
  return StateLocked();
}

void StepReporter::Warm(v1::ReportStepRequest* report) const {
  report->mutable_block_hashes()->Resize(static_cast<int>(options_.block_starts.size()), 0);
  if (options_.optimizer != nullptr) {
    report->mutable_optimizer_hash()->assign(32, '0');
  }
}

void StepReporter::HashSlot(Slot* slot) {
  WeightHasher* hasher = &job_hasher_;
  const absl::Span<const float> w = slot->weights;
  const std::vector<int64_t>& starts = options_.block_starts;
  auto* blocks = slot->report.mutable_block_hashes();
  blocks->Resize(static_cast<int>(starts.size()), 0);
  // The weights hash and the per-tensor block hashes in one pass.
  slot->hash = fused_.Hash(w, starts, absl::MakeSpan(blocks->mutable_data(), blocks->size()));
  slot->identity = slot->hash.Fold();
  if (options_.optimizer != nullptr) {
    BeginOptimizerHash(options_.optimizer->steps());
    hasher->Update(options_.optimizer->slots());
    FinishOptimizerHash(slot, hasher->Finish());
  }
}

void StepReporter::BeginOptimizerHash(int64_t steps) {
  // HashReplica({}, steps, slots), with this thread's hasher: the header
  // here, the slots' bytes by the caller.
  job_hasher_.Reset();
  job_hasher_.UpdateU64(0);
  job_hasher_.UpdateU64(static_cast<uint64_t>(steps));
  job_hasher_.UpdateU64(options_.optimizer->slots().size());
}

void StepReporter::FinishOptimizerHash(Slot* slot, const WeightHash& oh) {
  slot->identity ^= oh.hi * 0xc2b2ae3d27d4eb4full ^ oh.lo;
  SetHex(oh, slot->report.mutable_optimizer_hash());
}

UpdateObserver* StepReporter::HashDuringUpdate(absl::Span<const float> weights) {
  UpdateHash& u = update_hash_;
  u.blocks.resize(options_.block_starts.size());  // sized once: no allocation after
  u.weights = weights;
  fused_.Begin(weights.size(), options_.block_starts, absl::MakeSpan(u.blocks));
  const Optimizer* opt = options_.optimizer;
  // Slots stream with the weights only when there is one per parameter (the
  // hash covers them in order; Adam's m and s are written side by side).
  u.slots_streamed = opt != nullptr && opt->num_slots() == static_cast<int64_t>(weights.size()) &&
                     opt->num_params() == static_cast<int64_t>(weights.size());
  u.steps_after = opt != nullptr ? opt->steps() + 1 : 0;
  if (u.slots_streamed) BeginOptimizerHash(u.steps_after);
  u.armed = true;
  return &u;
}

void StepReporter::UpdateHash::Updated(int64_t begin, int64_t end) {
  if (!armed) return;
  r_->fused_.Update(weights.data(), static_cast<size_t>(begin), static_cast<size_t>(end));
  if (slots_streamed) {
    r_->job_hasher_.Update(r_->options_.optimizer->slots().subspan(
        static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
  }
}

StepReporter::Repair StepReporter::repair() {
  absl::MutexLock l(&mu_);
  return repair_;
}

WeightHash StepReporter::last_hash() {
  absl::MutexLock l(&mu_);
  return submitted_ == 0 ? WeightHash{} : SlotOf(submitted_ - 1).hash;
}

uint64_t StepReporter::last_identity() {
  absl::MutexLock l(&mu_);
  return submitted_ == 0 ? 0 : SlotOf(submitted_ - 1).identity;
}

int64_t StepReporter::answered() {
  absl::MutexLock l(&mu_);
  return answered_;
}

void StepReporter::Loop() {
  pthread_setname_np(pthread_self(), "lk-reporter");
  for (int64_t next = 0;;) {
    bool send = false;
    int64_t n = 0;
    {
      absl::MutexLock l(&mu_);
      auto work = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return quit_ || Sendable(next) > 0;
      };
      mu_.Await(absl::Condition(&work));
      // Quitting: reports still queued are sent first when flushing_ (see
      // the destructor), unless the job ended (a reply said stop, or a
      // report failed).
      if (quit_ && (!flushing_ || Ended() || Sendable(next) == 0)) return;
      // The slots' reports (hashed by Submit) are this thread's until
      // answered_ passes them (Submit reuses a slot only then).
      n = Sendable(next);
      batch_.clear();  // keeps its capacity (lag + 1 >= n)
      for (int64_t i = 0; i < n; ++i) batch_.push_back(&SlotOf(next + i).report);
      send = !Ended();
    }
    absl::StatusOr<bool> stop = false;
    if (send) {
      stop = reporter_->ReportStepsWithReply(batch_, &reply_);
    }
    absl::MutexLock l(&mu_);
    if (send && !Ended()) {
      if (!stop.ok()) {
        error_ = stop.status();
      } else if (*stop) {
        stop_first_ = batch_.front()->step();
        stop_step_ = batch_.back()->step();
      } else if (reply_.repair_step() != repair_step_.load(std::memory_order_relaxed)) {
        // A repair announced (or, 0, done): rare, may allocate.
        repair_.step = reply_.repair_step();
        repair_.source = reply_.repair_source();
        repair_.ranks.assign(reply_.repair_ranks().begin(), reply_.repair_ranks().end());
        repair_step_.store(repair_.step, std::memory_order_release);
      }
    }
    next += n;
    answered_ = next;
  }
}

}  // namespace lockstep
