#include "worker/net/state_service.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/train/checkpoint.h"

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

// Serves one checkpoint file: `load` (which reads and checks the file) runs
// on a thread of its own, not on gRPC's callback thread that also carries
// the peer streams; then the bytes go out as StateWriter sends a state.
// `active` is decremented once the call is done.
class CheckpointWriter final : public grpc::ServerWriteReactor<v1::StateChunk> {
 public:
  using Load = std::function<absl::StatusOr<std::pair<std::string, int64_t>>()>;
  CheckpointWriter(Load load, std::atomic<int>* active) : active_(active) {
    loader_ = std::thread([this, load = std::move(load)] {
      absl::StatusOr<std::pair<std::string, int64_t>> got = load();
      if (!got.ok()) {
        Finish(grpc::Status(static_cast<grpc::StatusCode>(got.status().code()),
                            std::string(got.status().message())));
        return;
      }
      bytes_ = std::move(got->first);
      step_ = got->second;
      WriteNext();
    });
  }
  void OnWriteDone(bool ok) override {
    // What the loader thread wrote before its first StartWrite, visible to
    // ThreadSanitizer too (the hand-off runs through gRPC's core).
    (void)handed_off_.load(std::memory_order_acquire);
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "checkpoint transfer cancelled"));
      return;
    }
    if (offset_ >= static_cast<int64_t>(bytes_.size())) {
      Finish(grpc::Status::OK);
      return;
    }
    WriteNext();
  }
  void OnDone() override {
    // gRPC may run this on the loader thread itself (a Finish from there).
    if (loader_.get_id() == std::this_thread::get_id()) {
      loader_.detach();
    } else {
      loader_.join();
    }
    active_->fetch_sub(1);
    delete this;
  }

 private:
  void WriteNext() {
    const int64_t total = static_cast<int64_t>(bytes_.size());
    const int64_t n = std::min<int64_t>(kStateChunkBytes, total - offset_);
    chunk_.set_total_bytes(total);
    chunk_.set_offset(offset_);
    chunk_.set_data(bytes_.data() + offset_, static_cast<size_t>(n));
    chunk_.set_checkpoint_step(step_);
    offset_ += n;
    handed_off_.store(true, std::memory_order_release);
    StartWrite(&chunk_);
  }
  std::atomic<int>* const active_;
  std::atomic<bool> handed_off_{false};
  std::string bytes_;
  int64_t step_ = 0;
  int64_t offset_ = 0;
  v1::StateChunk chunk_;
  std::thread loader_;
};

// A ReplicaState stub for `address` (plain text without credentials) that
// takes one chunk per message.
std::unique_ptr<v1::ReplicaState::Stub> StateStub(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kStateChunkBytes + (64 << 10)));
  return v1::ReplicaState::NewStub(grpc::CreateCustomChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(), args));
}

class ErrorWriter final : public grpc::ServerWriteReactor<v1::StateChunk> {
 public:
  explicit ErrorWriter(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

StateServiceImpl::StateServiceImpl(const StateBoard* board, const Logger* logger,
                                   const CheckpointDirs* checkpoints)
    : board_(board), checkpoints_(checkpoints), log_(LoggerOrStderr(logger, "state")) {}

grpc::ServerWriteReactor<v1::StateChunk>* StateServiceImpl::FetchCheckpoint(
    grpc::CallbackServerContext* /*context*/, const v1::FetchCheckpointRequest* request) {
  const std::string& root = request->checkpoint_dir();
  if (checkpoints_ == nullptr || root.empty() || !checkpoints_->Contains(root)) {
    return new ErrorWriter(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("this worker wrote no checkpoints under \"", root,
                     "\" since it started (it serves only directories it wrote to)")));
  }
  if (request->step() < 0) {
    return new ErrorWriter(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        absl::StrCat("step is ", request->step(),
                                                     ", expected >= 0 (0 = the newest)")));
  }
  if (active_fetches_.fetch_add(1) >= kMaxCheckpointFetches) {
    active_fetches_.fetch_sub(1);
    busy_refusals_.fetch_add(1);
    return new ErrorWriter(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(kMaxCheckpointFetches, " checkpoint transfers in progress here; retry")));
  }
  // Validated (checksum, format) so that a broken newest file is skipped as
  // the reader would; the decoded state is dropped before the file's own
  // bytes are read and sent.
  const std::string dir = JobCheckpointDir(root, request->job_id());
  return new CheckpointWriter(
      [this, dir, step = request->step(), requester = request->requester()]()
          -> absl::StatusOr<std::pair<std::string, int64_t>> {
        std::function<void()> hook;
        {
          absl::MutexLock l(&hook_mu_);
          hook = load_hook_;
        }
        if (hook) hook();
        absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(dir, step, CheckpointLimits());
        if (!loaded.ok()) return loaded.status();
        const std::string path = loaded->path;
        const int64_t next_step = loaded->state.next_step;
        loaded = absl::StatusOr<LoadedCheckpoint>(absl::CancelledError("released"));
        absl::StatusOr<std::string> bytes = ReadCheckpointFile(path, CheckpointLimits());
        if (!bytes.ok()) return bytes.status();
        log_.Info("serving checkpoint", {{"checkpoint", path},
                                         {"bytes", static_cast<int64_t>(bytes->size())},
                                         {"requester", requester}});
        return std::make_pair(*std::move(bytes), next_step);
      },
      &active_fetches_);
}

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
  auto stub = StateStub(address, options.credentials);
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

