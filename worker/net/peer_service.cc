#include "worker/net/peer_service.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/net/peer_wire.h"

namespace lockstep {

std::string GroupInbox::PeerName(int r) const {
  if (r < 0 || r >= world_size()) return absl::StrFormat("peer rank %d", r);
  return absl::StrFormat("peer rank %d (%s)", r, peer_addresses[r]);
}

namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

}  // namespace

// One incoming PeerService.Stream call. Owned by gRPC until OnDone, plus
// temporary references taken by the service (Attach resuming a parked
// stream, Shutdown finishing it); deleted when the last reference drops.
//
// All state is guarded by mu_. Lock order: InboundStream::mu_ before
// PeerServiceImpl::mu_ (the service never calls into a stream while holding
// its own lock).
class InboundStream final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  InboundStream(PeerServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx) {}

  void Begin(bool accept) {
    // Publishes this object to the gRPC threads that run its reactions
    // (see HandedOff).
    handed_off_.store(true, std::memory_order_release);
    absl::MutexLock l(&mu_);
    if (!accept) {
      FinishLocked(absl::UnavailableError(
          "peer service is shutting down; stream rejected"));
      return;
    }
    StartRead(&buf_);
  }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // The group this stream was parked for has attached.
  void Resume(std::shared_ptr<GroupInbox> inbox) {
    absl::MutexLock l(&mu_);
    if (finished_ || !parked_) return;
    parked_ = false;
    inbox_ = std::move(inbox);
    if (!CheckSenderLocked()) return;
    DeliverAndReadLocked();
  }

  // Finishes the call (service shutdown) unless already finished.
  void Abort(const absl::Status& why) {
    absl::MutexLock l(&mu_);
    if (parked_) parked_ = false;  // the service already dropped it
    FinishLocked(why, /*log=*/false);  // a normal part of shutting down
  }

  void OnReadDone(bool ok) override {
    HandedOff();
    absl::MutexLock l(&mu_);
    if (finished_) return;
    if (!ok) {
      // Half-close or cancellation: no more messages on this stream.
      // A normal end after the fin message is handled by the fin.
      if (inbox_ != nullptr && from_ >= 0 && from_ < inbox_->world_size() &&
          ctx_->IsCancelled()) {
        inbox_->mailbox.ClosePeer(
            from_, absl::UnavailableError(absl::StrFormat(
                       "%s: its stream to rank %d of group %d broke "
                       "(cancelled or connection lost)",
                       inbox_->PeerName(from_), inbox_->rank, group_)));
      }
      FinishLocked(absl::OkStatus());
      return;
    }
    slices_.clear();
    if (!buf_.Dump(&slices_).ok()) {
      FinishLocked(absl::DataLossError("cannot read received message"));
      return;
    }
    frags_.clear();
    for (const grpc::Slice& s : slices_) {
      frags_.emplace_back(s.begin(), s.size());
    }
    PeerHeader h;
    absl::Status st = DecodePeerMessage(frags_, &h, &payload_);
    if (!st.ok()) {
      FinishLocked(absl::Status(
          st.code(), absl::StrCat("message ", messages_, " of stream from ",
                                  ctx_->peer(), ": ", st.message())));
      return;
    }
    header_ = h;
    if (!identified_) {
      identified_ = true;
      group_ = h.group;
      from_ = h.from_rank;
      absl::Status reject;
      switch (service_->RouteStream(this, group_, &inbox_, &reject)) {
        case PeerServiceImpl::Route::kReject:
          FinishLocked(reject);
          return;
        case PeerServiceImpl::Route::kParked:
          parked_ = true;
          service_->log_.Info("parked a stream for a group not attached yet",
                              {{"group", group_}, {"from_rank", from_}, {"peer", ctx_->peer()}});
          return;  // Resume() delivers the held message
        case PeerServiceImpl::Route::kDeliver:
          break;
      }
      if (!CheckSenderLocked()) return;
    } else if (h.group != group_ || h.from_rank != from_) {
      FinishLocked(absl::InvalidArgumentError(absl::StrFormat(
          "stream from rank %d of group %d (%s) carried a message from rank "
          "%d of group %d; a stream serves one (group, rank)",
          from_, group_, ctx_->peer(), h.from_rank, h.group)));
      return;
    }
    DeliverAndReadLocked();
  }

  void OnCancel() override {
    HandedOff();
    absl::MutexLock l(&mu_);
    if (!parked_) return;  // a pending read completes with !ok instead
    parked_ = false;
    service_->Unpark(this, group_);
    FinishLocked(absl::CancelledError("stream cancelled while parked"));
  }

  void OnDone() override {
    HandedOff();
    // gRPC calls OnDone after every other reaction (OnCancel included)
    // returned, but orders them through its own (uninstrumented) atomics:
    // taking mu_ once orders this thread after their unlocks in a way
    // ThreadSanitizer sees, before the last Unref may destroy mu_.
    { absl::MutexLock l(&mu_); }
    service_->Forget(this);
    Unref();
  }

 private:
  ~InboundStream() override = default;

  // gRPC hands this object from the thread that created it (Stream, Begin)
  // to the threads that run its reactions through its core's atomics,
  // which ThreadSanitizer cannot see (Debian's gRPC is not instrumented).
  // A release in Begin and an acquire at the top of every reaction make
  // that order visible to it; at run time the load costs nothing.
  void HandedOff() const { (void)handed_off_.load(std::memory_order_acquire); }

  // The sender must be another rank of the group; finishes the call if not.
  bool CheckSenderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (from_ >= 0 && from_ < inbox_->world_size() && from_ != inbox_->rank) {
      return true;
    }
    FinishLocked(absl::InvalidArgumentError(absl::StrFormat(
        "rank %d of group %d (%d ranks) got a stream from %s claiming to be "
        "rank %d; expected another rank of the group",
        inbox_->rank, group_, inbox_->world_size(), ctx_->peer(), from_)));
    inbox_.reset();
    return false;
  }

  // Hands one message to the mailbox without copying it: the mailbox keeps
  // the received gRPC slices alive until the rank has copied the payload out
  // (the receive path's only user-space copy). Moving the vector keeps the
  // slice objects in place, so spans into inlined slices stay valid.
  absl::Status DeliverOneLocked(const MessageKey& key,
                                std::vector<absl::Span<const uint8_t>> payload,
                                std::vector<grpc::Slice> slices)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (payload.size() > 1) service_->fragmented_.fetch_add(1, std::memory_order_relaxed);
    auto keep = std::make_shared<const std::vector<grpc::Slice>>(std::move(slices));
    absl::Status st = inbox_->mailbox.DeliverFragments(from_, key, std::move(payload),
                                                       std::move(keep));
    if (st.ok()) service_->delivered_.fetch_add(1, std::memory_order_relaxed);
    return st;
  }

  int64_t PayloadBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t n = 0;
    for (const auto& part : payload_) n += static_cast<int64_t>(part.size());
    return n;
  }

  // Delivers the current message in seq order (holding it if it overtook a
  // predecessor sent on another stream), then reads the next one.
  void DeliverAndReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    LinkIn& link = *inbox_->links[from_];
    absl::Status st;
    {
      absl::MutexLock ll(&link.mu);
      if (header_.fin_total > 0) {
        link.fin_total = header_.fin_total;
      } else if (header_.seq < link.next_seq) {
        st = absl::InvalidArgumentError(absl::StrFormat(
            "%s sent message %s with seq %d, but every seq below %d was "
            "already delivered",
            inbox_->PeerName(from_), KeyToString(header_.key), header_.seq,
            link.next_seq));
      } else if (header_.seq > link.next_seq &&
                 (header_.seq - link.next_seq > kMaxHeldGap ||
                  link.held_bytes + PayloadBytes() > kMaxHeldBytes)) {
        st = absl::ResourceExhaustedError(absl::StrFormat(
            "%s sent message %s with seq %d while seq %d is the next to deliver; at most %d "
            "message(s) and %d bytes may arrive ahead of their predecessors (%d bytes held)",
            inbox_->PeerName(from_), KeyToString(header_.key), header_.seq, link.next_seq,
            kMaxHeldGap, kMaxHeldBytes, link.held_bytes));
      } else if (header_.seq > link.next_seq) {
        link.held_bytes += PayloadBytes();
        LinkIn::Held& held = link.held[header_.seq];
        held.key = header_.key;
        held.slices = std::move(slices_);
        held.payload = std::move(payload_);
        slices_ = {};
        payload_ = {};
      } else {
        st = DeliverOneLocked(header_.key, std::move(payload_), std::move(slices_));
        payload_ = {};
        slices_ = {};
        if (st.ok()) ++link.next_seq;
        while (st.ok() && !link.held.empty() &&
               link.held.begin()->first == link.next_seq) {
          auto it = link.held.begin();
          for (const auto& part : it->second.payload) {
            link.held_bytes -= static_cast<int64_t>(part.size());
          }
          st = DeliverOneLocked(it->second.key, std::move(it->second.payload),
                                std::move(it->second.slices));
          link.held.erase(it);
          if (st.ok()) ++link.next_seq;
        }
      }
      if (st.ok() && link.fin_total > 0 && link.next_seq >= link.fin_total) {
        // Everything the sender sent is delivered and it has shut down.
        inbox_->mailbox.ClosePeer(
            from_, absl::UnavailableError(absl::StrFormat(
                       "%s shut its transport down after sending %d "
                       "message(s) to rank %d of group %d",
                       inbox_->PeerName(from_), link.fin_total, inbox_->rank,
                       group_)));
      }
    }
    payload_.clear();
    frags_.clear();
    slices_.clear();
    buf_.Clear();
    if (!st.ok()) {
      FinishLocked(st);
      return;
    }
    // A message was accepted (delivered or held for its predecessors): the
    // job's waits count from here (peer_wait.h). A refused one is no
    // progress.
    TouchProgress(inbox_->progress.get());
    ++messages_;
    StartRead(&buf_);
  }

  void FinishLocked(const absl::Status& s, bool log = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    if (!s.ok() && log) {
      service_->CountRejected();
      service_->log_.Warn("finishing a peer stream",
                          {{"peer", ctx_->peer()}, {"error", s.ToString()}});
    }
    Finish(ToGrpc(s));
  }

  PeerServiceImpl* const service_;
  grpc::CallbackServerContext* const ctx_;
  std::atomic<int> refs_{1};  // gRPC's reference, dropped in OnDone
  std::atomic<bool> handed_off_{false};  // see HandedOff

  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool identified_ ABSL_GUARDED_BY(mu_) = false;
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t group_ ABSL_GUARDED_BY(mu_) = 0;
  int from_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t messages_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<GroupInbox> inbox_ ABSL_GUARDED_BY(mu_);
  // The message being processed (or held while parked).
  grpc::ByteBuffer buf_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::Slice> slices_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Span<const uint8_t>> frags_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Span<const uint8_t>> payload_ ABSL_GUARDED_BY(mu_);
  PeerHeader header_ ABSL_GUARDED_BY(mu_);
};

