#include "worker/coordinator_reporter.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace lockstep {

bool CoordinatorDown(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable) return false;
  for (absl::string_view sign :
       {"onnection refused", "Socket closed", "reset by peer", "Broken pipe", "GOAWAY"}) {
    if (absl::StrContains(s.message(), sign)) return true;
  }
  return false;
}

absl::Status ResendReports(v1::Coordinator::Stub* stub, const std::string& worker_token,
                           const ReportReplayLog& log, absl::Duration timeout,
                           int64_t from_step, int* sent) {
  if (sent != nullptr) *sent = 0;
  v1::StepReports batch;
  for (int i = 0; i < log.size();) {
    batch.clear_reports();
    for (; i < log.size() && batch.reports_size() < kReplayBatch; ++i) {
      if (log.at(i).step() >= from_step) *batch.add_reports() = log.at(i);
    }
    if (batch.reports_size() == 0) break;
    grpc::ClientContext ctx;
    AttachWorkerToken(&ctx, worker_token);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::ReportStepReply reply;
    if (absl::Status s = FromGrpcStatus(stub->ReportSteps(&ctx, batch, &reply)); !s.ok()) {
      return s;
    }
    if (sent != nullptr) *sent += batch.reports_size();
    if (reply.stop()) break;
  }
  return absl::OkStatus();
}

GrpcReporter::~GrpcReporter() {
  if (stream_ != nullptr) stream_->Close(absl::Now() + std::min(timeout_, absl::Seconds(1)));
}

template <typename Request>
absl::Status GrpcReporter::Unary(grpc::Status (v1::Coordinator::Stub::*method)(
                                     grpc::ClientContext*, const Request&, v1::ReportStepReply*),
                                 const Request& request, v1::ReportStepReply* reply) {
  return RetryWhileCoordinatorDown(
      [&] {
        reply->Clear();
        grpc::ClientContext ctx;
        AttachWorkerToken(&ctx, worker_token_);
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
        return FromGrpcStatus((stub_->*method)(&ctx, request, reply));
      },
      stop_, restart_grace_);
}

absl::StatusOr<bool> GrpcReporter::Answer(const absl::Status& s, const v1::ReportStepReply& reply) {
  if (!s.ok()) return Named(s);
  if (reply.stop() && on_stop_) on_stop_();
  return reply.stop();
}

absl::StatusOr<bool> GrpcReporter::ReportStepWithReply(const v1::ReportStepRequest& report,
                                                       v1::ReportStepReply* reply) {
  return Answer(Unary(&v1::Coordinator::Stub::ReportStep, report, reply), *reply);
}

absl::Status GrpcReporter::Replay(v1::ReportStepReply* reply) {
  const int n = replay_.size();
  if (n == 0) return absl::OkStatus();
  auto* out = replay_batch_.mutable_reports();
  // The probe: one report (the oldest kept) names the job, rank and
  // generation; the coordinator answers the first step it lacks from this
  // rank. A coordinator without probes records that report as a report
  // (it is the oldest: nothing it already has is overtaken) and answers
  // without probe_answered; then everything after it goes again.
  out->Clear();
  out->Add()->CopyFrom(replay_.at(0));
  replay_batch_.set_probe(true);
  reply->Clear();
  absl::Status s = stream_->Exchange(replay_batch_, reply, absl::Now() + timeout_);
  replay_batch_.set_probe(false);
  if (!s.ok() || reply->stop()) return s;
  const bool answered = reply->probe_answered();
  const int64_t from_step = answered ? reply->resend_from_step() : -1;
  int i = answered ? 0 : 1;
  int64_t sent = i;  // an unanswered probe's report was recorded as a report
  while (i < n) {
    out->Clear();  // keeps the cleared elements: no allocation once grown
    for (; i < n && out->size() < kReplayBatch; ++i) {
      if (replay_.at(i).step() < from_step) continue;
      out->Add()->CopyFrom(replay_.at(i));
    }
    if (out->empty()) break;
    reply->Clear();
    if (s = stream_->Exchange(replay_batch_, reply, absl::Now() + timeout_); !s.ok()) return s;
    sent += out->size();
    if (reply->stop()) return absl::OkStatus();
  }
  if (logger_ != nullptr) {
    // reports=0 on a live coordinator (the old stream merely ended).
    logger_->Info("resent step reports the coordinator lacked on a new report stream "
                  "(a restarted coordinator checks the ones it had not stored)",
                  {{"job", replay_.at(0).job_id()},
                   {"reports", sent},
                   {"from_step", from_step},
                   {"kept", static_cast<int64_t>(n)},
                   {"first_step", replay_.at(0).step()},
                   {"last_step", replay_.at(n - 1).step()},
                   {"not_kept", replay_.dropped()}});
  }
  return absl::OkStatus();
}

