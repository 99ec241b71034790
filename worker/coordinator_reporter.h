// The worker daemon's JobReporter over the coordinator's gRPC service
// (GrpcReporter), and the retry of a call while the coordinator restarts.
// Private to the worker_daemon target.
//
// Threading: a GrpcReporter's ReportStep* calls come from one thread (the
// StepReporter's), ReportEval and UploadWeights from the job thread; it is
// destroyed after the StepReporter has stopped.
#ifndef LOCKSTEP_WORKER_COORDINATOR_REPORTER_H_
#define LOCKSTEP_WORKER_COORDINATOR_REPORTER_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/worker_token.h"
#include "common/log.h"
#include "common/train/replica.h"
#include "proto/coordinator.grpc.pb.h"
#include "worker/report_replay.h"
#include "worker/report_stream.h"
#include "worker/step_reporter.h"

namespace lockstep {

// The coordinator is down rather than unreachable: its host refused the
// connection (nothing listens on the port: the process died, e.g. it is
// being restarted) or closed it under a call. A partition shows up as a
// timeout or an unreachable network instead.
bool CoordinatorDown(const absl::Status& s);

// Calls `call` until it succeeds, fails other than CoordinatorDown, `stop`
// becomes true or `grace` has passed since the first failure; waits 100 ms
// doubling to 1 s between calls (polling `stop` every 50 ms).
template <typename Call>
absl::Status RetryWhileCoordinatorDown(const Call& call, const std::atomic<bool>* stop,
                                       absl::Duration grace) {
  const absl::Time give_up = absl::Now() + grace;
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    absl::Status s = call();
    if (s.ok() || !CoordinatorDown(s) || (stop != nullptr && stop->load())) return s;
    const absl::Time retry_at = absl::Now() + backoff;
    if (retry_at > give_up) return s;
    while (absl::Now() < retry_at) {
      if (stop != nullptr && stop->load()) return s;
      absl::SleepFor(std::min(absl::Milliseconds(50), retry_at - absl::Now()));
    }
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

// Reports per StepReports message when kept reports are sent again: the
// coordinator's limit (proto/coordinator.proto, StepReports: at most 8).
inline constexpr int kReplayBatch = 8;

// Sends `log`'s reports of steps >= from_step again with unary ReportSteps
// calls, kReplayBatch per call, each with `timeout`, carrying
// `worker_token`: for a job whose reporter is gone, when a restarted
// coordinator may lack the checks of its last steps (before the job's
// ReportDone goes again). Stops at the first error (returned) or at a reply
// that says stop (OK: the job ended). *sent (if not null): reports sent.
absl::Status ResendReports(v1::Coordinator::Stub* stub, const std::string& worker_token,
                           const ReportReplayLog& log, absl::Duration timeout,
                           int64_t from_step = 0, int* sent = nullptr);

// JobReporter over the coordinator's gRPC service.
// Floats per UploadWeights message (1 MiB).
inline constexpr int64_t kWeightsChunkFloats = 256 * 1024;

class GrpcReporter : public JobReporter {
 public:
  // `on_stop` runs (on the reporter thread) when a ReportStep reply says
  // stop: the job's combine may be waiting on a peer that stopped already.
  // Calls are retried while the coordinator is down (restarting), for up
  // to `restart_grace` or until *stop.
  // `worker_token`: worker_id's RegisterWorkerReply.worker_token, sent with
  // every call (common/grpcutil/worker_token.h).
  // `replay_reports`: answered reports kept for a restarted coordinator
  // (report_replay.h; see ReportStepsWithReply). `logger` (not owned,
  // may be null) gets one line per replay.
  GrpcReporter(v1::Coordinator::Stub* stub, absl::Duration timeout, std::string worker_id,
               std::string worker_token, std::function<void()> on_stop,
               const std::atomic<bool>* stop, absl::Duration restart_grace,
               int replay_reports = kReplayReports, const Logger* logger = nullptr)
      : stub_(stub),
        timeout_(timeout),
        worker_id_(std::move(worker_id)),
        worker_token_(std::move(worker_token)),
        on_stop_(std::move(on_stop)),
        stop_(stop),
        restart_grace_(restart_grace),
        replay_(replay_reports),
        logger_(logger) {}

  absl::StatusOr<bool> ReportStep(const v1::ReportStepRequest& report) override {
    v1::ReportStepReply reply;
    return ReportStepWithReply(report, &reply);
  }
  absl::StatusOr<bool> ReportStepWithReply(const v1::ReportStepRequest& report,
                                           v1::ReportStepReply* reply) override;
  // The batch as one message on the job's ReportStream (report_stream.h),
  // opened on first use and again after any error; against a coordinator
  // without ReportStream (UNIMPLEMENTED, or refused by an older call
  // policy) one ReportSteps call for the batch; against one without that
  // either, report by report (step_reporter.h, "Batches").
  //
  // Replay (issue 10): every report answered on a stream is kept (the
  // newest `replay_reports`). Each stream after the first (the previous
  // one ended: the coordinator may have restarted, and lost the checks
  // its database had not committed yet) begins with a probe
  // (StepReports.probe: the oldest kept report names job, rank and
  // generation), whose reply says the first step the coordinator lacks
  // from this rank; the kept reports from that step go, in the order they
  // were answered, kReplayBatch per message, before the batch that opened
  // the stream. A live coordinator (a stream that merely ended) lacks
  // none; a restarted one those after its database's newest check. A
  // coordinator without probes records the probe's report as a report and
  // gets every kept report after it; it drops those it has (a step at or
  // below the rank's last recorded step) and checks the rest. So a restart
  // loses no check. A reply that says stop ends the call with that reply.
  // The unary fallbacks do not replay.
  absl::StatusOr<bool> ReportStepsWithReply(absl::Span<const v1::ReportStepRequest* const> reports,
                                            v1::ReportStepReply* reply) override;
  // The kept reports (see Replay above), moved out; call only when no
  // StepReporter uses this reporter any more (the job's runs are over).
  ReportReplayLog TakeReplay() {
    ReportReplayLog taken = std::move(replay_);
    replay_ = ReportReplayLog(0);  // empty, keeps nothing more
    return taken;
  }
  // Half-closes the report stream and waits for its end, at most
  // min(timeout, 1 s).
  ~GrpcReporter() override;

  absl::Status ReportEval(const v1::ReportEvalRequest& report) override {
    return Named(RetryWhileCoordinatorDown(
        [&] {
          grpc::ClientContext ctx;
          AttachWorkerToken(&ctx, worker_token_);
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
          v1::ReportEvalReply reply;
          return FromGrpcStatus(stub_->ReportEval(&ctx, report, &reply));
        },
        stop_, restart_grace_));
  }
  absl::Status UploadWeights(uint64_t job, const Replica& replica) override {
    return Named(
        RetryWhileCoordinatorDown([&] { return UploadOnce(job, replica); }, stop_, restart_grace_));
  }

 private:
  absl::Status UploadOnce(uint64_t job, const Replica& replica) {
    grpc::ClientContext ctx;
    AttachWorkerToken(&ctx, worker_token_);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + 4 * timeout_));
    v1::UploadWeightsReply reply;
    auto writer = stub_->UploadWeights(&ctx, &reply);
    absl::Span<const float> p = replica.params();
    const int64_t total = static_cast<int64_t>(p.size());
    for (int64_t off = 0; off == 0 || off < total; off += kWeightsChunkFloats) {
      v1::WeightsChunk chunk;
      chunk.set_worker_id(worker_id_);
      chunk.set_job_id(job);
      chunk.set_offset(off);
      chunk.set_total(total);
      const int64_t len = std::min(kWeightsChunkFloats, total - off);
      chunk.set_data(reinterpret_cast<const char*>(p.data() + off), len * sizeof(float));
      if (off == 0) {
        for (const ParamBlock& b : replica.model().layout()) {
          chunk.add_block_names(b.name);
          for (int64_t d : b.shape.dims()) chunk.add_block_shapes(d);
          chunk.add_block_shapes(-1);
        }
      }
      if (!writer->Write(chunk)) break;
      if (total == 0) break;
    }
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  // One exchange on the report stream (a new stream if there is none,
  // after the first one replayed).
  absl::Status StreamExchange(v1::ReportStepReply* reply);
  // Sends the kept reports on the new stream_; OK with *reply saying stop
  // when one of its replies did.
  absl::Status Replay(v1::ReportStepReply* reply);
  // A unary report call (ReportStep or ReportSteps), retried while the
  // coordinator is down.
  template <typename Request>
  absl::Status Unary(grpc::Status (v1::Coordinator::Stub::*method)(grpc::ClientContext*,
                                                                   const Request&,
                                                                   v1::ReportStepReply*),
                     const Request& request, v1::ReportStepReply* reply);
  // The caller's answer to a report call: its error (naming the
  // coordinator), or whether the reply says stop (calling on_stop if so).
  absl::StatusOr<bool> Answer(const absl::Status& s, const v1::ReportStepReply& reply);

  absl::Status Named(const absl::Status& s) const {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("coordinator: ", s.message()));
  }

  v1::Coordinator::Stub* stub_;
  absl::Duration timeout_;
  std::string worker_id_;
  std::string worker_token_;
  std::function<void()> on_stop_;
  const std::atomic<bool>* stop_;
  absl::Duration restart_grace_;
  // The reporter thread's (ReportStepsWithReply runs on it only).
  v1::StepReports batch_;
  std::shared_ptr<ReportStream> stream_;
  int64_t streams_opened_ = 0;
  ReportReplayLog replay_;
  v1::StepReports replay_batch_;
  const Logger* logger_;
  bool no_stream_ = false;   // the coordinator has no ReportStream
  bool no_batches_ = false;  // the coordinator has no ReportSteps
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_COORDINATOR_REPORTER_H_