PeerServiceImpl::PeerServiceImpl(PeerKeepalive keepalive, const Logger* logger)
    : keepalive_(keepalive), log_(LoggerOrStderr(logger, "peer")) {}

PeerServiceImpl::~PeerServiceImpl() {
  Shutdown();
  // The server must be shut down before the service is destroyed, so every
  // stream has seen OnDone; wait briefly in case gRPC is still unwinding.
  absl::MutexLock l(&mu_);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!live_.empty()) {
    if (idle_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (!live_.empty()) {
    log_.Error("destroyed with streams still open; shut the grpc::Server down before "
               "destroying the service",
               {{"streams", live_.size()}});
  }
}

void PeerServiceImpl::RegisterOn(grpc::ServerBuilder& builder) {
  builder.RegisterService(this);
  builder.AddChannelArgument(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                             static_cast<int>(kMaxPeerMessageBytes + 4096));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_.time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             keepalive_.timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      keepalive_.min_recv_ping_interval_ms);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* PeerServiceImpl::Stream(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  // The reply of a normally ended stream: an empty PeerStreamReply (zero
  // bytes). It must be a valid buffer or gRPC sends no message at all.
  grpc::Slice empty;
  *response = grpc::ByteBuffer(&empty, 1);
  auto* s = new InboundStream(this, context);
  bool accept;
  {
    absl::MutexLock l(&mu_);
    accept = !shutdown_;
    live_.insert(s);
    ++opened_;
  }
  s->Begin(accept);
  return s;
}

absl::StatusOr<std::shared_ptr<GroupInbox>> PeerServiceImpl::Attach(
    uint64_t group, int rank, std::vector<std::string> peer_addresses,
    std::shared_ptr<ProgressMark> progress) {
  const int k = static_cast<int>(peer_addresses.size());
  if (k < 1 || rank < 0 || rank >= k) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "attach group %d: rank %d with %d peer addresses; expected 0 <= rank "
        "< number of addresses",
        group, rank, k));
  }
  auto inbox = std::make_shared<GroupInbox>(group, rank, std::move(peer_addresses),
                                            std::move(progress));
  std::vector<InboundStream*> resume;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "attach group %d: the peer service is shut down", group));
    }
    if (groups_.count(group) != 0) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "attach group %d: already attached on this worker", group));
    }
    groups_[group] = inbox;
    if (retired_.erase(group) != 0) {
      for (auto it = retired_order_.begin(); it != retired_order_.end(); ++it) {
        if (*it == group) {
          retired_order_.erase(it);
          break;
        }
      }
    }
    auto it = parked_.find(group);
    if (it != parked_.end()) {
      resume = std::move(it->second);
      parked_now_ -= static_cast<int>(resume.size());
      parked_.erase(it);
      for (InboundStream* s : resume) s->Ref();
    }
  }
  for (InboundStream* s : resume) {
    s->Resume(inbox);
    s->Unref();
  }
  return inbox;
}

