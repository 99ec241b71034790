// Which peer a rank's collective is waiting for, and since when: the
// worker's heartbeat reports it, so the coordinator can tell a job whose
// every rank waits for a peer it cannot reach (a link between two workers
// is down while both still reach the coordinator) within seconds instead
// of the combine timeout (server/coordinator.h "Stuck combines").
//
// PeerWaitTransport wraps the job's transport: each Recv, Send and
// FlushSends publishes (peer, start time) in a PeerWait before it may block
// and clears it after. A Send blocks only on flow control or a first
// connection, i.e. on the peer it sends to; FlushSends names the peer of
// the latest borrowed send it waits for (the ring sends to one peer; the
// direct exchange's sends are to every peer and it names the last, which
// need not be the link a transport's flush is blocked on). A Recv is at
// most one segment (2 MiB, ring_allreduce.h), so one that has waited for
// seconds means nothing arrives from that peer, not a slow transfer; a
// Send held by flow control may wait for up to the transport's queue bound
// (64 MiB over tcp and shm) to drain, which a slow link takes seconds to
// do: the coordinator fails a job only when every rank waits, and a rank
// receiving from a slow but live link restarts its wait every segment.
//
// ShardWaitPsClient does the same for a ps job's shard clients: a push or
// pull that has waited for seconds with every rank waiting means the shard
// is out of reach (or stuck), not a slow peer (a dead worker stops its
// heartbeats and is handled as lost). A whole shard moves in one push or
// pull, which on a slow or shared link may take longer than lost_after
// (K workers pushing 100 MB each to one server on 1 Gbit/s: 6.4 s), so the
// raw-TCP ps clients and the raw-TCP ring transport Touch progress()
// whenever bytes move and a wait counts from the last byte: while any
// rank's bytes still flow, not every rank waits. The gRPC peer transport
// touches it per message read or written (a ring segment is at most 2 MiB)
// and the shared-memory transport per copy into or out of its rings. Over
// gRPC ps (unary Push and Pull of a whole shard) a wait still counts from
// the start of the call.
//
// Threading: one thread at a time runs the combine and calls the transport
// or the shard clients (the job thread, or the StepCombiner's thread with
// overlap, handed over under its mutex); any thread may read
// PeerWait::Current(). PeerWait outlives the transports that publish to it.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_PEER_WAIT_H_
#define LOCKSTEP_COMMON_COLLECTIVE_PEER_WAIT_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "common/collective/progress_mark.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/transport.h"

namespace lockstep {

class PeerWait {
 public:
  // What the job's combine waits for now: a peer rank (ring) or a
  // parameter-server shard (ps), and for how long; `peer` and `shard` are
  // -1 when it waits for neither (then `waited` is zero). (With a wait
  // ending and another starting meanwhile, the duration may be the newer
  // one's: never longer than the truth.)
  //
  // `waited` runs from the later of the wait's start and the last progress
  // on the job's data plane (progress(): bytes moved by a transport that
  // reports them: every ring transport and the raw-TCP ps clients), so a push or pull
  // whose bytes still flow, however slowly, is not a stuck one.
  struct Waiting {
    int peer = -1;
    int shard = -1;
    absl::Duration waited;
  };
  Waiting Current() const { return CurrentAt(ProgressMark::SteadyNanos()); }
  // As Current, at steady-clock time `now_ns` (tests).
  Waiting CurrentAt(int64_t now_ns) const {
    const int target = target_.load(std::memory_order_acquire);
    if (target == kNone) return {};
    const int64_t since =
        std::max(since_ns_.load(std::memory_order_acquire), progress_->last_ns());
    Waiting w;
    (target >= 0 ? w.peer : w.shard) = target >= 0 ? target : kShardBase - target;
    w.waited = std::max(absl::ZeroDuration(), absl::Nanoseconds(now_ns - since));
    return w;
  }
  void Begin(int peer) { BeginTarget(peer, ProgressMark::SteadyNanos()); }
  void BeginShard(int shard) { BeginTarget(kShardBase - shard, ProgressMark::SteadyNanos()); }
  // As Begin and BeginShard, at steady-clock time `now_ns` (tests).
  void BeginAt(int peer, int64_t now_ns) { BeginTarget(peer, now_ns); }
  void BeginShardAt(int shard, int64_t now_ns) { BeginTarget(kShardBase - shard, now_ns); }
  void End() { target_.store(kNone, std::memory_order_release); }
  // The job's data-plane progress, for the transports and ps clients to
  // Touch (not owned by them; lives as long as this).
  ProgressMark* progress() { return progress_.get(); }
  // The same mark, shared: for callbacks that may run after this is gone
  // (the gRPC transport's reactors finish on gRPC's threads after the
  // transport and the job have ended; a touch then changes nothing).
  std::shared_ptr<ProgressMark> shared_progress() const { return progress_; }

