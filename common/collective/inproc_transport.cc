#include "common/collective/inproc_transport.h"

#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"

namespace lockstep {

class InProcessGroup {
 public:
  explicit InProcessGroup(int world_size) {
    ABSL_RAW_CHECK(world_size >= 1, "InProcessHub: world_size must be >= 1");
    mailboxes_.reserve(world_size);
    for (int r = 0; r < world_size; ++r) {
      mailboxes_.push_back(std::make_unique<Mailbox>(r, world_size));
    }
  }
  int world_size() const { return static_cast<int>(mailboxes_.size()); }
  Mailbox& mailbox(int r) { return *mailboxes_[r]; }

 private:
  // Fixed after construction; each Mailbox is internally synchronised.
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
};

namespace {

class InProcessEndpoint : public Transport {
 public:
  InProcessEndpoint(std::shared_ptr<InProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }

  absl::Status Send(int to, const MessageKey& key,
                    absl::Span<const uint8_t> data,
                    absl::Time /*deadline: never blocks*/) override {
    absl::Status s = CheckPeer(rank_, world_size(), to, "send to");
    if (!s.ok()) return s;
    s = group_->mailbox(to).Deliver(rank_, key, data);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrFormat("rank %d: send %s to peer %d failed: %s",
                                    rank_, KeyToString(key), to, s.message()));
    }
    return s;
  }

  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    absl::Status s = CheckPeer(rank_, world_size(), from, "receive from");
    if (!s.ok()) return s;
    return group_->mailbox(rank_).Receive(from, key, out, deadline);
  }

 private:
  const std::shared_ptr<InProcessGroup> group_;
  const int rank_;
};

}  // namespace

InProcessHub::InProcessHub(int world_size)
    : group_(std::make_shared<InProcessGroup>(world_size)) {
  for (int r = 0; r < world_size; ++r) {
    endpoints_.push_back(std::make_unique<InProcessEndpoint>(group_, r));
  }
}

InProcessHub::~InProcessHub() = default;

int InProcessHub::world_size() const { return group_->world_size(); }

Transport* InProcessHub::endpoint(int r) {
  ABSL_RAW_CHECK(r >= 0 && r < world_size(), "InProcessHub: bad rank");
  return endpoints_[r].get();
}

void InProcessHub::BreakLink(int from, int to) {
  ABSL_RAW_CHECK(from >= 0 && from < world_size() && to >= 0 &&
                     to < world_size(),
                 "InProcessHub::BreakLink: bad rank");
  group_->mailbox(to).ClosePeer(
      from, absl::UnavailableError(absl::StrFormat(
                "in-process link from rank %d to rank %d broken", from, to)));
}

std::vector<std::unique_ptr<Transport>> MakeInProcessTransports(
    int world_size) {
  auto group = std::make_shared<InProcessGroup>(world_size);
  std::vector<std::unique_ptr<Transport>> out;
  out.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    out.push_back(std::make_unique<InProcessEndpoint>(group, r));
  }
  return out;
}

}  // namespace lockstep