void PeerServiceImpl::Detach(uint64_t group, absl::Status reason) {
  std::shared_ptr<GroupInbox> inbox;
  {
    absl::MutexLock l(&mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) return;
    inbox = std::move(it->second);
    groups_.erase(it);
    if (retired_.insert(group).second) {
      retired_order_.push_back(group);
      if (retired_order_.size() > kRetiredGroupsRemembered) {
        retired_.erase(retired_order_.front());
        retired_order_.pop_front();
      }
    }
  }
  if (reason.ok()) reason = absl::CancelledError("group detached");
  for (int r = 0; r < inbox->world_size(); ++r) {
    inbox->mailbox.ClosePeer(r, reason);
  }
}

void PeerServiceImpl::Shutdown() {
  std::vector<InboundStream*> streams;
  std::vector<std::shared_ptr<GroupInbox>> groups;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (auto& [id, inbox] : groups_) groups.push_back(inbox);
    parked_.clear();
    parked_now_ = 0;
    for (InboundStream* s : live_) {
      s->Ref();
      streams.push_back(s);
    }
  }
  for (const auto& inbox : groups) {
    for (int r = 0; r < inbox->world_size(); ++r) {
      inbox->mailbox.ClosePeer(
          r, absl::UnavailableError("the worker's peer service shut down"));
    }
  }
  for (InboundStream* s : streams) {
    s->Abort(absl::UnavailableError("the worker's peer service shut down"));
    s->Unref();
  }
}

