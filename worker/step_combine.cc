#include "worker/step_combine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/train/nonfinite.h"

namespace lockstep {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// How long past its deadline a combine may take to return before that is
// treated as a broken combiner (they all return by their deadline).
constexpr absl::Duration kDeadlineSlack = absl::Seconds(30);

}  // namespace

absl::StatusOr<CombineConfig> CombineConfigFromSpec(const v1::JobSpec& spec) {
  CombineConfig c;
  if (spec.bucket_bytes() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.bucket_bytes: expected -1 (no overlap), 0 (default) or > 0, got ",
        spec.bucket_bytes()));
  }
  c.bucket_bytes = spec.bucket_bytes();
  // The default is no overlap: on the 2-core development host it paid
  // only where every worker process had a core to itself (K = 2 over raw
  // TCP: 1.33x) and cost 1.7x with 4 workers on the 2 cores; over gRPC
  // several messages per step cost more than the overlap saves (README,
  // "Overlap"). --bucket_bytes=262144 turns it on.
  if (c.bucket_bytes == 0) c.bucket_bytes = -1;
  auto wire = ParseWireFormat(spec.compression());
  if (!wire.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.compression: ", wire.status().message()));
  }
  c.wire = *wire;
  return c;
}

StepCombiner::StepCombiner(GradientCombiner* combiner, CombineConfig config, int world,
                           int rank)
    : combiner_(combiner),
      config_(config),
      world_(world),
      rank_(rank),
      overlap_(world > 1 && config.bucket_bytes != -1),
      bucket_floats_(std::max<int64_t>(
          1, (config.bucket_bytes > 0 ? config.bucket_bytes : kDefaultBucketBytes) /
                 static_cast<int64_t>(sizeof(float)))) {
  if (overlap_) thread_ = std::thread([this] { Loop(); });
}

StepCombiner::~StepCombiner() {
  if (!thread_.joinable()) return;
  {
    absl::MutexLock l(&mu_);
    quit_ = true;
  }
  thread_.join();
}

void StepCombiner::BeginCheck(Replica& r, int64_t step) {
  check_buffer_ = r.combine_buffer().data();
  flag_slots_ = static_cast<int>(r.flags().size());
  ids_ = r.ids();
  grad_begin_ = r.grad_offset();
  grad_end_ = grad_begin_ + r.num_params();
  check_from_ = grad_end_;
  inject_nan_ = step == nan_at_step_ && r.num_params() > 0;
  local_finite_ = true;
  loss_checked_ = false;
  local_loss_finite_ = true;
  combined_finite_ = true;
}

void StepCombiner::CheckPiece(int64_t lo, int64_t hi) {
  lo = std::max(lo, grad_begin_);
  hi = std::min(hi, grad_end_);
  if (lo >= hi) return;
  if (inject_nan_ && !inject_loss_ && lo == grad_begin_) {
    check_buffer_[grad_begin_] = inject_value_;
  }
  // Once one piece failed the verdict is known; the rest need no pass.
  if (local_finite_) local_finite_ = AllFinite(absl::MakeConstSpan(check_buffer_ + lo, hi - lo));
}

void StepCombiner::CheckLoss() {
  if (loss_checked_) return;
  loss_checked_ = true;
  if (inject_nan_ && inject_loss_) check_buffer_[grad_end_] = inject_value_;
  local_loss_finite_ = std::isfinite(check_buffer_[grad_end_]);  // the loss slot
}

void StepCombiner::WriteFlags() {
  CheckLoss();
  std::fill(check_buffer_, check_buffer_ + grad_begin_, 0.0f);
  if (rank_ >= 0 && rank_ < flag_slots_) {
    check_buffer_[rank_] = LocalFlag(local_finite_, local_loss_finite_);
  }
  if (id_writer_ && !ids_.empty()) id_writer_(ids_);
}

void StepCombiner::ReadyFrom(int64_t begin) {
  // Compute thread: check the piece [begin, check_from_) while it is in
  // cache; once the whole gradient is final, write the flags in front of it
  // (they ride in the last bucket) and release everything down to 0.
  // The loss slot is final first (before bucket 0, which holds it, is
  // released and summed in place): check this rank's loss there.
  if (flag_slots_ > 0 && begin <= grad_end_) CheckLoss();
  if (flag_slots_ > 0 && begin < check_from_) {
    CheckPiece(begin, check_from_);
    check_from_ = std::max(begin, grad_begin_);
    if (begin <= grad_begin_) {
      WriteFlags();
      begin = 0;
    }
  }
  absl::MutexLock l(&mu_);
  ready_from_ = std::min(ready_from_, begin);
}

