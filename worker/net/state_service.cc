#include "worker/net/state_service.h"

#include <algorithm>
#include <memory>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {

// Writes a published state in chunks; deletes itself when done.
class StateWriter final : public grpc::ServerWriteReactor<v1::StateChunk> {
 public:
  explicit StateWriter(std::shared_ptr<const std::string> state) : state_(std::move(state)) {
    WriteNext();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {  // the client went away
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "state transfer cancelled"));
      return;
    }
    if (offset_ >= static_cast<int64_t>(state_->size())) {
      Finish(grpc::Status::OK);
      return;
    }
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    const int64_t total = static_cast<int64_t>(state_->size());
    const int64_t n = std::min<int64_t>(kStateChunkBytes, total - offset_);
    chunk_.set_total_bytes(total);
    chunk_.set_offset(offset_);
    chunk_.set_data(state_->data() + offset_, static_cast<size_t>(n));
    offset_ += n;
    StartWrite(&chunk_);
  }
  std::shared_ptr<const std::string> state_;
  int64_t offset_ = 0;
  v1::StateChunk chunk_;
};

class ErrorWriter final : public grpc::ServerWriteReactor<v1::StateChunk> {
 public:
  explicit ErrorWriter(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

StateServiceImpl::StateServiceImpl(const StateBoard* board, const Logger* logger)
    : board_(board), log_(LoggerOrStderr(logger, "state")) {}

grpc::ServerWriteReactor<v1::StateChunk>* StateServiceImpl::FetchState(
    grpc::CallbackServerContext* /*context*/, const v1::FetchStateRequest* request) {
  std::shared_ptr<const std::string> state = board_->Find(request->group(), request->step());
  if (state == nullptr) {
    misses_.fetch_add(1);
    return new ErrorWriter(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("no replica state of group ", request->group(), " at step ",
                     request->step(), " here (published: ", board_->Describe(request->group()),
                     ")")));
  }
  log_.Info("serving replica state", {{"group", request->group()},
                                      {"step", request->step()},
                                      {"bytes", static_cast<int64_t>(state->size())},
                                      {"requester", request->requester()}});
  return new StateWriter(std::move(state));
}

absl::StatusOr<std::string> FetchReplicaState(const std::string& address,
                                              const FetchStateOptions& options) {
  const std::string what = absl::StrCat("replica state of group ", options.group, " at step ",
                                        options.step, " from ", address);
  if (options.deadline == absl::InfinitePast()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no deadline given"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kStateChunkBytes + (64 << 10)));
  auto channel = grpc::CreateCustomChannel(
      address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
  auto stub = v1::ReplicaState::NewStub(channel);
  absl::Status last = absl::DeadlineExceededError("no attempt");
  bool answered = false;  // `last` holds a peer's answer
  while (true) {
    if (absl::Now() >= options.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not received by the deadline (last answer: ", last.message(),
                       ")"));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(options.deadline));
    v1::FetchStateRequest request;
    request.set_group(options.group);
    request.set_step(options.step);
    request.set_requester(options.requester);
    auto reader = stub->FetchState(&ctx, request);
    v1::StateChunk chunk;
    std::string out;
    bool sized = false;
    absl::Status bad;
    while (reader->Read(&chunk)) {
      if (chunk.total_bytes() != options.expected_bytes) {
        bad = absl::FailedPreconditionError(absl::StrCat(
            what, ": the peer offers ", chunk.total_bytes(), " bytes, this job's replica state is ",
            options.expected_bytes, " bytes"));
        break;
      }
      if (!sized) {
        out.reserve(static_cast<size_t>(options.expected_bytes));
        sized = true;
      }
      if (chunk.offset() != static_cast<int64_t>(out.size()) ||
          static_cast<int64_t>(out.size() + chunk.data().size()) > options.expected_bytes) {
        bad = absl::DataLossError(absl::StrCat(what, ": chunk at offset ", chunk.offset(),
                                               " of ", chunk.data().size(), " bytes after ",
                                               out.size(), " bytes"));
        break;
      }
      out.append(chunk.data());
    }
    if (!bad.ok()) {
      ctx.TryCancel();
      reader->Finish();
      return bad;
    }
    const grpc::Status st = reader->Finish();
    if (st.ok()) {
      if (static_cast<int64_t>(out.size()) != options.expected_bytes) {
        return absl::DataLossError(absl::StrCat(what, ": stream ended after ", out.size(),
                                                " of ", options.expected_bytes, " bytes"));
      }
      return out;
    }
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && out.empty() && answered) {
      // The deadline passed during a call that had received nothing: the
      // loop's top reports the previous call's answer, which says why (e.g.
      // the boundaries the peer offers).
      continue;
    }
    last = absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    answered = true;
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": not complete by the deadline (", out.size(), " of ", options.expected_bytes,
          " bytes received)"));
    }
    if (st.error_code() != grpc::StatusCode::NOT_FOUND &&
        !(st.error_code() == grpc::StatusCode::UNAVAILABLE && out.empty() && !sized)) {
      return absl::Status(last.code(), absl::StrCat(what, ": ", st.error_message(), " (after ",
                                                    out.size(), " of ", options.expected_bytes,
                                                    " bytes)"));
    }
    // Not published yet (or the peer not up yet): ask again shortly.
    absl::SleepFor(std::min(absl::Milliseconds(10), options.deadline - absl::Now()));
  }
}

}  // namespace lockstep
