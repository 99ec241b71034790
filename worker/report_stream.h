// One worker's ReportStream call to the coordinator (proto/coordinator.proto,
// issue 9): step reports go as messages on one long-lived stream instead of
// one unary ReportSteps call each. Private to the worker_daemon target.
//
// Contract:
//   * Open() starts the call; it does not wait for the connection. The
//     stream has no deadline of its own: every Exchange() has one.
//   * Exchange() sends one StepReports message and waits for its reply
//     until `deadline`. On a timeout it cancels the call (DEADLINE_EXCEEDED);
//     when the call ends under it, it returns the call's status (OK becomes
//     UNAVAILABLE: a stream ended by the coordinator without an error). After
//     any error the stream is dead (Alive() is false): open a new one.
//   * A hold (ClientBidiReactor::AddHold) keeps the call from finishing
//     while this side may still start an operation; it is released when
//     an exchange fails or times out, or by Close().
//   * Close() half-closes a live stream and waits, until `deadline`, for the
//     coordinator to end it; it cancels the call if it has not ended by then.
//   * Calls come from one thread at a time (the reporter's); callbacks run
//     on gRPC's threads. The object owns its request and reply buffers, and
//     keeps itself alive until gRPC's last callback (OnDone), so the owner
//     may drop it at any time, even with a timed-out exchange in flight.
#ifndef LOCKSTEP_WORKER_REPORT_STREAM_H_
#define LOCKSTEP_WORKER_REPORT_STREAM_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

namespace lockstep {

class ReportStream : public grpc::ClientBidiReactor<v1::StepReports, v1::ReportStepReply> {
 public:
  // Starts a ReportStream call on `stub` carrying `worker_token`
  // (common/grpcutil/worker_token.h). `stub` must outlive the call's start
  // only (gRPC keeps the channel alive).
  static std::shared_ptr<ReportStream> Open(v1::Coordinator::Stub* stub,
                                            const std::string& worker_token);

  // Sends `request` and copies its reply into *reply. See the contract above.
  absl::Status Exchange(const v1::StepReports& request, v1::ReportStepReply* reply,
                        absl::Time deadline);
  // Half-closes and waits for the end of the call, until `deadline`.
  void Close(absl::Time deadline);
  bool Alive() const;

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  ReportStream() = default;
  // RemoveHold once (the call may then finish).
  void ReleaseHold();
  grpc::ClientContext context_;
  mutable absl::Mutex mu_;
  // Used by gRPC between StartWrite/StartRead and their callbacks (see the
  // .cc); by Exchange under mu_ otherwise.
  v1::StepReports request_;
  v1::ReportStepReply reply_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;  // AddHold not yet matched by RemoveHold
  bool dead_ ABSL_GUARDED_BY(mu_) = false;  // cancelled, failed or half-closed
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // OnDone ran
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  // This object, until OnDone.
  std::shared_ptr<ReportStream> self_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_REPORT_STREAM_H_
