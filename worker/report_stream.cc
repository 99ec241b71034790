#include "worker/report_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/worker_token.h"

namespace lockstep {

// gRPC touches request_ and reply_ between StartWrite/StartRead and their
// callbacks, without mu_; the caller of Exchange does not touch them then
// (it waits for both callbacks, or kills the call and never uses them again).

std::shared_ptr<ReportStream> ReportStream::Open(v1::Coordinator::Stub* stub,
                                                 const std::string& worker_token) {
  std::shared_ptr<ReportStream> s(new ReportStream());
  AttachWorkerToken(&s->context_, worker_token);
  {
    absl::MutexLock l(&s->mu_);
    s->self_ = s;
    s->hold_ = true;
  }
  stub->async()->ReportStream(&s->context_, s.get());
  // The hold keeps the call from finishing (OnDone) while this side may
  // still start a write or a read: starting one on a finished call is
  // undefined. It is released once, when the stream is given up.
  s->AddHold();
  s->StartCall();
  return s;
}

bool ReportStream::Alive() const {
  absl::MutexLock l(&mu_);
  return !dead_ && !done_;
}

void ReportStream::ReleaseHold() {
  {
    absl::MutexLock l(&mu_);
    if (!hold_) return;
    hold_ = false;
  }
  // Not under mu_: gRPC may run OnDone inline.
  RemoveHold();
}

absl::Status ReportStream::Exchange(const v1::StepReports& request, v1::ReportStepReply* reply,
                                    absl::Time deadline) {
  {
    absl::MutexLock l(&mu_);
    if (dead_ || done_) {
      if (done_ && !status_.ok()) return FromGrpcStatus(status_);
      return absl::UnavailableError("ReportStream: the stream has ended (open a new one)");
    }
    request_.CopyFrom(request);
    writing_ = true;
    reading_ = true;
    write_ok_ = false;
    read_ok_ = false;
  }
  StartWrite(&request_);
  StartRead(&reply_);
  enum { kReplied, kTimedOut, kFailed } outcome;
  {
    absl::MutexLock l(&mu_);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_ && !reading_; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&settled), deadline)) {
      outcome = kTimedOut;
    } else if (write_ok_ && read_ok_) {
      outcome = kReplied;
      reply->CopyFrom(reply_);
    } else {
      outcome = kFailed;
    }
    if (outcome != kReplied) dead_ = true;
  }
  if (outcome == kReplied) return absl::OkStatus();
  if (outcome == kTimedOut) {
    // Not under mu_: gRPC may run this call's callbacks inline.
    context_.TryCancel();
    ReleaseHold();
    return absl::DeadlineExceededError(
        "ReportStream: no reply from the coordinator before the deadline");
  }
  // The stream broke (the coordinator ended it with an error, died, or the
  // connection failed): its status says why.
  ReleaseHold();
  absl::MutexLock l(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) {
    return absl::UnavailableError("ReportStream: the stream broke (no status before the deadline)");
  }
  if (status_.ok()) return absl::UnavailableError("ReportStream: the coordinator ended the stream");
  return FromGrpcStatus(status_);
}

void ReportStream::Close(absl::Time deadline) {
  bool half_close = false;
  {
    absl::MutexLock l(&mu_);
    if (!dead_ && !done_) half_close = true;
    dead_ = true;
  }
  if (half_close) StartWritesDone();
  ReleaseHold();
  bool ended;
  {
    absl::MutexLock l(&mu_);
    ended = mu_.AwaitWithDeadline(absl::Condition(&done_), deadline);
  }
  if (!ended) context_.TryCancel();
}

void ReportStream::OnWriteDone(bool ok) {
  absl::MutexLock l(&mu_);
  writing_ = false;
  write_ok_ = ok;
}

void ReportStream::OnReadDone(bool ok) {
  absl::MutexLock l(&mu_);
  reading_ = false;
  read_ok_ = ok;
}

void ReportStream::OnDone(const grpc::Status& status) {
  std::shared_ptr<ReportStream> keep;
  {
    absl::MutexLock l(&mu_);
    done_ = true;
    status_ = status;
    keep = std::move(self_);
  }
  // `keep` may be the last reference: this object ends here, after the
  // lock is released (an Exchange or Close in progress holds another).
}

}  // namespace lockstep