PeerServiceImpl::Route PeerServiceImpl::RouteStream(
    InboundStream* s, uint64_t group, std::shared_ptr<GroupInbox>* inbox,
    absl::Status* reject) {
  absl::MutexLock l(&mu_);
  if (shutdown_) {
    *reject = absl::UnavailableError("the worker's peer service shut down");
    return Route::kReject;
  }
  auto it = groups_.find(group);
  if (it != groups_.end()) {
    *inbox = it->second;
    return Route::kDeliver;
  }
  if (retired_.count(group) != 0) {
    *reject = absl::FailedPreconditionError(absl::StrFormat(
        "group %d has finished on this worker; stream rejected", group));
    return Route::kReject;
  }
  if (parked_now_ >= max_parked_) {
    *reject = absl::ResourceExhaustedError(absl::StrFormat(
        "%d streams are already parked for groups not attached on this worker (at most %d); "
        "stream for group %d rejected",
        parked_now_, max_parked_, group));
    return Route::kReject;
  }
  parked_[group].push_back(s);
  ++parked_now_;
  ++parked_total_;
  parked_cv_.SignalAll();
  return Route::kParked;
}

void PeerServiceImpl::Unpark(InboundStream* s, uint64_t group) {
  absl::MutexLock l(&mu_);
  auto it = parked_.find(group);
  if (it == parked_.end()) return;
  std::vector<InboundStream*>& v = it->second;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == s) {
      v.erase(v.begin() + i);
      --parked_now_;
      break;
    }
  }
  if (v.empty()) parked_.erase(it);
}

void PeerServiceImpl::SetMaxParkedStreams(int n) {
  absl::MutexLock l(&mu_);
  max_parked_ = n;
}

int PeerServiceImpl::streams_parked_now() const {
  absl::MutexLock l(&mu_);
  return parked_now_;
}

void PeerServiceImpl::Forget(InboundStream* s) {
  absl::MutexLock l(&mu_);
  live_.erase(s);
  // A stream that is done cannot still be parked, but be defensive.
  for (auto it = parked_.begin(); it != parked_.end();) {
    std::vector<InboundStream*>& v = it->second;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == s) {
        v.erase(v.begin() + i);
        break;
      }
    }
    it = v.empty() ? parked_.erase(it) : std::next(it);
  }
  if (live_.empty()) idle_.SignalAll();
}

void PeerServiceImpl::CountRejected() {
  absl::MutexLock l(&mu_);
  ++rejected_;
}

int64_t PeerServiceImpl::streams_opened() const {
  absl::MutexLock l(&mu_);
  return opened_;
}
int64_t PeerServiceImpl::streams_parked() const {
  absl::MutexLock l(&mu_);
  return parked_total_;
}
bool PeerServiceImpl::AwaitParked(int64_t n, absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  while (parked_total_ < n) {
    if (parked_cv_.WaitWithDeadline(&mu_, deadline)) return parked_total_ >= n;
  }
  return true;
}

int64_t PeerServiceImpl::streams_rejected() const {
  absl::MutexLock l(&mu_);
  return rejected_;
}

}  // namespace lockstep
