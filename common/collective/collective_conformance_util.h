// Helpers shared by the conformance suite's files (collective_conformance.cc:
// the transport contract; collective_conformance_ring.cc: ring all-reduce
// and direct exchange; collective_conformance_ps.cc: the parameter-server
// round): deadlines, the closed-form contributions every case checks, and
// reference sums in the documented orders. Test-only; any thread.
#ifndef LOCKSTEP_COMMON_COLLECTIVE_COLLECTIVE_CONFORMANCE_UTIL_H_
#define LOCKSTEP_COMMON_COLLECTIVE_COLLECTIVE_CONFORMANCE_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/chunking.h"
#include "common/collective/ring_allreduce.h"

namespace lockstep::conformance {

// Healthy calls get a deadline no test run should ever hit (asan, 2 cores);
// calls that are expected to fail wait kShort; every call must return within
// its timeout plus kSlack.
inline constexpr absl::Duration kLong = absl::Seconds(120);
inline constexpr absl::Duration kShort = absl::Milliseconds(400);
inline constexpr absl::Duration kSlack = absl::Seconds(10);
inline constexpr int kMaxWorld = 8;
inline constexpr int64_t kBig = 1000003;

inline void RunRanks(int k, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(k);
  for (int r = 0; r < k; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

inline std::vector<uint8_t> Payload(int seed, size_t size) {
  std::vector<uint8_t> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i);
  return v;
}

// ---- Closed-form contributions ----
// Rank r contributes element i = r + (i % 7) with count r + 1, except that
// for K >= 2 the last rank has 0 examples (all-zero sum, count 0). All values
// are small integers, so every float sum is exact in any order.
inline int Contributors(int k) { return k == 1 ? 1 : k - 1; }

inline void FillRank(int k, int r, absl::Span<float> v, int64_t* count) {
  if (k > 1 && r == k - 1) {
    std::fill(v.begin(), v.end(), 0.0f);
    *count = 0;
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + i % 7);
  *count = r + 1;
}

inline float ExpectedSum(int k, int64_t i) {
  const int64_t m = Contributors(k);
  return static_cast<float>(m * (m - 1) / 2 + m * (i % 7));
}

inline int64_t ExpectedCount(int k) {
  const int64_t m = Contributors(k);
  return m * (m + 1) / 2;
}

// "" if v is the closed-form sum, else the first mismatch.
inline std::string CheckClosedForm(int k, absl::Span<const float> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = ExpectedSum(k, static_cast<int64_t>(i));
    if (v[i] != want) {
      return absl::StrFormat("element %d is %g, expected %g", i, v[i], want);
    }
  }
  return "";
}

// The largest buffer the direct algorithm takes in one message (2 MiB).
inline constexpr int64_t kDirectBig = kMaxSegmentBytes / 4 - 2;

inline std::vector<int64_t> Lengths(int k, int64_t big = kBig) {
  std::vector<int64_t> v = {0, 1, k - 1, k, k + 1, big};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

inline bool IsTransportFailure(absl::StatusCode c) {
  return c == absl::StatusCode::kDeadlineExceeded ||
         c == absl::StatusCode::kUnavailable ||
         c == absl::StatusCode::kInternal || c == absl::StatusCode::kDataLoss;
}

// k non-integer inputs of n floats (rank r scaled by r+1), so that sums
// depend on their order.
inline std::vector<std::vector<float>> RandomInputs(int k, int64_t n, int seed) {
  std::vector<std::vector<float>> in(k, std::vector<float>(n));
  for (int r = 0; r < k; ++r) {
    std::mt19937 gen(seed + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : in[r]) x = dist(gen) * (r + 1) * 1e3f;
  }
  return in;
}

// The ring's documented order: chunk c summed from rank c around the ring.
inline std::vector<float> RingOrderSum(const std::vector<std::vector<float>>& in) {
  const int k = static_cast<int>(in.size());
  const int64_t n = static_cast<int64_t>(in[0].size());
  std::vector<float> out(n);
  for (int c = 0; c < k; ++c) {
    const Range cb = ChunkBounds(n, k, c);
    for (int64_t i = cb.begin; i < cb.end; ++i) {
      float acc = in[c][i];
      for (int j = 1; j < k; ++j) acc = acc + in[(c + j) % k][i];
      out[i] = acc;
    }
  }
  return out;
}

}  // namespace lockstep::conformance

#endif  // LOCKSTEP_COMMON_COLLECTIVE_COLLECTIVE_CONFORMANCE_UTIL_H_
