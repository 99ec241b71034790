#include "common/blas.h"

#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Naive reference: C = op(A) op(B).
std::vector<float> NaiveGemm(bool ta, bool tb, int m, int n, int k,
                             const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(m * n, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p) {
        float av = ta ? a[p * m + i] : a[i * k + p];
        float bv = tb ? b[j * k + p] : b[p * n + j];
        s += av * bv;
      }
      c[i * n + j] = s;
    }
  return c;
}

TEST(BlasTest, GemmAllTransposesMatchNaive) {
  const int m = 3, n = 4, k = 5;
  std::vector<float> a(m * k), b(k * n);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7) - 3;  // small integers: exact
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5) - 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> c(m * n, 0.0f);
      Gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f,
           c.data(), n);
      EXPECT_EQ(c, NaiveGemm(ta, tb, m, n, k, a, b)) << "ta=" << ta << " tb=" << tb;
    }
}

TEST(BlasTest, GemmBetaAccumulates) {
  float a[2] = {1, 2}, b[2] = {3, 4}, c[1] = {10};
  Gemm(false, false, 1, 1, 2, 1.0f, a, 2, b, 1, 1.0f, c, 1);
  EXPECT_EQ(c[0], 10 + 3 + 8);
}

TEST(BlasTest, GemvAndAxpy) {
  float a[6] = {1, 2, 3, 4, 5, 6};  // [2,3]
  float x3[3] = {1, 1, 1}, y2[2] = {0, 0};
  Gemv(false, 2, 3, 1.0f, a, 3, x3, 0.0f, y2);
  EXPECT_EQ(y2[0], 6);
  EXPECT_EQ(y2[1], 15);
  float x2[2] = {1, 1}, y3[3] = {9, 9, 9};
  Gemv(true, 2, 3, 1.0f, a, 3, x2, 0.0f, y3);
  EXPECT_EQ(y3[0], 5);
  EXPECT_EQ(y3[2], 9);
  Axpy(3, 2.0f, x3, y3);
  EXPECT_EQ(y3[0], 7);
}

TEST(BlasTest, ProfileCountsCallsOnThisThreadOnly) {
  float a[1] = {2}, b[1] = {3}, c[1] = {0};
  BlasProfile p;
  {
    ScopedBlasProfile scope(&p);
    Gemm(false, false, 1, 1, 1, 1.0f, a, 1, b, 1, 0.0f, c, 1);
    Axpy(1, 1.0f, a, c);
  }
  Gemm(false, false, 1, 1, 1, 1.0f, a, 1, b, 1, 0.0f, c, 1);  // not profiled
  EXPECT_EQ(p.calls, 2);
  EXPECT_GE(p.seconds, p.gemm_seconds);
  EXPECT_GT(p.gemm_seconds, 0.0);
}

TEST(BlasTest, ThreadsCanBeSet) {
  SetBlasThreads(1);
  EXPECT_EQ(BlasThreads(), 1);
  EXPECT_NE(BlasCoreName(), nullptr);
}

}  // namespace
}  // namespace lockstep
