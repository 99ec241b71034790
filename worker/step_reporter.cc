#include "worker/step_reporter.h"

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
  thread_ = std::thread([this] { Loop(); });
}

StepReporter::~StepReporter() {
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
  }
  thread_.join();
}

bool StepReporter::Ended() const { return stop_step_ >= 0 || !error_.ok(); }

bool StepReporter::HasRoom() const {
  return Ended() || submitted_ - answered_ <= std::max(0, options_.lag);
}

bool StepReporter::LastHashed() const {
  if (submitted_ == 0) return true;
  const Slot& s = slots_[static_cast<size_t>(submitted_ - 1) % slots_.size()];
  return s.hash_state == HashState::kDone;
}

bool StepReporter::AllAnswered() const { return Ended() || answered_ == submitted_; }

absl::Status StepReporter::StateLocked() const {
  if (!error_.ok()) return error_;
  if (stop_step_ >= 0) {
    return absl::CancelledError(absl::StrCat("job ", options_.job_id,
                                             " stopped by the coordinator (its reply to step ",
                                             stop_step_, "'s report said stop)"));
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
  absl::MutexLock l(&mu_);
  if (submitted_ > 0) {
    Slot& s = SlotOf(submitted_ - 1);
    if (s.hash_state == HashState::kPending) {
      // The reporter thread is busy with a reply: hash here rather than wait.
      s.hash_state = HashState::kHashing;
      mu_.Unlock();
      HashSlot(&s, &job_hasher_);  // the slot is this thread's while kHashing
      mu_.Lock();
      s.hash_state = HashState::kDone;
    }
  }
  if (absl::Status s = Await(&StepReporter::LastHashed, "the weights hash"); !s.ok()) return s;
  return StateLocked();
}

void StepReporter::Submit(v1::ReportStepRequest* report, absl::Span<const float> weights) {
  absl::MutexLock l(&mu_);
  // WaitForRoom made sure this slot's previous report is answered.
  ABSL_RAW_CHECK(submitted_ - answered_ <= std::max(0, options_.lag),
                 "StepReporter::Submit without room (call WaitForRoom first)");
  Slot& s = SlotOf(submitted_);
  s.report.Swap(report);
  s.weights = weights;
  s.hash_state = HashState::kPending;
  ++submitted_;
}

absl::Status StepReporter::Flush() {
  absl::MutexLock l(&mu_);
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

void StepReporter::HashSlot(Slot* slot, WeightHasher* hasher) const {
  const absl::Span<const float> w = slot->weights;
  slot->hash = HashWeights(w);
  slot->identity = slot->hash.hi ^ (slot->hash.lo * 0x9e3779b97f4a7c15ull);
  const std::vector<int64_t>& starts = options_.block_starts;
  auto* blocks = slot->report.mutable_block_hashes();
  blocks->Resize(static_cast<int>(starts.size()), 0);
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t b = std::min(static_cast<size_t>(starts[i]), w.size());
    const size_t e =
        i + 1 < starts.size() ? std::min(static_cast<size_t>(starts[i + 1]), w.size()) : w.size();
    blocks->Set(static_cast<int>(i), HashBlock(w.subspan(b, e - b)));
  }
  if (options_.optimizer != nullptr) {
    // HashReplica({}, steps, slots), with this thread's hasher.
    const absl::Span<const float> slots = options_.optimizer->slots();
    hasher->Reset();
    hasher->UpdateU64(0);
    hasher->UpdateU64(static_cast<uint64_t>(options_.optimizer->steps()));
    hasher->UpdateU64(slots.size());
    hasher->Update(slots);
    const WeightHash oh = hasher->Finish();
    slot->identity ^= oh.hi * 0xc2b2ae3d27d4eb4full ^ oh.lo;
    SetHex(oh, slot->report.mutable_optimizer_hash());
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
  for (int64_t next = 0;; ++next) {
    Slot* slot = nullptr;
    bool hash_here = false;
    {
      absl::MutexLock l(&mu_);
      auto work = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return quit_ || next < submitted_;
      };
      mu_.Await(absl::Condition(&work));
      if (quit_) return;  // reports not sent yet are dropped
      slot = &SlotOf(next);
      if (slot->hash_state == HashState::kPending) {
        slot->hash_state = HashState::kHashing;
        hash_here = true;
      }
    }
    // The slot's report and weights are this thread's until answered_
    // passes it (Submit reuses a slot only then).
    if (hash_here) {
      HashSlot(slot, &loop_hasher_);
      absl::MutexLock l(&mu_);
      slot->hash_state = HashState::kDone;
    }
    bool send = false;
    WeightHash hash;
    {
      absl::MutexLock l(&mu_);
      auto hashed = [this, slot]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return quit_ || slot->hash_state == HashState::kDone;
      };
      mu_.Await(absl::Condition(&hashed));  // the job thread is hashing it
      if (quit_) return;
      send = !Ended();
      hash = slot->hash;
    }
    absl::StatusOr<bool> stop = false;
    if (send) {
      SetHex(hash, slot->report.mutable_weights_hash());
      stop = reporter_->ReportStepWithReply(slot->report, &reply_);
    }
    absl::MutexLock l(&mu_);
    if (send && !Ended()) {
      if (!stop.ok()) {
        error_ = stop.status();
      } else if (*stop) {
        stop_step_ = slot->report.step();
      } else if (reply_.repair_step() != repair_step_.load(std::memory_order_relaxed)) {
        // A repair announced (or, 0, done): rare, may allocate.
        repair_.step = reply_.repair_step();
        repair_.source = reply_.repair_source();
        repair_.ranks.assign(reply_.repair_ranks().begin(), reply_.repair_ranks().end());
        repair_step_.store(repair_.step, std::memory_order_release);
      }
    }
    answered_ = next + 1;
  }
}

}  // namespace lockstep
