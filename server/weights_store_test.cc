#include "server/weights_store.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

// `n` floats of value job_id * 1000 + i, little-endian.
std::string Floats(uint64_t job_id, int64_t first, int64_t n) {
  std::string out(static_cast<size_t>(n) * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(job_id * 1000 + first + i);
    std::memcpy(&out[static_cast<size_t>(i) * 4], &f, 4);
  }
  return out;
}

v1::WeightsChunk Chunk(uint64_t job_id, int64_t offset, int64_t total, int64_t n,
                       const std::string& worker = "w-1") {
  v1::WeightsChunk c;
  c.set_job_id(job_id);
  c.set_worker_id(worker);
  c.set_offset(offset);
  c.set_total(total);
  c.set_data(Floats(job_id, offset, n));
  if (offset == 0) {
    c.add_block_names("w");
    c.add_block_shapes(total);
  }
  return c;
}

TEST(WeightsStoreTest, ChunksInOrderPublishTheWeights) {
  WeightsStore s(8);
  absl::StatusOr<std::vector<uint64_t>> r = s.AddChunk(Chunk(1, 0, 5, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->empty());
  EXPECT_FALSE(s.Has(1));
  EXPECT_EQ(s.uploads_in_progress(), 1u);
  r = s.AddChunk(Chunk(1, 2, 5, 3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<uint64_t>({1}));
  EXPECT_EQ(s.uploads_in_progress(), 0u);
  std::shared_ptr<const FinalWeights> w = s.Get(1);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->job_id, 1u);
  EXPECT_EQ(w->total, 5);
  EXPECT_EQ(w->data, Floats(1, 0, 5));
  EXPECT_EQ(w->block_names, std::vector<std::string>({"w"}));
  EXPECT_EQ(w->block_shapes, std::vector<int64_t>({5}));
}

TEST(WeightsStoreTest, BadChunksAreRefusedNamingTheField) {
  WeightsStore s(8);
  v1::WeightsChunk odd = Chunk(1, 0, 5, 1);
  odd.mutable_data()->push_back('x');
  EXPECT_EQ(s.AddChunk(odd).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.AddChunk(Chunk(1, 0, 0, 0)).status().message(),
            "total: expected >= 1 floats, got 0");
  EXPECT_EQ(s.AddChunk(Chunk(1, 3, 5, 1)).status().message(),
            "offset: expected 0 (the first chunk of an upload) for job 1, got 3");
  ASSERT_TRUE(s.AddChunk(Chunk(1, 0, 5, 2)).ok());
  EXPECT_EQ(s.AddChunk(Chunk(1, 3, 5, 1)).status().message(),
            "offset: expected 2 (chunks in order) for job 1, got 3");
  EXPECT_EQ(s.AddChunk(Chunk(1, 2, 6, 1)).status().message(),
            "total: expected 5 (as in the first chunk), got 6");
  // Still in progress after those; a chunk past the end drops it.
  EXPECT_EQ(s.uploads_in_progress(), 1u);
  EXPECT_EQ(s.AddChunk(Chunk(1, 2, 5, 4)).status().message(),
            "data: chunk at offset 2 with 4 floats runs past total 5");
  EXPECT_EQ(s.uploads_in_progress(), 0u);
  EXPECT_FALSE(s.Has(1));
}

TEST(WeightsStoreTest, OffsetZeroRestartsAndFinishDropsAnIncompleteUpload) {
  WeightsStore s(8);
  ASSERT_TRUE(s.AddChunk(Chunk(1, 0, 4, 3)).ok());
  ASSERT_TRUE(s.AddChunk(Chunk(1, 0, 4, 1)).ok());  // restart
  ASSERT_TRUE(s.AddChunk(Chunk(1, 1, 4, 3)).ok());
  ASSERT_NE(s.Get(1), nullptr);
  EXPECT_EQ(s.Get(1)->data, Floats(1, 0, 4));

  ASSERT_TRUE(s.AddChunk(Chunk(2, 0, 4, 1, "w-2")).ok());
  EXPECT_TRUE(s.FinishUpload("w-9", 2).ok());  // not that worker's upload
  absl::Status st = s.FinishUpload("w-2", 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "job 2: weights upload incomplete: received 1 of 4 floats");
  EXPECT_EQ(s.uploads_in_progress(), 0u);
  EXPECT_TRUE(s.FinishUpload("w-2", 2).ok());  // nothing left

  ASSERT_TRUE(s.AddChunk(Chunk(3, 0, 4, 1)).ok());
  s.AbortUpload(3);
  EXPECT_EQ(s.uploads_in_progress(), 0u);
}

TEST(WeightsStoreTest, KeepsMaxJobsAndEvictsTheOldestFirst) {
  WeightsStore s(2);
  EXPECT_EQ(*s.AddChunk(Chunk(1, 0, 1, 1)), std::vector<uint64_t>({1}));
  EXPECT_EQ(*s.AddChunk(Chunk(2, 0, 1, 1)), std::vector<uint64_t>({2}));
  std::shared_ptr<const FinalWeights> kept = s.Get(1);
  EXPECT_EQ(*s.AddChunk(Chunk(3, 0, 1, 1)), std::vector<uint64_t>({3, 1}));
  EXPECT_FALSE(s.Has(1));
  EXPECT_TRUE(s.Has(2));
  EXPECT_TRUE(s.Has(3));
  ASSERT_NE(kept, nullptr);  // a reader's copy outlives eviction
  EXPECT_EQ(kept->data, Floats(1, 0, 1));
  // Publishing again moves job 2 to the back: job 3 is the oldest now.
  EXPECT_EQ(*s.AddChunk(Chunk(2, 0, 1, 1)), std::vector<uint64_t>({2}));
  EXPECT_EQ(*s.AddChunk(Chunk(4, 0, 1, 1)), std::vector<uint64_t>({4, 3}));
  EXPECT_TRUE(s.Has(2));
  EXPECT_TRUE(s.Drop(2));
  EXPECT_FALSE(s.Drop(2));
  EXPECT_EQ(*s.AddChunk(Chunk(5, 0, 1, 1)), std::vector<uint64_t>({5}));
  EXPECT_TRUE(s.Has(4));

  WeightsStore none(0);
  EXPECT_EQ(*none.AddChunk(Chunk(1, 0, 1, 1)), std::vector<uint64_t>({1, 1}));
  EXPECT_FALSE(none.Has(1));
  EXPECT_EQ(WeightsStore(-3).max_jobs(), 0);
}

TEST(MakeWeightsChunkTest, SlicesAndCarriesBlocksOnTheFirstChunk) {
  FinalWeights w;
  w.job_id = 4;
  w.total = 5;
  w.data = Floats(4, 0, 5);
  w.block_names = {"a", "b"};
  w.block_shapes = {2, -1, 3};
  v1::WeightsChunk c = MakeWeightsChunk(w, 0, 2);
  EXPECT_EQ(c.job_id(), 4u);
  EXPECT_EQ(c.total(), 5);
  EXPECT_EQ(c.data(), Floats(4, 0, 2));
  EXPECT_EQ(c.block_names_size(), 2);
  EXPECT_EQ(c.block_shapes_size(), 3);
  c = MakeWeightsChunk(w, 4, 2);  // the last float only
  EXPECT_EQ(c.offset(), 4);
  EXPECT_EQ(c.data(), Floats(4, 4, 1));
  EXPECT_EQ(c.block_names_size(), 0);
}

}  // namespace
}  // namespace lockstep