 private:
  // target_: a peer rank (>= 0), none (-1), or shard s as kShardBase - s.
  static constexpr int kNone = -1;
  static constexpr int kShardBase = -2;
  void BeginTarget(int target, int64_t now_ns) {
    since_ns_.store(now_ns, std::memory_order_release);
    target_.store(target, std::memory_order_release);
  }
  std::atomic<int> target_{kNone};
  std::atomic<int64_t> since_ns_{0};
  const std::shared_ptr<ProgressMark> progress_ = std::make_shared<ProgressMark>();
};

// Forwards everything to `inner`, publishing each Recv's wait in `wait`.
// Neither is owned; both outlive this.
class PeerWaitTransport final : public Transport {
 public:
  PeerWaitTransport(Transport *inner, PeerWait *wait) : inner_(inner), wait_(wait) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  absl::Status Send(int to, const MessageKey &key, absl::Span<const uint8_t> data,
                    absl::Time deadline) override {
    wait_->Begin(to);
    absl::Status s = inner_->Send(to, key, data, deadline);
    wait_->End();
    return s;
  }
  absl::Status SendBorrowed(int to, const MessageKey &key, absl::Span<const uint8_t> data,
                            absl::Time deadline) override {
    last_borrowed_to_ = to;
    wait_->Begin(to);
    absl::Status s = inner_->SendBorrowed(to, key, data, deadline);
    wait_->End();
    return s;
  }
  absl::Status FlushSends(absl::Time deadline) override {
    if (last_borrowed_to_ < 0) return inner_->FlushSends(deadline);
    wait_->Begin(last_borrowed_to_);
    absl::Status s = inner_->FlushSends(deadline);
    wait_->End();
    last_borrowed_to_ = -1;
    return s;
  }
  absl::Status Recv(int from, const MessageKey &key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    wait_->Begin(from);
    absl::Status s = inner_->Recv(from, key, out, deadline);
    wait_->End();
    return s;
  }

 private:
  Transport *const inner_;
  PeerWait *const wait_;
  int last_borrowed_to_ = -1;  // since the last FlushSends (the combine's thread)
};

// Forwards everything to `inner`, publishing each call's wait for shard
// `shard` in `wait` (a ps round's push and pull block on the shard's
// server, which waits for every worker's push). Neither is owned; both
// outlive this. Thread-safe as `inner`, but `wait` holds one wait: one
// combine at a time per PeerWait.
class ShardWaitPsClient final : public PsClient {
 public:
  ShardWaitPsClient(PsClient *inner, int shard, PeerWait *wait)
      : inner_(inner), shard_(shard), wait_(wait) {}
  absl::Status Push(uint64_t job, int64_t step, int worker, absl::Span<const float> grad,
                    int64_t count, absl::Time deadline) override {
    return Waited([&] { return inner_->Push(job, step, worker, grad, count, deadline); });
  }
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out, int64_t *count,
                    absl::Time deadline) override {
    return Waited([&] { return inner_->Pull(job, step, worker, out, count, deadline); });
  }
  absl::Status StartRound(uint64_t job, int64_t step, int worker, absl::Span<const float> grad,
                          int64_t count, absl::Time deadline, WireFormat wire) override {
    return Waited(
        [&] { return inner_->StartRound(job, step, worker, grad, count, deadline, wire); });
  }
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t *count, absl::Time deadline, WireFormat wire) override {
    return Waited(
        [&] { return inner_->FinishRound(job, step, worker, out, count, deadline, wire); });
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  template <typename F>
  absl::Status Waited(F call) {
    wait_->BeginShard(shard_);
    absl::Status s = call();
    wait_->End();
    return s;
  }
  PsClient *const inner_;
  const int shard_;
  PeerWait *const wait_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_PEER_WAIT_H_
