#include "common/collective/transport.h"

#include "absl/strings/str_format.h"

namespace lockstep {

std::string KeyToString(const MessageKey& key) {
  return absl::StrFormat("{job=%d step=%d phase=%d chunk=%d}", key.job,
                         key.step, key.phase, key.chunk);
}

absl::Status MismatchError(int rank, int from, const MessageKey& got, int64_t got_len,
                           const MessageKey& want, int64_t want_len) {
  if (got != want) {
    return absl::InternalError(absl::StrFormat(
        "rank %d: message from peer %d has key %s (%d bytes) but key %s (%d bytes) was expected",
        rank, from, KeyToString(got), got_len, KeyToString(want), want_len));
  }
  if (got_len != want_len) {
    return absl::DataLossError(
        absl::StrFormat("rank %d: message %s from peer %d has %d bytes but %d were expected", rank,
                        KeyToString(want), from, got_len, want_len));
  }
  return absl::OkStatus();
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
