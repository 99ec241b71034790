#include "common/collective/fault_transport.h"

#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"

namespace lockstep {

FaultRule FaultRule::Nth(FaultDirection direction, int64_t n,
                         FaultAction action) {
  FaultRule r;
  r.direction = direction;
  r.action = action;
  r.match = [n](const MessageInfo& m) { return m.index == n; };
  r.max_hits = 1;
  return r;
}

FaultRule FaultRule::FromNth(FaultDirection direction, int64_t n,
                             FaultAction action) {
  FaultRule r;
  r.direction = direction;
  r.action = action;
  r.match = [n](const MessageInfo& m) { return m.index >= n; };
  return r;
}

FaultRule FaultRule::Matching(FaultDirection direction,
                              std::function<bool(const MessageInfo&)> pred,
                              FaultAction action) {
  FaultRule r;
  r.direction = direction;
  r.action = action;
  r.match = std::move(pred);
  return r;
}

FaultTransport::FaultTransport(Transport* inner, std::vector<FaultRule> rules,
                               Sleeper sleeper)
    : inner_(inner),
      rules_(std::move(rules)),
      sleeper_(sleeper ? std::move(sleeper)
                       : Sleeper([](absl::Duration d) { absl::SleepFor(d); })) {
  ABSL_RAW_CHECK(inner_ != nullptr, "FaultTransport: inner is null");
  for (const FaultRule& r : rules_) {
    ABSL_RAW_CHECK(r.match != nullptr, "FaultTransport: rule without match");
  }
  absl::MutexLock l(&mu_);
  hits_.assign(rules_.size(), 0);
}

int FaultTransport::Match(MessageInfo& info) {
  absl::MutexLock l(&mu_);
  info.index =
      info.direction == FaultDirection::kSend ? sends_++ : recvs_++;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const FaultRule& r = rules_[i];
    if (r.direction != info.direction) continue;
    if (r.max_hits >= 0 && hits_[i] >= r.max_hits) continue;
    if (!r.match(info)) continue;
    ++hits_[i];
    return static_cast<int>(i);
  }
  return -1;
}

absl::Status FaultTransport::Send(int to, const MessageKey& key,
                                  absl::Span<const uint8_t> data,
                                  absl::Time deadline) {
  return SendImpl(to, key, data, deadline, /*borrow=*/false);
}

absl::Status FaultTransport::SendBorrowed(int to, const MessageKey& key,
                                          absl::Span<const uint8_t> data,
                                          absl::Time deadline) {
  return SendImpl(to, key, data, deadline, /*borrow=*/true);
}

absl::Status FaultTransport::SendImpl(int to, const MessageKey& key,
                                      absl::Span<const uint8_t> data,
                                      absl::Time deadline, bool borrow) {
  auto pass = [&] {
    return borrow ? inner_->SendBorrowed(to, key, data, deadline)
                  : inner_->Send(to, key, data, deadline);
  };
  MessageInfo info;
  info.direction = FaultDirection::kSend;
  info.peer = to;
  info.key = key;
  info.bytes = data.size();
  const int fired = Match(info);
  if (fired < 0) return pass();
  const FaultRule& r = rules_[fired];
  switch (r.action) {
    case FaultAction::kDrop:
      return absl::OkStatus();
    case FaultAction::kDelay:
      sleeper_(r.delay);
      return pass();
    case FaultAction::kCorrupt: {
      std::vector<uint8_t> copy(data.begin(), data.end());
      if (!copy.empty()) copy[r.corrupt_offset % copy.size()] ^= 0xFF;
      return inner_->Send(to, key, copy, deadline);
    }
    case FaultAction::kFail:
      break;
  }
  return absl::UnavailableError(absl::StrFormat(
      "rank %d: injected fault: send %s to peer %d failed", rank(),
      KeyToString(key), to));
}

absl::Status FaultTransport::Recv(int from, const MessageKey& key,
                                  absl::Span<uint8_t> out,
                                  absl::Time deadline) {
  MessageInfo info;
  info.direction = FaultDirection::kRecv;
  info.peer = from;
  info.key = key;
  info.bytes = out.size();
  const int fired = Match(info);
  if (fired < 0) return inner_->Recv(from, key, out, deadline);
  const FaultRule& r = rules_[fired];
  switch (r.action) {
    case FaultAction::kDrop: {
      std::vector<uint8_t> discard(out.size());
      absl::Status s = inner_->Recv(from, key, absl::MakeSpan(discard),
                                    deadline);
      if (!s.ok()) return s;
      return inner_->Recv(from, key, out, deadline);
    }
    case FaultAction::kDelay:
      sleeper_(r.delay);
      return inner_->Recv(from, key, out, deadline);
    case FaultAction::kCorrupt: {
      absl::Status s = inner_->Recv(from, key, out, deadline);
      if (s.ok() && !out.empty()) out[r.corrupt_offset % out.size()] ^= 0xFF;
      return s;
    }
    case FaultAction::kFail:
      break;
  }
  return absl::UnavailableError(absl::StrFormat(
      "rank %d: injected fault: receive %s from peer %d failed", rank(),
      KeyToString(key), from));
}

int64_t FaultTransport::hits(int rule) const {
  absl::MutexLock l(&mu_);
  ABSL_RAW_CHECK(rule >= 0 && rule < static_cast<int>(hits_.size()),
                 "FaultTransport::hits: bad rule index");
  return hits_[rule];
}

}  // namespace lockstep
