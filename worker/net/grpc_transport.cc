#include "worker/net/grpc_transport.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/net/peer_wire.h"

namespace lockstep {
namespace {

constexpr char kStreamMethod[] = "/lockstep.v1.PeerService/Stream";
// Payloads up to this size are copied into a plain gRPC slice; larger ones
// into a pooled buffer.
constexpr size_t kPoolThreshold = 4096;

}  // namespace

// Recycles the send buffers that back gRPC slices: gRPC releases a slice
// (possibly on another thread, possibly after the transport is gone) through
// DestroySlice, which returns the buffer here. Fresh memory is slow on these
// machines (page faults), so steady-state sends allocate nothing.
class SendBufferPool : public std::enable_shared_from_this<SendBufferPool> {
 public:
  static constexpr size_t kMaxPooled = 64;

  grpc::Slice Copy(const uint8_t* header, size_t header_len,
                   absl::Span<const uint8_t> data) {
    const size_t n = header_len + data.size();
    Buffer b = Get(n);
    std::memcpy(b.data, header, header_len);
    if (!data.empty()) std::memcpy(b.data + header_len, data.data(), data.size());
    auto* token = new Token{shared_from_this(), b};
    return grpc::Slice(b.data, n, &SendBufferPool::DestroySlice, token);
  }

 private:
  struct Buffer {
    uint8_t* data = nullptr;
    size_t capacity = 0;
  };
  struct Token {
    std::shared_ptr<SendBufferPool> pool;
    Buffer buffer;
  };

  static void DestroySlice(void* user_data) {
    auto* token = static_cast<Token*>(user_data);
    token->pool->Put(token->buffer);
    delete token;
  }

  Buffer Get(size_t n) {
    {
      absl::MutexLock l(&mu_);
      for (size_t i = free_.size(); i-- > 0;) {
        if (free_[i].capacity >= n) {
          Buffer b = free_[i];
          free_.erase(free_.begin() + i);
          return b;
        }
      }
    }
    Buffer b;
    b.capacity = (n + 4095) / 4096 * 4096;
    b.data = new uint8_t[b.capacity];
    return b;
  }

  void Put(Buffer b) {
    {
      absl::MutexLock l(&mu_);
      if (free_.size() < kMaxPooled) {
        free_.push_back(b);
        return;
      }
      // Full: keep the larger buffers.
      auto smallest = std::min_element(
          free_.begin(), free_.end(),
          [](const Buffer& x, const Buffer& y) { return x.capacity < y.capacity; });
      if (smallest->capacity < b.capacity) std::swap(*smallest, b);
    }
    delete[] b.data;
  }

 public:
  ~SendBufferPool() {
    for (Buffer& b : free_) delete[] b.data;
  }

 private:
  absl::Mutex mu_;
  std::vector<Buffer> free_ ABSL_GUARDED_BY(mu_);
};

// One long-lived client stream (PeerService.Stream, driven as a raw bidi
// call through grpc::GenericStub) to one peer. Owns itself from Start until
// gRPC calls OnDone; the transport holds further references.
//
// Writes: one in flight (gRPC's rule), the rest queued in order. A hold
// keeps the call alive while Send may still start writes; it is released
// once the stream is broken or half-closed and no write is pending.
class OutboundStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public std::enable_shared_from_this<OutboundStream> {
 public:
  OutboundStream(std::string peer_name, int64_t max_queued_bytes,
                 std::shared_ptr<ProgressMark> progress)
      : peer_name_(std::move(peer_name)),
        max_queued_(max_queued_bytes),
        progress_(std::move(progress)) {}

  // `channel` is the one `stub` calls on: the stream keeps a reference.
  static std::shared_ptr<OutboundStream> Start(std::shared_ptr<grpc::Channel> channel,
                                               grpc::GenericStub* stub,
                                               std::string peer_name,
                                               int64_t max_queued_bytes,
                                               std::shared_ptr<ProgressMark> progress) {
    auto s = std::make_shared<OutboundStream>(std::move(peer_name), max_queued_bytes,
                                              std::move(progress));
    s->channel_ = std::move(channel);
    {
      absl::MutexLock l(&s->mu_);
      s->self_ = s;
    }
    stub->PrepareBidiStreamingCall(&s->ctx_, kStreamMethod,
                                   grpc::StubOptions(), s.get());
    s->AddHold();
    s->StartRead(&s->reply_);
    // Publishes what this thread wrote (the object, self_, channel_) to the
    // gRPC threads that run the reactions (see HandedOff).
    s->handed_off_.store(true, std::memory_order_release);
    s->StartCall();
    return s;
  }

