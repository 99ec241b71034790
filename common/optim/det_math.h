// Deterministic scalar math helpers for lockstep's update and schedule code.
//
// Every replica must compute bit-identical learning rates and optimizer
// coefficients. libm's pow/cos may dispatch to CPU-specific variants (glibc
// selects FMA implementations of sin/cos/exp/pow at run time), so two machines
// running the same binary could disagree in the last bit. The helpers here use
// only IEEE-754 double +, -, *, / in a fixed order (compiled with
// -ffp-contract=off, no -ffast-math), which is reproducible on every IEEE
// machine that runs the binary.
//
// Thread-safety: pure functions, safe to call concurrently.
#ifndef LOCKSTEP_COMMON_OPTIM_DET_MATH_H_
#define LOCKSTEP_COMMON_OPTIM_DET_MATH_H_

#include <cstdint>

namespace lockstep {

// base^exponent for exponent >= 0 by exponentiation by squaring (IntPow(x, 0)
// is 1.0). Deterministic. Relative error grows with the exponent (about
// exponent * 2^-52 at worst, e.g. ~1e-12 at 10^4): far below float resolution
// for Adam bias corrections and step-decay factors. Aborts if exponent < 0
// (programming error).
double IntPow(double base, int64_t exponent);

// cos(pi * x) for x in [0, 1], accurate to ~1e-16 absolute. Exact at x = 0
// (1.0), x = 0.5 (0.0) and x = 1 (-1.0). Arguments outside [0, 1] are clamped
// into it (callers pass a progress fraction).
double CosPi(double x);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPTIM_DET_MATH_H_
