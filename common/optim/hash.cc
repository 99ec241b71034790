#include "common/optim/hash.h"

#include <xxhash.h>
// Debian's libxxhash also exports runtime-dispatched XXH3 (SSE2 / AVX2 /
// AVX-512, picked once by CPUID); this header maps XXH3_* to it. Same
// hashes bit for bit (the XXH3 spec), about 3.8x faster than the SSE2
// default on this host's AVX-512 CPU (814 KB: 111 -> 29 us): every step
// hashes the weights twice (XXH3-128, per-tensor XXH3-64) and the
// optimizer state once on the job thread (step_reporter.h). x86 only.
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <limits>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"

namespace lockstep {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "weight hashes are defined over little-endian float bytes");
static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "weight hashes require IEEE-754 binary32 floats");

namespace {

// XXH3 accepts (nullptr, 0), but avoid relying on that for empty spans.
const void* NonNullData(absl::Span<const float> values) {
  static constexpr float kEmpty = 0.0f;
  return values.empty() ? static_cast<const void*>(&kEmpty)
                        : static_cast<const void*>(values.data());
}

WeightHash FromXxh128(XXH128_hash_t h) { return WeightHash{h.high64, h.low64}; }

}  // namespace

std::string WeightHash::ToHex() const {
  return absl::StrFormat("%016x%016x", hi, lo);
}

void WeightHash::WriteHex(char* out) const {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(hi >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 0xf];
  }
}