  // Queues `msg` (`bytes` long) for writing. Waits while the queue is full.
  absl::Status Enqueue(grpc::ByteBuffer msg, size_t bytes,
                       const MessageKey& key, absl::Time deadline) {
    bool start = false;
    {
      absl::MutexLock l(&mu_);
      while (!broken_ && !closing_ && queued_bytes_ > 0 &&
             queued_bytes_ + static_cast<int64_t>(bytes) > max_queued_) {
        if (cv_.WaitWithDeadline(&mu_, deadline)) {
          if (broken_ || closing_ || queued_bytes_ == 0 ||
              queued_bytes_ + static_cast<int64_t>(bytes) <= max_queued_) {
            break;
          }
          return absl::DeadlineExceededError(absl::StrFormat(
              "send of message %s (%d bytes) timed out: %d bytes still "
              "queued for this peer (it is not reading fast enough or the "
              "network is stuck)",
              KeyToString(key), bytes, queued_bytes_));
        }
      }
      if (broken_) return BrokenStatusLocked(deadline);
      if (closing_) {
        return absl::CancelledError(absl::StrFormat(
            "send of message %s: transport shut down", KeyToString(key)));
      }
      queued_bytes_ += static_cast<int64_t>(bytes);
      queue_.emplace_back(std::move(msg), bytes);
      if (!writing_) start = NextWriteLocked();
    }
    if (start) StartWrite(&current_);
    return absl::OkStatus();
  }

  bool broken() const {
    absl::MutexLock l(&mu_);
    return broken_;
  }

  // Status to report for a broken stream (waits up to 1 s, bounded by
  // `deadline`, for gRPC's final status so the message says why).
  absl::Status BrokenStatus(absl::Time deadline) {
    absl::MutexLock l(&mu_);
    return BrokenStatusLocked(deadline);
  }

  // Shutdown, step 1: no more Enqueue (waiting ones return CancelledError).
  void BeginClose() {
    absl::MutexLock l(&mu_);
    closing_ = true;
    cv_.SignalAll();
  }

  // Shutdown, step 2: queues `fin` (if given) after the messages already
  // queued and half-closes the stream once everything is written.
  // Idempotent.
  void EndClose(const grpc::ByteBuffer* fin, size_t fin_bytes) {
    bool start = false, writes_done = false, release = false;
    {
      absl::MutexLock l(&mu_);
      closing_ = true;
      if (half_close_) return;
      half_close_ = true;
      cv_.SignalAll();
      if (!broken_) {
        if (fin != nullptr) {
          queued_bytes_ += static_cast<int64_t>(fin_bytes);
          queue_.emplace_back(*fin, fin_bytes);
        }
        if (!writing_) {
          if (!queue_.empty()) {
            start = NextWriteLocked();
          } else {
            writes_done = writes_done_started_ = true;
          }
        }
      }
      release = ReleaseHoldLocked();
    }
    if (start) StartWrite(&current_);
    if (writes_done) StartWritesDone();
    if (release) RemoveHold();
  }

  void Cancel() { ctx_.TryCancel(); }

  // Waits until gRPC called OnDone; false at the deadline.
  bool WaitDone(absl::Time deadline) {
    absl::MutexLock l(&mu_);
    while (!done_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return done_;
    }
    return true;
  }

  void OnWriteDone(bool ok) override {
    HandedOff();
    auto keep = shared_from_this();
    bool start = false, writes_done = false, release = false;
    // A message went out: the job's waits count from here (peer_wait.h).
    if (ok) TouchProgress(progress_.get());
    {
      absl::MutexLock l(&mu_);
      writing_ = false;
      queued_bytes_ -= static_cast<int64_t>(current_bytes_);
      current_.Clear();
      current_bytes_ = 0;
      if (!ok) {
        MarkBrokenLocked("a write failed");
      } else if (!queue_.empty() && !broken_) {
        start = NextWriteLocked();
      } else if (half_close_ && !writes_done_started_ && !broken_) {
        writes_done = writes_done_started_ = true;
      }
      release = ReleaseHoldLocked();
      cv_.SignalAll();
    }
    if (start) StartWrite(&current_);
    if (writes_done) StartWritesDone();
    if (release) RemoveHold();
  }

  void OnWritesDoneDone(bool ok) override {
    HandedOff();
    auto keep = shared_from_this();
    bool release = false;
    {
      absl::MutexLock l(&mu_);
      writes_done_finished_ = true;
      if (!ok) MarkBrokenLocked("half-close failed");
      release = ReleaseHoldLocked();
    }
    if (release) RemoveHold();
  }

