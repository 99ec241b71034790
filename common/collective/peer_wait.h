// Which peer a rank's collective is waiting for, and since when: the
// worker's heartbeat reports it, so the coordinator can tell a job whose
// every rank waits for a peer it cannot reach (a link between two workers
// is down while both still reach the coordinator) within seconds instead
// of the combine timeout (server/coordinator.h "Stuck combines").
//
// PeerWaitTransport wraps the job's transport: each Recv publishes (peer,
// start time) in a PeerWait before it waits and clears it after. A Recv is
// at most one segment (2 MiB, ring_allreduce.h), so a Recv that has waited
// for seconds means nothing arrives from that peer, not a slow transfer.
//
// Threading: the job thread calls the transport; any thread may read
// PeerWait::Current(). PeerWait outlives the transports that publish to it.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_PEER_WAIT_H_
#define LOCKSTEP_COMMON_COLLECTIVE_PEER_WAIT_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/time/time.h"
#include "common/collective/transport.h"

namespace lockstep {

class PeerWait {
 public:
  // The peer a Recv waits for now and for how long; {-1, 0} when none.
  // (With a Recv ending and another starting meanwhile, the duration may
  // be the newer one's: never longer than the truth.)
  std::pair<int, absl::Duration> Current() const {
    const int peer = peer_.load(std::memory_order_acquire);
    if (peer < 0) return {-1, absl::ZeroDuration()};
    const int64_t since = since_ns_.load(std::memory_order_acquire);
    return {peer, std::max(absl::ZeroDuration(), absl::Nanoseconds(SteadyNanos() - since))};
  }
  void Begin(int peer) {
    since_ns_.store(SteadyNanos(), std::memory_order_release);
    peer_.store(peer, std::memory_order_release);
  }
  void End() { peer_.store(-1, std::memory_order_release); }

 private:
  // A monotonic clock: a wall-clock step must not make a wait look longer.
  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::atomic<int> peer_{-1};
  std::atomic<int64_t> since_ns_{0};
};

// Forwards everything to `inner`, publishing each Recv's wait in `wait`.
// Neither is owned; both outlive this.
class PeerWaitTransport final : public Transport {
 public:
  PeerWaitTransport(Transport* inner, PeerWait* wait) : inner_(inner), wait_(wait) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  absl::Status Send(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                    absl::Time deadline) override {
    return inner_->Send(to, key, data, deadline);
  }
  absl::Status SendBorrowed(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                            absl::Time deadline) override {
    return inner_->SendBorrowed(to, key, data, deadline);
  }
  absl::Status FlushSends(absl::Time deadline) override { return inner_->FlushSends(deadline); }
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    wait_->Begin(from);
    absl::Status s = inner_->Recv(from, key, out, deadline);
    wait_->End();
    return s;
  }

 private:
  Transport* const inner_;
  PeerWait* const wait_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_PEER_WAIT_H_
