#include "common/optim/det_math.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(IntPowTest, ExactForRepresentableResults) {
  EXPECT_EQ(IntPow(2.0, 0), 1.0);
  EXPECT_EQ(IntPow(0.0, 0), 1.0);
  EXPECT_EQ(IntPow(2.0, 10), 1024.0);
  EXPECT_EQ(IntPow(0.5, 3), 0.125);
  EXPECT_EQ(IntPow(-3.0, 3), -27.0);
  EXPECT_EQ(IntPow(0.0, 5), 0.0);
}

TEST(IntPowTest, CloseToStdPow) {
  for (int64_t e : {1, 2, 7, 100, 1000, 12345}) {
    for (double b : {0.9, 0.999, 0.1, 1.0001}) {
      const double want = std::pow(b, static_cast<double>(e));
      // Repeated squaring: relative error <= ~e * 2^-52.
      EXPECT_NEAR(IntPow(b, e), want, (e + 1) * 2.3e-16 * std::fabs(want))
          << b << "^" << e;
    }
  }
}

TEST(CosPiTest, ExactAtSpecialPoints) {
  EXPECT_EQ(CosPi(0.0), 1.0);
  EXPECT_EQ(CosPi(0.5), 0.0);
  EXPECT_EQ(CosPi(1.0), -1.0);
}

TEST(CosPiTest, MatchesStdCos) {
  const double pi = std::acos(-1.0);
  for (int i = 0; i <= 1000; ++i) {
    const double x = i / 1000.0;
    EXPECT_NEAR(CosPi(x), std::cos(pi * x), 1e-15) << "x=" << x;
  }
}

TEST(CosPiTest, ClampsOutOfRange) {
  EXPECT_EQ(CosPi(-0.25), 1.0);
  EXPECT_EQ(CosPi(3.0), -1.0);
  EXPECT_EQ(CosPi(std::nan("")), 1.0);
}

}  // namespace
}  // namespace lockstep