  void OnReadDone(bool ok) override {
    HandedOff();
    auto keep = shared_from_this();
    bool release = false;
    {
      absl::MutexLock l(&mu_);
      // The peer answers only after our half-close; anything else means it
      // ended the stream.
      if (!writes_done_started_) {
        MarkBrokenLocked(ok ? "the peer ended the stream early"
                            : "the peer ended the stream");
      }
      release = ReleaseHoldLocked();
    }
    if (release) RemoveHold();
  }

  void OnDone(const grpc::Status& s) override {
    HandedOff();
    std::shared_ptr<OutboundStream> keep;
    absl::MutexLock l(&mu_);
    keep = std::move(self_);  // released after the lock (declared first)
    done_ = true;
    final_ = s;
    if (!s.ok() && !broken_) MarkBrokenLocked("the call failed");
    cv_.SignalAll();
  }

 private:
  bool NextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    current_ = std::move(queue_.front().first);
    current_bytes_ = queue_.front().second;
    queue_.pop_front();
    writing_ = true;
    return true;
  }

  void MarkBrokenLocked(const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_) return;
    broken_ = true;
    why_ = why;
    for (auto& m : queue_) queued_bytes_ -= static_cast<int64_t>(m.second);
    queue_.clear();
    cv_.SignalAll();
  }

  // True (once) when the hold can go: no write pending or about to start,
  // and no more writes will be started.
  bool ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (hold_released_ || writing_) return false;
    const bool finished_writing =
        broken_ || (writes_done_started_ && writes_done_finished_);
    if (!finished_writing) return false;
    hold_released_ = true;
    return true;
  }

  absl::Status BrokenStatusLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time wait_until = std::min(deadline, absl::Now() + absl::Seconds(1));
    while (!done_) {
      if (cv_.WaitWithDeadline(&mu_, wait_until)) break;
    }
    std::string detail = why_;
    if (done_ && !final_.ok()) {
      absl::StrAppend(&detail, ": gRPC status ",
                      absl::StatusCodeToString(
                          static_cast<absl::StatusCode>(final_.error_code())),
                      ": ", final_.error_message());
    }
    return absl::UnavailableError(
        absl::StrCat("stream to ", peer_name_, " broke (", detail, ")"));
  }

  const std::string peer_name_;
  const int64_t max_queued_;
  // The job's progress mark (may outlive the job: shared); nullptr = none.
  const std::shared_ptr<ProgressMark> progress_;
  // Declared before ctx_, so released after it: the call's ClientContext
  // also holds the channel, but releases it inside libgrpc++, where the
  // reference count's atomics are invisible to ThreadSanitizer; when this
  // reference is the last, the channel is freed from code TSan sees
  // ordered after every other holder's release (tests/tsan/run_tsan.sh:
  // nonfinite_paths_test reported the free as a race with the transport's
  // release of the same channel on another thread).
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext ctx_;
  // gRPC hands this object from Start's thread to the threads that run its
  // reactions through its core's atomics, which ThreadSanitizer cannot see
  // (Debian's gRPC is not instrumented): a release in Start and an acquire
  // at the top of every reaction make that order visible to it.
  std::atomic<bool> handed_off_{false};
  void HandedOff() const { (void)handed_off_.load(std::memory_order_acquire); }
  grpc::ByteBuffer reply_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::shared_ptr<OutboundStream> self_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<grpc::ByteBuffer, size_t>> queue_ ABSL_GUARDED_BY(mu_);
  // The message being written; only touched by whoever set writing_.
  grpc::ByteBuffer current_;
  size_t current_bytes_ = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // queued + in flight
  bool closing_ ABSL_GUARDED_BY(mu_) = false;     // Enqueue refused
  bool half_close_ ABSL_GUARDED_BY(mu_) = false;  // WritesDone once drained
  bool writes_done_started_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_finished_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::string why_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
};

