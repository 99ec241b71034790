#include "common/blas_core.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

const char* LevelName(VectorLevel level) {
  switch (level) {
    case VectorLevel::kAvx512:
      return "AVX-512";
    case VectorLevel::kAvx2:
      return "AVX2";
    case VectorLevel::kAvx:
      return "AVX";
    case VectorLevel::kBaseline:
      break;
  }
  return "SSE";
}

}  // namespace

std::optional<VectorLevel> CoreLevel(absl::string_view openblas_core) {
  // OpenBLAS 0.3.21's x86-64 DYNAMIC_ARCH cores (driver/others/dynamic.c,
  // corename[]), by the widest vectors their kernels use.
  static const std::pair<const char*, VectorLevel> kCores[] = {
      {"prescott", VectorLevel::kBaseline},   {"core2", VectorLevel::kBaseline},
      {"penryn", VectorLevel::kBaseline},     {"dunnington", VectorLevel::kBaseline},
      {"nehalem", VectorLevel::kBaseline},    {"atom", VectorLevel::kBaseline},
      {"nano", VectorLevel::kBaseline},       {"opteron", VectorLevel::kBaseline},
      {"opteron_sse3", VectorLevel::kBaseline}, {"barcelona", VectorLevel::kBaseline},
      {"bobcat", VectorLevel::kBaseline},     {"katmai", VectorLevel::kBaseline},
      {"coppermine", VectorLevel::kBaseline}, {"northwood", VectorLevel::kBaseline},
      {"banias", VectorLevel::kBaseline},     {"sandybridge", VectorLevel::kAvx},
      {"bulldozer", VectorLevel::kAvx},       {"piledriver", VectorLevel::kAvx},
      {"steamroller", VectorLevel::kAvx},     {"excavator", VectorLevel::kAvx2},
      {"haswell", VectorLevel::kAvx2},        {"zen", VectorLevel::kAvx2},
      {"skylakex", VectorLevel::kAvx512},     {"cooperlake", VectorLevel::kAvx512},
      {"sapphirerapids", VectorLevel::kAvx512},
  };
  const std::string name = absl::AsciiStrToLower(openblas_core);
  for (const auto& [core, level] : kCores) {
    if (name == core) return level;
  }
  return std::nullopt;
}

CpuVectors ThisCpu() {
  CpuVectors c;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  c.avx = __builtin_cpu_supports("avx");
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
  c.avx512dq = __builtin_cpu_supports("avx512dq");
  c.avx512cd = __builtin_cpu_supports("avx512cd");
  c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return c;
}

VectorLevel CpuLevel(const CpuVectors& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq && cpu.avx512cd) {
    return VectorLevel::kAvx512;
  }
  if (cpu.avx2 && cpu.fma) return VectorLevel::kAvx2;
  if (cpu.avx) return VectorLevel::kAvx;
  return VectorLevel::kBaseline;
}

std::string BestCoreFor(VectorLevel level, const CpuVectors& cpu) {
  switch (level) {
    case VectorLevel::kAvx512:
      return cpu.avx512bf16 ? "Cooperlake" : "SkylakeX";
    case VectorLevel::kAvx2:
      return "Haswell";
    case VectorLevel::kAvx:
      return "Sandybridge";
    case VectorLevel::kBaseline:
      break;
  }
  return "";
}

std::string BlasCoreAdvice(absl::string_view core, const CpuVectors& cpu) {
  const std::optional<VectorLevel> have = CoreLevel(core);
  const VectorLevel can = CpuLevel(cpu);
  if (!have.has_value() || static_cast<int>(*have) >= static_cast<int>(can)) return "";
  return absl::StrCat("OpenBLAS chose its ", core, " kernels (", LevelName(*have),
                      ") on a CPU with ", LevelName(can),
                      ": restart with OPENBLAS_CORETYPE=", BestCoreFor(can, cpu),
                      " for faster training (this OpenBLAS does not recognise the CPU model)");
}

}  // namespace lockstep
