// In-process transport: K endpoints linked in memory, for tests and for
// running several ranks inside one process.
//
//   InProcessHub hub(4);
//   Transport* t = hub.endpoint(2);      // owned by the hub
// or
//   std::vector<std::unique_ptr<Transport>> ts = MakeInProcessTransports(4);
//   // each endpoint keeps the shared hub state alive; no separate owner.
//
// Send copies the bytes into the receiver's Mailbox (mailbox.h) and returns
// at once (unbounded buffering, never blocks, so the Send deadline is never
// hit); Recv follows the matching semantics of transport.h exactly.
//
// Thread-safety: every endpoint method is thread-safe (any number of sender
// and receiver threads). The hub and endpoints must outlive all calls on them.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_INPROC_TRANSPORT_H_
#define LOCKSTEP_COMMON_COLLECTIVE_INPROC_TRANSPORT_H_

#include <memory>
#include <vector>

#include "common/collective/mailbox.h"
#include "common/collective/transport.h"

namespace lockstep {

// Shared state of one group: one Mailbox per rank.
class InProcessGroup;

class InProcessHub {
 public:
  // world_size >= 1 (aborts otherwise: programming error).
  explicit InProcessHub(int world_size);
  ~InProcessHub();
  InProcessHub(const InProcessHub&) = delete;
  InProcessHub& operator=(const InProcessHub&) = delete;

  int world_size() const;
  // Endpoint of rank r in [0, world_size()); owned by the hub.
  Transport* endpoint(int r);

  // Simulates the loss of the link from `from` to `to`: `to`'s pending and
  // future Recv calls for `from` return UnavailableError naming `from` once
  // the already-delivered messages are consumed; further Sends on that link
  // fail with UnavailableError.
  void BreakLink(int from, int to);

 private:
  std::shared_ptr<InProcessGroup> group_;
  std::vector<std::unique_ptr<Transport>> endpoints_;
};

// world_size endpoints of a fresh group; each keeps the group alive.
std::vector<std::unique_ptr<Transport>> MakeInProcessTransports(int world_size);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_INPROC_TRANSPORT_H_