struct GrpcTransport::PeerLink {
  explicit PeerLink(int streams)
      : channels(streams), stubs(streams), streams(streams) {}
  absl::Mutex mu;  // serializes Sends to this peer (FIFO) and connecting
  // One channel (TCP connection), stub and stream per parallel stream.
  std::vector<std::shared_ptr<grpc::Channel>> channels ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<OutboundStream>> streams ABSL_GUARDED_BY(mu);
  uint64_t next_seq ABSL_GUARDED_BY(mu) = 0;  // of the next message
};

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Create(
    PeerServiceImpl* service, uint64_t group, int rank,
    std::vector<std::string> peer_addresses, GrpcTransportOptions options) {
  if (service == nullptr) {
    return absl::InvalidArgumentError("GrpcTransport: service is null");
  }
  absl::StatusOr<std::shared_ptr<GroupInbox>> inbox =
      service->Attach(group, rank, std::move(peer_addresses), options.progress);
  if (!inbox.ok()) return inbox.status();
  return std::unique_ptr<GrpcTransport>(
      new GrpcTransport(service, *std::move(inbox), std::move(options)));
}

GrpcTransport::GrpcTransport(PeerServiceImpl* service,
                             std::shared_ptr<GroupInbox> inbox,
                             GrpcTransportOptions options)
    : service_(service),
      inbox_(std::move(inbox)),
      options_(std::move(options)),
      pool_(std::make_shared<SendBufferPool>()) {
  const int streams = std::max(1, options_.streams_per_peer);
  for (int r = 0; r < inbox_->world_size(); ++r) {
    links_.push_back(std::make_unique<PeerLink>(streams));
  }
}

GrpcTransport::~GrpcTransport() { Shutdown(); }

bool GrpcTransport::shut_down() const {
  absl::MutexLock l(&mu_);
  return shut_down_;
}

absl::Status GrpcTransport::Named(int peer, const absl::Status& s) const {
  return absl::Status(s.code(),
                      absl::StrCat(inbox_->PeerName(peer), ": ", s.message()));
}

absl::StatusOr<std::shared_ptr<OutboundStream>> GrpcTransport::StreamTo(
    int to, PeerLink& link, int index, absl::Time deadline) {
  std::shared_ptr<OutboundStream>& stream = link.streams[index];
  std::shared_ptr<grpc::Channel>& channel = link.channels[index];
  if (stream != nullptr) {
    if (!stream->broken()) return stream;
    // It broke after an earlier Send returned: report it once; the next Send
    // opens a fresh stream.
    absl::Status s = stream->BrokenStatus(deadline);
    stream.reset();
    return s;
  }
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, options_.keepalive.time_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options_.keepalive.timeout_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // One connection per (transport, peer), never shared with other jobs.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    for (const auto& [name, value] : options_.channel_args) {
      args.SetInt(name, value);
    }
    channel = grpc::CreateCustomChannel(
        inbox_->peer_addresses[to],
        options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
        args);
    link.stubs[index] = std::make_unique<grpc::GenericStub>(channel);
  }
  // Connect (the peer may still be starting); poll in short slices so
  // Shutdown is noticed.
  const absl::Time connect_deadline =
      std::min(deadline, absl::Now() + options_.connect_timeout);
  while (true) {
    if (shut_down()) {
      return absl::CancelledError("transport shut down while connecting");
    }
    const absl::Time now = absl::Now();
    if (now >= connect_deadline) {
      return absl::UnavailableError(absl::StrFormat(
          "cannot connect (channel state %d) before the %s",
          static_cast<int>(channel->GetState(false)),
          connect_deadline == deadline ? "send deadline" : "connect timeout"));
    }
    const absl::Time slice = std::min(connect_deadline, now + absl::Milliseconds(50));
    if (channel->WaitForConnected(absl::ToChronoTime(slice))) break;
  }
  std::shared_ptr<OutboundStream> s = OutboundStream::Start(
      channel, link.stubs[index].get(), inbox_->PeerName(to), options_.max_queued_bytes,
      options_.progress);
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) {
      s->EndClose(nullptr, 0);
      s->Cancel();
      return absl::CancelledError("transport shut down while connecting");
    }
    streams_.push_back(s);
  }
  stream = s;
  return s;
}

