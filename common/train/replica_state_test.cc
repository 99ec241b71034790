#include "common/train/replica_state.h"

#include <string>

#include "common/train/state_board.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::unique_ptr<Replica> Make(const std::string& model, const std::string& optimizer,
                              float momentum, int64_t dim, int classes, uint64_t seed) {
  TrainSpec spec;
  spec.model = model;
  spec.seed = seed;
  spec.optimizer.kind = optimizer;
  spec.optimizer.momentum = momentum;
  spec.lr.base_lr = 0.1f;
  auto r = Replica::Create(spec, dim, classes);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

// Gives the optimizer state something to hold: a few updates with a fake
// gradient.
void Train(Replica* r, int steps) {
  for (int s = 0; s < steps; ++s) {
    auto g = r->grad();
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((i * 7 + s) % 13) - 0.06f;
    r->Apply(s, 3);
  }
}

TEST(ReplicaState, RoundTripAwkwardSizes) {
  struct Case {
    std::string model, optimizer;
    float momentum;
    int64_t dim;
    int classes;
  } cases[] = {{"linear", "sgd", 0, 1, -1},      // 2 parameters, no slots
               {"softmax", "sgd", 0.9f, 3, 7},   // odd sizes, N slots
               {"mlp:5", "adam", 0, 11, 3},      // 2N slots
               {"mlp:13,3", "adamw", 0, 2, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.optimizer);
    auto a = Make(c.model, c.optimizer, c.momentum, c.dim, c.classes, 1);
    auto b = Make(c.model, c.optimizer, c.momentum, c.dim, c.classes, 2);  // other init
    Train(a.get(), 3);
    ASSERT_NE(ReplicaIdentity(*a), ReplicaIdentity(*b));
    const std::string bytes = EncodeReplicaState(*a, 3);
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), ExpectedStateBytes(*b));
    EXPECT_EQ(static_cast<int64_t>(bytes.size()),
              56 + 4 * (a->num_params() + a->optimizer().num_slots()));
    auto next = RestoreReplicaState(bytes, b.get());
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, 3);
    EXPECT_EQ(ReplicaIdentity(*a), ReplicaIdentity(*b));
    EXPECT_EQ(a->Hash(), b->Hash());
    EXPECT_EQ(b->optimizer().steps(), 3);
    // Both continue identically.
    Train(a.get(), 2);
    Train(b.get(), 2);
    EXPECT_EQ(ReplicaIdentity(*a), ReplicaIdentity(*b));
  }
}

TEST(ReplicaState, SizesCheckedAgainstTheJob) {
  auto a = Make("mlp:5", "sgd", 0.9f, 4, 3, 1);
  auto wider = Make("mlp:6", "sgd", 0.9f, 4, 3, 1);
  auto no_momentum = Make("mlp:5", "sgd", 0, 4, 3, 1);
  const std::string bytes = EncodeReplicaState(*a, 9);
  const WeightHash before = ReplicaIdentity(*wider);
  auto s = RestoreReplicaState(bytes, wider.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.status().message(),
            "replica state has 43 parameters, this job's model has 51");
  EXPECT_EQ(ReplicaIdentity(*wider), before);
  s = RestoreReplicaState(bytes, no_momentum.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.status().message(),
            "replica state has 43 optimizer slots, this job's optimizer has 0");
}

TEST(ReplicaState, DamagedBytesAreRefusedAndLeaveTheReplica) {
  auto a = Make("softmax", "adam", 0, 5, 3, 1);
  auto b = Make("softmax", "adam", 0, 5, 3, 2);
  Train(a.get(), 2);
  const std::string bytes = EncodeReplicaState(*a, 2);
  const WeightHash before = ReplicaIdentity(*b);

  auto s = RestoreReplicaState(bytes.substr(0, 20), b.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "replica state: 20 bytes, shorter than its 56-byte header");

  s = RestoreReplicaState(bytes.substr(0, bytes.size() - 1), b.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);

  std::string flipped = bytes;
  flipped[60] ^= 0x01;  // one bit of the first parameter
  s = RestoreReplicaState(flipped, b.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("hash"), absl::string_view::npos);

  std::string magic = bytes;
  magic[0] = 'X';
  s = RestoreReplicaState(magic, b.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);

  std::string huge = bytes;
  huge[23] = 0x7f;  // num_params ~ 2^62+: refused before any allocation
  s = RestoreReplicaState(huge, b.get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_params"), absl::string_view::npos);

  EXPECT_EQ(ReplicaIdentity(*b), before);
}

TEST(StateBoard, BoundedReplaceAndRemove) {
  StateBoard board(2);
  board.Publish(7, 1, "a");
  board.Publish(7, 2, "b");
  board.Publish(7, 1, "a2");  // replaces, now the newest
  ASSERT_NE(board.Find(7, 1), nullptr);
  EXPECT_EQ(*board.Find(7, 1), "a2");
  board.Publish(8, 5, "c");  // evicts (7, 2), the oldest
  EXPECT_EQ(board.Find(7, 2), nullptr);
  EXPECT_EQ(board.Describe(7), "steps 1");
  auto held = board.Find(8, 5);
  board.Remove(8);
  EXPECT_EQ(board.Find(8, 5), nullptr);
  EXPECT_EQ(*held, "c");  // a reader's copy outlives the entry
  EXPECT_EQ(board.Describe(8), "no step");
}

}  // namespace
}  // namespace lockstep