absl::StatusOr<FetchedCheckpoint> FetchCheckpointFile(const std::string& address,
                                                      const FetchCheckpointOptions& options) {
  const std::string what = absl::StrCat("checkpoint of job ", options.job_id, " under ",
                                        options.checkpoint_dir, " from ", address);
  if (options.deadline == absl::InfinitePast()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no deadline given"));
  }
  auto stub = StateStub(address, options.credentials);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(options.deadline));
  v1::FetchCheckpointRequest request;
  request.set_checkpoint_dir(options.checkpoint_dir);
  request.set_job_id(options.job_id);
  request.set_step(options.step);
  request.set_requester(options.requester);
  auto reader = stub->FetchCheckpoint(&ctx, request);
  v1::StateChunk chunk;
  FetchedCheckpoint out;
  int64_t total = -1;
  absl::Status bad;
  while (reader->Read(&chunk)) {
    if (total < 0) {
      total = chunk.total_bytes();
      out.step = chunk.checkpoint_step();
      if (total <= 0 || total > options.max_bytes || out.step <= 0) {
        bad = absl::FailedPreconditionError(absl::StrCat(
            what, ": the peer offers ", total, " bytes (step ", out.step,
            "), expected 1..", options.max_bytes, " bytes for this job's model"));
        break;
      }
      out.bytes.reserve(static_cast<size_t>(total));
    }
    if (chunk.total_bytes() != total || chunk.checkpoint_step() != out.step ||
        chunk.offset() != static_cast<int64_t>(out.bytes.size()) ||
        static_cast<int64_t>(out.bytes.size() + chunk.data().size()) > total) {
      bad = absl::DataLossError(absl::StrCat(what, ": chunk at offset ", chunk.offset(), " of ",
                                             chunk.data().size(), " bytes after ",
                                             out.bytes.size(), " of ", total, " bytes"));
      break;
    }
    out.bytes.append(chunk.data());
  }
  if (!bad.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return bad;
  }
  const grpc::Status st = reader->Finish();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat(what, ": ", st.error_message()));
  }
  if (total < 0 || static_cast<int64_t>(out.bytes.size()) != total) {
    return absl::DataLossError(absl::StrCat(what, ": stream ended after ", out.bytes.size(),
                                            " of ", total, " bytes"));
  }
  return out;
}

absl::StatusOr<FetchedCheckpoint> FetchCheckpointFileInTurn(const std::string& address,
                                                            const FetchCheckpointOptions& options,
                                                            absl::Duration retry_every) {
  absl::StatusOr<FetchedCheckpoint> got = FetchCheckpointFile(address, options);
  while (got.status().code() == absl::StatusCode::kResourceExhausted &&
         absl::Now() + retry_every < options.deadline) {
    absl::SleepFor(retry_every);
    got = FetchCheckpointFile(address, options);
  }
  return got;
}

}  // namespace lockstep