absl::Status GrpcTransport::Send(int to, const MessageKey& key,
                                 absl::Span<const uint8_t> data,
                                 absl::Time deadline) {
  absl::Status s = CheckPeer(rank(), world_size(), to, "send to");
  if (!s.ok()) return s;
  if (static_cast<int64_t>(data.size()) > kMaxPeerMessageBytes) {
    return Named(to, absl::InvalidArgumentError(absl::StrFormat(
                         "message %s has %d bytes; the gRPC transport carries "
                         "at most %d per message",
                         KeyToString(key), data.size(), kMaxPeerMessageBytes)));
  }
  if (shut_down()) {
    return Named(to, absl::CancelledError(absl::StrFormat(
                         "send of message %s: transport shut down",
                         KeyToString(key))));
  }
  PeerLink& link = *links_[to];
  absl::MutexLock l(&link.mu);
  const int streams = static_cast<int>(link.streams.size());
  PeerHeader h;
  h.group = inbox_->group;
  h.from_rank = inbox_->rank;
  h.key = key;
  h.seq = link.next_seq;
  h.streams = static_cast<uint32_t>(streams);
  uint8_t header[kMaxPeerHeaderBytes];
  const size_t header_len = EncodePeerHeader(h, data.size(), header);
  grpc::ByteBuffer msg;
  if (data.size() <= kPoolThreshold) {
    uint8_t small[kMaxPeerHeaderBytes + kPoolThreshold];
    std::memcpy(small, header, header_len);
    if (!data.empty()) std::memcpy(small + header_len, data.data(), data.size());
    grpc::Slice slice(small, header_len + data.size());
    msg = grpc::ByteBuffer(&slice, 1);
  } else {
    grpc::Slice slice = pool_->Copy(header, header_len, data);
    msg = grpc::ByteBuffer(&slice, 1);
  }

  const int index = static_cast<int>(h.seq % static_cast<uint64_t>(streams));
  absl::StatusOr<std::shared_ptr<OutboundStream>> stream =
      StreamTo(to, link, index, deadline);
  if (!stream.ok()) return Named(to, stream.status());
  s = (*stream)->Enqueue(std::move(msg), header_len + data.size(), key,
                         deadline);
  if (!s.ok()) {
    if ((*stream)->broken()) link.streams[index].reset();
    return Named(to, s);
  }
  ++link.next_seq;  // a message that was not queued uses no number
  return s;
}

absl::Status GrpcTransport::Recv(int from, const MessageKey& key,
                                 absl::Span<uint8_t> out,
                                 absl::Time deadline) {
  absl::Status s = CheckPeer(rank(), world_size(), from, "receive from");
  if (!s.ok()) return s;
  if (options_.recv_spin > absl::ZeroDuration()) {
    const absl::Time spin_end =
        std::min(deadline, absl::Now() + options_.recv_spin);
    while (true) {
      // A deadline in the past: take the message if it is there, else
      // DeadlineExceeded at once.
      s = inbox_->mailbox.Receive(from, key, out, absl::InfinitePast());
      if (s.code() != absl::StatusCode::kDeadlineExceeded) {
        return s.ok() ? s : Named(from, s);
      }
      if (absl::Now() >= spin_end) break;
      sched_yield();
    }
  }
  s = inbox_->mailbox.Receive(from, key, out, deadline);
  return s.ok() ? s : Named(from, s);
}

void GrpcTransport::Shutdown() {
  std::vector<std::shared_ptr<OutboundStream>> streams;
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    streams = streams_;
  }
  service_->Detach(inbox_->group,
                   absl::CancelledError(absl::StrFormat(
                       "rank %d: transport of group %d shut down",
                       inbox_->rank, inbox_->group)));
  // Refuse new messages (waiting Sends return), then end every current
  // stream with a fin message telling the peer how many messages it must
  // expect on the link, so its Recv fails fast once they are consumed.
  for (auto& s : streams) s->BeginClose();
  for (int to = 0; to < world_size(); ++to) {
    if (to == rank()) continue;
    PeerLink& link = *links_[to];
    absl::MutexLock l(&link.mu);  // a Send holding it returns promptly now
    if (link.next_seq == 0) continue;
    PeerHeader h;
    h.group = inbox_->group;
    h.from_rank = inbox_->rank;
    h.seq = link.next_seq;
    h.streams = static_cast<uint32_t>(link.streams.size());
    h.fin_total = link.next_seq;
    uint8_t header[kMaxPeerHeaderBytes];
    const size_t n = EncodePeerHeader(h, 0, header);
    grpc::Slice slice(header, n);
    const grpc::ByteBuffer fin(&slice, 1);
    for (auto& s : link.streams) {
      if (s != nullptr) s->EndClose(&fin, n);
    }
  }
  for (auto& s : streams) s->EndClose(nullptr, 0);  // the rest (broken ones)
  const absl::Time drain = absl::Now() + options_.close_timeout;
  for (auto& s : streams) {
    if (!s->WaitDone(drain)) s->Cancel();
  }
  const absl::Time last = absl::Now() + absl::Seconds(5);
  for (auto& s : streams) {
    if (!s->WaitDone(last)) {
      service_->logger().Warn("a peer stream did not finish 5 s after cancellation",
                              {{"group", inbox_->group}, {"rank", inbox_->rank}});
    }
  }
}

}  // namespace lockstep
