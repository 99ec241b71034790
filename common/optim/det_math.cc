#include "common/optim/det_math.h"

#include "absl/base/internal/raw_logging.h"

namespace lockstep {
namespace {

constexpr double kPi = 3.141592653589793238462643383279502884;

// Taylor series of cos(t) for |t| <= pi/4, summed in a fixed order. Truncation
// error of the 11-term series is < (pi/4)^22 / 22! ~ 5e-24.
double CosSeries(double t) {
  const double t2 = t * t;
  double term = 1.0;
  double sum = 1.0;
  for (int k = 1; k <= 10; ++k) {
    term = -term * t2 / static_cast<double>((2 * k - 1) * (2 * k));
    sum += term;
  }
  return sum;
}

// Taylor series of sin(t) for |t| <= pi/4.
double SinSeries(double t) {
  const double t2 = t * t;
  double term = t;
  double sum = t;
  for (int k = 1; k <= 10; ++k) {
    term = -term * t2 / static_cast<double>((2 * k) * (2 * k + 1));
    sum += term;
  }
  return sum;
}

}  // namespace

double IntPow(double base, int64_t exponent) {
  ABSL_RAW_CHECK(exponent >= 0, "IntPow: exponent must be >= 0");
  double result = 1.0;
  double b = base;
  uint64_t e = static_cast<uint64_t>(exponent);
  while (e != 0) {
    if (e & 1u) result *= b;
    e >>= 1;
    if (e != 0) b *= b;
  }
  return result;
}

double CosPi(double x) {
  // NaN-safe clamp: !(x > 0) is true for NaN.
  if (!(x > 0.0)) x = 0.0;
  if (x > 1.0) x = 1.0;
  // cos(pi x) = -cos(pi (1 - x)): reduce to [0, 1/2].
  double sign = 1.0;
  if (x > 0.5) {
    x = 1.0 - x;
    sign = -1.0;
  }
  // On (1/4, 1/2]: cos(pi x) = sin(pi (1/2 - x)) with argument in [0, pi/4).
  const double r = (x > 0.25) ? SinSeries(kPi * (0.5 - x)) : CosSeries(kPi * x);
  return sign * r;
}

}  // namespace lockstep
