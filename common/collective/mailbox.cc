#include "common/collective/mailbox.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"

namespace lockstep {

Mailbox::Mailbox(int owner_rank, int world_size)
    : rank_(owner_rank), world_size_(world_size) {
  ABSL_RAW_CHECK(world_size >= 1 && owner_rank >= 0 && owner_rank < world_size,
                 "Mailbox: owner_rank must be in [0, world_size)");
  absl::MutexLock l(&mu_);
  peers_.resize(world_size);
  pool_.reserve(kMaxPooledBuffers);  // recycling never grows it
}

absl::Status Mailbox::CheckOpenLocked(int from, const MessageKey& key) const {
  const absl::Status& closed = peers_[from].closed;
  if (closed.ok()) return absl::OkStatus();
  return absl::Status(
      closed.code(),
      absl::StrFormat("rank %d: stream from peer %d is closed (%s); "
                      "rejected message %s",
                      rank_, from, closed.message(), KeyToString(key)));
}

absl::Status Mailbox::Deliver(int from, const MessageKey& key,
                              absl::Span<const uint8_t> data) {
  if (from < 0 || from >= world_size_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d: message %s from unknown peer %d: expected a peer in [0, %d)",
        rank_, KeyToString(key), from, world_size_));
  }
  std::vector<uint8_t> buf;
  size_t buffer_bytes = 0;
  {
    absl::MutexLock l(&mu_);
    absl::Status s = CheckOpenLocked(from, key);
    if (!s.ok()) return s;
    if (!pool_.empty()) {
      buf = std::move(pool_.back());
      pool_.pop_back();
    }
    largest_message_ = std::max(largest_message_, data.size());
    buffer_bytes = largest_message_;
  }
  // Every buffer is made (or grown to) the largest message size seen so
  // far, with its pages touched (resize zero-fills), so messages of mixed
  // sizes (counts, segments, buckets) never reallocate or fault in fresh
  // pages after warm-up: a new buffer is needed only when more messages
  // than ever before are queued at once. Copy outside the lock.
  if (buf.size() < buffer_bytes) buf.resize(buffer_bytes);
  if (!data.empty()) std::memcpy(buf.data(), data.data(), data.size());
  Message m;
  m.key = key;
  m.size = data.size();
  m.bytes = std::move(buf);
  absl::MutexLock l(&mu_);
  peers_[from].queue.push_back(std::move(m));
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status Mailbox::DeliverFragments(
    int from, const MessageKey& key,
    std::vector<absl::Span<const uint8_t>> frags,
    std::shared_ptr<const void> keep) {
  if (from < 0 || from >= world_size_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d: message %s from unknown peer %d: expected a peer in [0, %d)",
        rank_, KeyToString(key), from, world_size_));
  }
  Message m;
  m.key = key;
  for (const auto& f : frags) m.size += f.size();
  m.frags = std::move(frags);
  m.keep = std::move(keep);
  absl::MutexLock l(&mu_);
  absl::Status s = CheckOpenLocked(from, key);
  if (!s.ok()) return s;  // m (and keep) released after the lock
  peers_[from].queue.push_back(std::move(m));
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status Mailbox::Receive(int from, const MessageKey& key,
                              absl::Span<uint8_t> out, absl::Time deadline) {
  if (from < 0 || from >= world_size_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d: cannot receive from peer %d: expected a peer in [0, %d)",
        rank_, from, world_size_));
  }
  Message got;
  mu_.Lock();
  PeerStream& ps = peers_[from];
  bool timed_out = false;
  for (;;) {
    while (!ps.queue.empty() && IsStale(ps.queue.front().key, key)) {
      ps.last_stale = ps.queue.front().key;
      ++ps.stale;
      ++stale_total_;
      RecycleLocked(std::move(ps.queue.front().bytes));
      ps.queue.pop_front();  // drops a fragment message's keep
    }
    if (!ps.queue.empty()) break;
    if (!ps.closed.ok()) {
      absl::Status s(ps.closed.code(),
                     absl::StrFormat("rank %d: stream from peer %d is closed "
                                     "(%s) while waiting for message %s",
                                     rank_, from, ps.closed.message(),
                                     KeyToString(key)));
      mu_.Unlock();
      return s;
    }
    if (timed_out) {
      std::string stale;
      if (ps.stale > 0) {
        stale = absl::StrFormat(
            "; %d stale message(s) from peer %d discarded so far, the last %s",
            ps.stale, from, KeyToString(ps.last_stale));
      }
      absl::Status s = absl::DeadlineExceededError(absl::StrFormat(
          "rank %d: timed out waiting for message %s (%d bytes) from peer "
          "%d%s",
          rank_, KeyToString(key), out.size(), from, stale));
      mu_.Unlock();
      return s;
    }
    timed_out = cv_.WaitWithDeadline(&mu_, deadline);
  }
  const Message& front = ps.queue.front();
  if (absl::Status s = MismatchError(rank_, from, front.key, static_cast<int64_t>(front.size),
                                     key, static_cast<int64_t>(out.size()));
      !s.ok()) {
    mu_.Unlock();
    return s;
  }
  got = std::move(ps.queue.front());
  ps.queue.pop_front();
  mu_.Unlock();

  // The one copy on the receive path: into the caller's buffer.
  if (got.frags.empty()) {
    if (got.size > 0) std::memcpy(out.data(), got.bytes.data(), got.size);
  } else {
    size_t at = 0;
    for (const auto& f : got.frags) {
      if (!f.empty()) std::memcpy(out.data() + at, f.data(), f.size());
      at += f.size();
    }
  }
  got.keep.reset();
  if (got.bytes.capacity() > 0) {
    absl::MutexLock l(&mu_);
    RecycleLocked(std::move(got.bytes));
  }
  return absl::OkStatus();
}

void Mailbox::ClosePeer(int from, absl::Status reason) {
  ABSL_RAW_CHECK(from >= 0 && from < world_size_, "ClosePeer: bad peer");
  ABSL_RAW_CHECK(!reason.ok(), "ClosePeer: reason must be an error");
  absl::MutexLock l(&mu_);
  peers_[from].closed = std::move(reason);
  cv_.SignalAll();
}

int64_t Mailbox::stale_discarded() const {
  absl::MutexLock l(&mu_);
  return stale_total_;
}

void Mailbox::RecycleLocked(std::vector<uint8_t> buf) {
  if (buf.capacity() == 0 || pool_.size() >= kMaxPooledBuffers) return;
  // Keeps its size (and touched pages): Deliver grows it only when a larger
  // message has been seen.
  pool_.push_back(std::move(buf));
}

}  // namespace lockstep