void StepCombiner::Loop() {
  for (;;) {
    BucketCall base;
    absl::Span<float> buffer;
    int64_t local = 0;
    int64_t check_begin = 0;
    {
      absl::MutexLock l(&mu_);
      auto has_work = [this] {
        mu_.AssertReaderHeld();
        return quit_ || (active_ && !done_);
      };
      // Idle between steps (and jobs): wake up now and then anyway.
      while (!mu_.AwaitWithTimeout(absl::Condition(&has_work), absl::Seconds(1))) {
      }
      if (quit_) return;
      base = call_;
      buffer = buffer_;
      local = local_count_;
      check_begin = combined_check_begin_;
    }
    absl::Status status;
    int64_t total = local;
    double communication = 0, peer_wait = 0;
    bool finite = true;
    const int num = static_cast<int>(buckets_.size());
    for (int b = 0; b < num && status.ok(); ++b) {
      const Range range = buckets_[b];
      {
        absl::MutexLock l(&mu_);
        auto ready = [this, &range] {
          mu_.AssertReaderHeld();
          return quit_ || ready_from_ <= range.begin;
        };
        if (!mu_.AwaitWithDeadline(absl::Condition(&ready), base.deadline)) {
          status = absl::DeadlineExceededError(absl::StrFormat(
              "job %d step %d: backward had not finished bucket %d of %d by the combine "
              "deadline",
              base.job, base.step, b, num));
          break;
        }
        if (quit_) {
          status = absl::CancelledError("worker shutting down");
          break;
        }
      }
      BucketCall call = base;
      call.bucket = b;
      call.num_buckets = num;
      call.range = range;
      call.with_count = b == 0;
      int64_t c = local;  // every bucket pushes this rank's count (ps)
      const auto t0 = std::chrono::steady_clock::now();
      status = combiner_->CombineBucket(call, buffer.subspan(range.begin, range.size()), &c,
                                        &peer_wait);
      communication += SecondsSince(t0);
      if (b == 0) total = c;
      // The combined bucket, while in cache: its part of [gradient | loss].
      const int64_t lo = std::max(range.begin, check_begin);
      if (status.ok() && finite && lo < range.end) {
        finite = AllFinite(buffer.subspan(lo, range.end - lo));
      }
    }
    absl::MutexLock l(&mu_);
    status_ = status;
    total_count_ = total;
    communication_seconds_ = communication;
    peer_wait_seconds_ = peer_wait;
    buckets_finite_ = finite;
    done_ = true;
  }
}

absl::Status StepCombiner::ComputeAndCombine(Replica& r, const Dataset& data,
                                             absl::Span<const int64_t> indices, uint64_t job,
                                             int64_t step, absl::Duration timeout,
                                             BatchStats* local, int64_t* count,
                                             CombineTiming* timing) {
  *timing = CombineTiming();
  absl::Span<float> buffer = r.combine_buffer();
  const int64_t n = static_cast<int64_t>(buffer.size());
  BucketCall call;
  call.job = job;
  call.step = step;
  call.buffer_size = n;
  call.range = Range{0, n};
  call.wire = config_.wire;
  BeginCheck(r, step);
  if (!overlap_) {
    const auto t0 = std::chrono::steady_clock::now();
    *local = r.ComputeGradSum(data, indices);
    if (flag_slots_ > 0) {
      CheckPiece(grad_begin_, grad_end_);
      WriteFlags();
    }
    timing->compute_seconds = SecondsSince(t0);
    int64_t c = local->count;
    call.deadline = absl::Now() + timeout;
    const auto t1 = std::chrono::steady_clock::now();
    absl::Status s = combiner_->CombineBucket(call, buffer, &c, &timing->peer_wait_seconds);
    // Every rank checks the same combined bytes (nonfinite.h).
    if (s.ok() && flag_slots_ > 0 && world_ > 1) {
      combined_finite_ = AllFinite(buffer.subspan(grad_begin_, n - grad_begin_));
    }
    timing->communication_seconds = timing->exposed_seconds = SecondsSince(t1);
    timing->buckets = 1;
    if (s.ok()) *count = c;
    return s;
  }
  if (planned_n_ != n) {
    auto plan = combiner_->PlanBuckets(n, r.CombinePieceStarts(bucket_floats_), bucket_floats_);
    if (!plan.ok()) return plan.status();
    buckets_ = *std::move(plan);
    planned_n_ = n;
  }
  call.deadline = absl::Now() + timeout;
  {
    absl::MutexLock l(&mu_);
    call_ = call;
    buffer_ = buffer;
    local_count_ = static_cast<int64_t>(indices.size());
    combined_check_begin_ = flag_slots_ > 0 ? grad_begin_ : n;
    ready_from_ = n;  // nothing final yet
    status_ = absl::OkStatus();
    done_ = false;
    active_ = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  *local = r.ComputeGradSum(data, indices, bucket_floats_, this);
  timing->compute_seconds = SecondsSince(t0);
  const auto t_backward = std::chrono::steady_clock::now();
  absl::MutexLock l(&mu_);
  auto finished = [this] {
    mu_.AssertReaderHeld();
    return done_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&finished), call.deadline + kDeadlineSlack)) {
    // Every CombineBucket returns by its deadline; the thread still holds
    // the replica's buffer, so returning would be unsafe.
    ABSL_RAW_LOG(FATAL, "job %llu step %lld: a bucket combine ignored its deadline",
                 static_cast<unsigned long long>(job), static_cast<long long>(step));
  }
  active_ = false;
  timing->exposed_seconds = SecondsSince(t_backward);
  timing->communication_seconds = communication_seconds_;
  timing->peer_wait_seconds = peer_wait_seconds_;
  timing->buckets = static_cast<int>(buckets_.size());
  combined_finite_ = buckets_finite_;
  if (status_.ok()) *count = total_count_;
  return status_;
}

}  // namespace lockstep