struct WeightHasher::State {
  struct Deleter {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, Deleter> xxh;
};

WeightHasher::WeightHasher() : state_(new State) {
  state_->xxh.reset(XXH3_createState());
  ABSL_RAW_CHECK(state_->xxh != nullptr, "XXH3_createState failed");
  Reset();
}

WeightHasher::~WeightHasher() = default;
WeightHasher::WeightHasher(WeightHasher&&) noexcept = default;
WeightHasher& WeightHasher::operator=(WeightHasher&&) noexcept = default;

void WeightHasher::Reset() {
  ABSL_RAW_CHECK(state_ != nullptr, "WeightHasher used after move");
  ABSL_RAW_CHECK(XXH3_128bits_reset(state_->xxh.get()) == XXH_OK,
                 "XXH3_128bits_reset failed");
}

void WeightHasher::Update(absl::Span<const float> values) {
  ABSL_RAW_CHECK(state_ != nullptr, "WeightHasher used after move");
  if (values.empty()) return;
  ABSL_RAW_CHECK(XXH3_128bits_update(state_->xxh.get(), values.data(),
                                     values.size() * sizeof(float)) == XXH_OK,
                 "XXH3_128bits_update failed");
}

void WeightHasher::UpdateU64(uint64_t value) {
  ABSL_RAW_CHECK(state_ != nullptr, "WeightHasher used after move");
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  ABSL_RAW_CHECK(
      XXH3_128bits_update(state_->xxh.get(), bytes, sizeof(bytes)) == XXH_OK,
      "XXH3_128bits_update failed");
}

WeightHash WeightHasher::Finish() const {
  ABSL_RAW_CHECK(state_ != nullptr, "WeightHasher used after move");
  return FromXxh128(XXH3_128bits_digest(state_->xxh.get()));
}

WeightHash HashWeights(absl::Span<const float> params) {
  return FromXxh128(
      XXH3_128bits(NonNullData(params), params.size() * sizeof(float)));
}

std::vector<uint64_t> BlockHashes(absl::Span<const float> params,
                                  int64_t block_floats) {
  ABSL_RAW_CHECK(block_floats > 0, "BlockHashes: block_floats must be > 0");
  std::vector<uint64_t> hashes;
  const size_t block = static_cast<size_t>(block_floats);
  hashes.reserve((params.size() + block - 1) / block);
  for (size_t start = 0; start < params.size(); start += block) {
    const absl::Span<const float> part = params.subspan(start, block);
    hashes.push_back(XXH3_64bits(part.data(), part.size() * sizeof(float)));
  }
  return hashes;
}

struct FusedWeightHasher::States {
  XXH3_state_t* whole = nullptr;  // XXH3-128 of everything
  XXH3_state_t* block = nullptr;  // XXH3-64 of the current block
};

FusedWeightHasher::FusedWeightHasher() : states_(new States) {
  states_->whole = XXH3_createState();
  states_->block = XXH3_createState();
  ABSL_RAW_CHECK(states_->whole != nullptr && states_->block != nullptr,
                 "XXH3_createState failed");
}

FusedWeightHasher::~FusedWeightHasher() {
  XXH3_freeState(states_->whole);
  XXH3_freeState(states_->block);
}

WeightHash FusedWeightHasher::Hash(absl::Span<const float> params,
                                   absl::Span<const int64_t> starts,
                                   absl::Span<uint64_t> block_hashes) {
  const size_t n = params.size();
  Begin(n, starts, block_hashes);
  for (size_t c = 0; c < n; c += kChunkFloats) {
    Update(params.data(), c, std::min(n, c + kChunkFloats));
  }
  return Finish();
}

size_t FusedWeightHasher::Clamp(int64_t v) const {
  return v < 0 ? size_t{0} : std::min(static_cast<size_t>(v), n_);
}

size_t FusedWeightHasher::BlockEnd(size_t i) const {
  return i + 1 < starts_.size() ? std::max(Clamp(starts_[i]), Clamp(starts_[i + 1])) : n_;
}

void FusedWeightHasher::Begin(size_t n, absl::Span<const int64_t> starts,
                              absl::Span<uint64_t> block_hashes) {
  ABSL_RAW_CHECK(block_hashes.size() == starts.size(),
                 "FusedWeightHasher: one block hash per start");
  ABSL_RAW_CHECK(XXH3_128bits_reset(states_->whole) == XXH_OK, "XXH3_128bits_reset failed");
  n_ = n;
  pos_ = 0;
  starts_ = starts;
  blocks_ = block_hashes;
  cur_ = -1;
  // Floats before the first block go into the whole hash only.
  cur_end_ = starts.empty() ? n : Clamp(starts[0]);
  AdvanceBlocks();
}

void FusedWeightHasher::AdvanceBlocks() {
  // Blocks are consecutive: [starts[i], BlockEnd(i)). An empty block gets
  // XXH3_64bits of "" (as HashBlock of an empty span).
  while (pos_ == cur_end_ && cur_ + 1 < static_cast<int64_t>(starts_.size())) {
    if (cur_ >= 0) blocks_[static_cast<size_t>(cur_)] = XXH3_64bits_digest(states_->block);
    ++cur_;
    ABSL_RAW_CHECK(XXH3_64bits_reset(states_->block) == XXH_OK, "XXH3_64bits_reset failed");
    cur_end_ = BlockEnd(static_cast<size_t>(cur_));
  }
}

void FusedWeightHasher::Update(const float* params, size_t begin, size_t end) {
  ABSL_RAW_CHECK(begin == pos_ && begin <= end && end <= n_,
                 "FusedWeightHasher::Update: ranges must be consecutive and within n");
  while (pos_ < end) {
    const size_t stop = std::min(end, cur_end_);
    const size_t bytes = (stop - pos_) * sizeof(float);
    XXH3_128bits_update(states_->whole, params + pos_, bytes);
    if (cur_ >= 0) XXH3_64bits_update(states_->block, params + pos_, bytes);
    pos_ = stop;
    AdvanceBlocks();
  }
}

WeightHash FusedWeightHasher::Finish() {
  ABSL_RAW_CHECK(pos_ == n_, "FusedWeightHasher::Finish before every float was fed");
  AdvanceBlocks();
  if (cur_ >= 0) blocks_[static_cast<size_t>(cur_)] = XXH3_64bits_digest(states_->block);
  return FromXxh128(XXH3_128bits_digest(states_->whole));
}

uint64_t HashBlock(absl::Span<const float> block) {
  return XXH3_64bits(block.data(), block.size() * sizeof(float));
}

std::vector<int64_t> DifferingBlocks(const std::vector<uint64_t>& a,
                                     const std::vector<uint64_t>& b) {
  std::vector<int64_t> out;
  const size_t common = a.size() < b.size() ? a.size() : b.size();
  const size_t longest = a.size() < b.size() ? b.size() : a.size();
  for (size_t i = 0; i < common; ++i) {
    if (a[i] != b[i]) out.push_back(static_cast<int64_t>(i));
  }
  for (size_t i = common; i < longest; ++i) out.push_back(static_cast<int64_t>(i));
  return out;
}

WeightHash HashReplica(absl::Span<const float> params, int64_t optimizer_steps,
                       absl::Span<const float> optimizer_slots) {
  WeightHasher hasher;
  hasher.UpdateU64(params.size());
  hasher.Update(params);
  hasher.UpdateU64(static_cast<uint64_t>(optimizer_steps));
  hasher.UpdateU64(optimizer_slots.size());
  hasher.Update(optimizer_slots);
  return hasher.Finish();
}

}  // namespace lockstep
