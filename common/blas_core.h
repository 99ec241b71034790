// Whether OpenBLAS's kernel set fits the CPU it runs on.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: at load time it picks one
// kernel set ("core") by CPU model. A release older than the CPU falls back
// to its generic "Prescott" (SSE3) kernels: Debian 12's 0.3.21 does so on
// Intel family 6 model 207 (Xeon, AVX-512), where lockstep-train's MLP runs
// about 3x slower than with the AVX-512 kernels (README, "OpenBLAS kernel
// set"). The choice cannot change once the library is loaded; only the
// OPENBLAS_CORETYPE environment variable, set before the process starts,
// overrides it. So lockstep says what it found and what to set: the worker
// logs it at start, registers its core with the coordinator (`lockstep
// workers` shows it), and lockstep-train prints it.
//
// Pure functions over names and feature bits (no CPU access) but ThisCpu(),
// so every case is unit-tested. Thread-safe.
#ifndef LOCKSTEP_COMMON_BLAS_CORE_H_
#define LOCKSTEP_COMMON_BLAS_CORE_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {

// The widest vectors a kernel set (or a CPU) uses, in order.
enum class VectorLevel { kBaseline = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3 };

// The level of an OpenBLAS x86-64 core name ("Prescott", "Haswell",
// "SkylakeX", ...; case-insensitive). nullopt for a name this table does not
// know (a newer OpenBLAS's, another architecture's): no advice is given then.
std::optional<VectorLevel> CoreLevel(absl::string_view openblas_core);

struct CpuVectors {
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false,
       avx512cd = false;
  bool avx512bf16 = false;
};
// This CPU's features (cpuid, through the compiler's builtins).
CpuVectors ThisCpu();
// The widest level whose kernels this CPU can run: AVX-512 as OpenBLAS's
// SkylakeX kernels need it (F, BW, VL, DQ, CD), AVX2 with FMA, AVX.
VectorLevel CpuLevel(const CpuVectors& cpu);
// The OpenBLAS core to ask for at `level` ("SkylakeX", or "Cooperlake"
// when the CPU has AVX512-BF16; "Haswell"; "Sandybridge"; "" at baseline).
std::string BestCoreFor(VectorLevel level, const CpuVectors& cpu);

// "" when `core` is unknown or uses the widest vectors the CPU has; else one
// sentence naming the core, what the CPU has, and the variable to set, e.g.
// "OpenBLAS chose its Prescott kernels (SSE) on a CPU with AVX-512:
// restart with OPENBLAS_CORETYPE=SkylakeX for faster training (this
// OpenBLAS does not recognise the CPU model)".
std::string BlasCoreAdvice(absl::string_view core, const CpuVectors& cpu);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BLAS_CORE_H_
