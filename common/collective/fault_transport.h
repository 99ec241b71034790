// Fault-injecting wrapper around any Transport, for tests: drops, delays,
// corrupts or fails chosen messages (the N-th one, or those matching a
// predicate) in either direction.
//
//   FaultTransport ft(inner, {FaultRule::Nth(FaultDirection::kSend, 3,
//                                             FaultAction::kFail)});
//   RingAllReduce(ft, ...);   // the 4th Send returns UnavailableError
//
// Actions, by direction:
//   kSend: kDrop     returns OK without sending (the message is lost);
//          kDelay    sleeps `delay` (via the injected sleeper), then sends;
//          kCorrupt  sends a copy with byte (corrupt_offset % size) XOR 0xFF
//                    (an empty message is sent unchanged);
//          kFail     returns UnavailableError naming the peer, sends nothing.
//   kRecv: kDrop     receives the expected message, discards it, then
//                    receives again for the caller (so the caller sees the
//                    following message: a key mismatch or a timeout);
//          kDelay    sleeps, then receives;
//          kCorrupt  receives, then flips byte (corrupt_offset % size);
//          kFail     returns UnavailableError naming the peer, receives
//                    nothing.
// For each call the first rule (in order) that matches and still has hits
// left fires; at most one rule fires per call. MessageInfo.index counts the
// calls in one direction made through this wrapper (0-based, all peers,
// whether or not a rule fired). On the receive side the key matched against
// is the one the caller expects.
//
// Ownership: `inner` is not owned and must outlive the wrapper.
// Thread-safety: as thread-safe as `inner`; rule bookkeeping is locked.
// Predicates are called under that lock and must not call the wrapper.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_FAULT_TRANSPORT_H_
#define LOCKSTEP_COMMON_COLLECTIVE_FAULT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/collective/transport.h"

namespace lockstep {

enum class FaultDirection { kSend, kRecv };
enum class FaultAction { kDrop, kDelay, kCorrupt, kFail };

// What a rule's predicate sees.
struct MessageInfo {
  FaultDirection direction = FaultDirection::kSend;
  int peer = 0;        // `to` for sends, `from` for receives
  MessageKey key;      // sent key / expected key
  size_t bytes = 0;    // size of the sent / expected message
  int64_t index = 0;   // 0-based call index in this direction
};

struct FaultRule {
  FaultDirection direction = FaultDirection::kSend;
  FaultAction action = FaultAction::kFail;
  // Must be set; decides whether the rule applies to a call.
  std::function<bool(const MessageInfo&)> match;
  // How many times the rule may fire; -1 = unlimited.
  int64_t max_hits = -1;
  // kDelay: how long to sleep.
  absl::Duration delay = absl::ZeroDuration();
  // kCorrupt: which byte (modulo the message size) to flip.
  size_t corrupt_offset = 0;

  // The call with index n in `direction` (fires at most once).
  static FaultRule Nth(FaultDirection direction, int64_t n, FaultAction action);
  // Every call in `direction` with index >= n: a peer that dies after n
  // messages.
  static FaultRule FromNth(FaultDirection direction, int64_t n,
                           FaultAction action);
  // Every call in `direction` for which `pred` is true.
  static FaultRule Matching(FaultDirection direction,
                            std::function<bool(const MessageInfo&)> pred,
                            FaultAction action);
};

class FaultTransport : public Transport {
 public:
  using Sleeper = std::function<void(absl::Duration)>;

  // `sleeper` implements kDelay (default: absl::SleepFor); tests may inject
  // one that records instead of sleeping.
  FaultTransport(Transport* inner, std::vector<FaultRule> rules,
                 Sleeper sleeper = nullptr);

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  absl::Status Send(int to, const MessageKey& key,
                    absl::Span<const uint8_t> data,
                    absl::Time deadline) override;
  // Same rules as Send; an unfaulted (or delayed) message is passed on as a
  // borrowed send, so the inner transport's zero-copy path runs under
  // faults too (a corrupted one is a copy, sent with Send).
  absl::Status SendBorrowed(int to, const MessageKey& key,
                            absl::Span<const uint8_t> data,
                            absl::Time deadline) override;
  absl::Status FlushSends(absl::Time deadline) override {
    return inner_->FlushSends(deadline);
  }
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override;

  // How many times rule i has fired.
  int64_t hits(int rule) const;

 private:
  // Returns the index of the rule that fires for `info` (and counts the hit),
  // or -1. Advances the per-direction call index.
  int Match(MessageInfo& info);
  absl::Status SendImpl(int to, const MessageKey& key,
                        absl::Span<const uint8_t> data, absl::Time deadline,
                        bool borrow);

  Transport* const inner_;
  const std::vector<FaultRule> rules_;
  const Sleeper sleeper_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> hits_ ABSL_GUARDED_BY(mu_);
  int64_t sends_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t recvs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_FAULT_TRANSPORT_H_