absl::Status GrpcReporter::StreamExchange(v1::ReportStepReply* reply) {
  bool fresh = false;
  if (stream_ == nullptr || !stream_->Alive()) {
    stream_ = ReportStream::Open(stub_, worker_token_);
    fresh = true;
    if (streams_opened_++ > 0) {
      // The previous stream ended: resend what it had answered first.
      absl::Status s = Replay(reply);
      if (!s.ok()) {
        stream_.reset();
        return s;
      }
      if (reply->stop()) return s;
    }
  }
  reply->Clear();
  absl::Status s = stream_->Exchange(batch_, reply, absl::Now() + timeout_);
  if (s.ok()) return s;
  stream_.reset();
  // A stream that had answered before and now ended under this batch
  // (UNAVAILABLE or CANCELLED: the coordinator went away or shut down
  // between two batches) says nothing about this batch: it goes once more
  // on a new stream, whose error (a refused connection while the
  // coordinator restarts) is this batch's, as a new unary call's would be.
  if (!fresh &&
      (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled)) {
    return StreamExchange(reply);
  }
  return s;
}

absl::StatusOr<bool> GrpcReporter::ReportStepsWithReply(
    absl::Span<const v1::ReportStepRequest* const> reports, v1::ReportStepReply* reply) {
  if (no_stream_ && (reports.size() <= 1 || no_batches_)) {
    return JobReporter::ReportStepsWithReply(reports, reply);
  }
  // The batch message is reused: copying into its kept elements does not
  // allocate once they have grown.
  auto* out = batch_.mutable_reports();
  while (out->size() > static_cast<int>(reports.size())) out->RemoveLast();
  for (size_t i = 0; i < reports.size(); ++i) {
    if (static_cast<int>(i) == out->size()) out->Add();
    out->Mutable(static_cast<int>(i))->CopyFrom(*reports[i]);
  }
  // A method the coordinator does not have: UNIMPLEMENTED, or refused by
  // a call policy that does not list it (PERMISSION_DENIED naming it).
  auto lacks = [](const absl::Status& s, absl::string_view method) {
    return s.code() == absl::StatusCode::kUnimplemented ||
           (s.code() == absl::StatusCode::kPermissionDenied &&
            absl::StrContains(s.message(), method));
  };
  if (!no_stream_) {
    // Reports are idempotent: one resent on a new stream after the
    // coordinator restarted is counted once.
    absl::Status s =
        RetryWhileCoordinatorDown([&] { return StreamExchange(reply); }, stop_, restart_grace_);
    if (s.ok()) {
      for (const v1::ReportStepRequest* r : reports) replay_.Add(*r);
    }
    if (!lacks(s, "ReportStream")) return Answer(s, *reply);
    no_stream_ = true;
    if (reports.size() <= 1 || no_batches_) {
      return JobReporter::ReportStepsWithReply(reports, reply);
    }
  }
  absl::Status s = Unary(&v1::Coordinator::Stub::ReportSteps, batch_, reply);
  if (lacks(s, "ReportSteps")) {
    no_batches_ = true;
    return JobReporter::ReportStepsWithReply(reports, reply);
  }
  return Answer(s, *reply);
}

}  // namespace lockstep
