#include "common/collective/transport.h"

#include "absl/strings/str_format.h"

namespace lockstep {

std::string KeyToString(const MessageKey& key) {
  return absl::StrFormat("{job=%d step=%d phase=%d chunk=%d}", key.job,
                         key.step, key.phase, key.chunk);
}

absl::Status CheckPeer(int rank, int world_size, int peer, const char* what) {
  if (peer < 0 || peer >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d: cannot %s peer %d: expected a peer in [0, %d)",
                        rank, what, peer, world_size));
  }
  if (peer == rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d: cannot %s peer %d: a rank never messages itself", rank, what,
        peer));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
