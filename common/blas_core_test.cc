#include "common/blas_core.h"

#include "common/blas.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

CpuVectors Avx512(bool bf16) {
  CpuVectors c;
  c.avx = c.avx2 = c.fma = true;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = c.avx512cd = true;
  c.avx512bf16 = bf16;
  return c;
}

CpuVectors Avx2() {
  CpuVectors c;
  c.avx = c.avx2 = c.fma = true;
  return c;
}

TEST(BlasCore, LevelsOfKnownCoresAndNoneForUnknownOnes) {
  EXPECT_EQ(CoreLevel("Prescott"), VectorLevel::kBaseline);
  EXPECT_EQ(CoreLevel("NEHALEM"), VectorLevel::kBaseline);
  EXPECT_EQ(CoreLevel("Sandybridge"), VectorLevel::kAvx);
  EXPECT_EQ(CoreLevel("Haswell"), VectorLevel::kAvx2);
  EXPECT_EQ(CoreLevel("Zen"), VectorLevel::kAvx2);
  EXPECT_EQ(CoreLevel("SkylakeX"), VectorLevel::kAvx512);
  EXPECT_EQ(CoreLevel("Cooperlake"), VectorLevel::kAvx512);
  EXPECT_EQ(CoreLevel("NeoverseN2"), std::nullopt);
  EXPECT_EQ(CoreLevel(""), std::nullopt);
}

TEST(BlasCore, CpuLevelNeedsEveryFeatureTheKernelsUse) {
  EXPECT_EQ(CpuLevel(Avx512(false)), VectorLevel::kAvx512);
  CpuVectors no_bw = Avx512(false);
  no_bw.avx512bw = false;  // Knights Landing: AVX-512F without BW
  EXPECT_EQ(CpuLevel(no_bw), VectorLevel::kAvx2);
  CpuVectors no_fma = Avx2();
  no_fma.fma = false;
  EXPECT_EQ(CpuLevel(no_fma), VectorLevel::kAvx);
  EXPECT_EQ(CpuLevel(CpuVectors{}), VectorLevel::kBaseline);
}

TEST(BlasCore, GenericKernelsOnAnAvx512CpuGetAdviceNamingTheFix) {
  // What this project's machines showed on 2026-12-02: Debian 12's OpenBLAS
  // 0.3.21 on Intel family 6 model 207 (AVX-512 with BF16).
  EXPECT_EQ(BlasCoreAdvice("Prescott", Avx512(true)),
            "OpenBLAS chose its Prescott kernels (SSE) on a CPU with AVX-512: restart with "
            "OPENBLAS_CORETYPE=Cooperlake for faster training (this OpenBLAS does not "
            "recognise the CPU model)");
  EXPECT_NE(BlasCoreAdvice("Haswell", Avx512(false)).find("OPENBLAS_CORETYPE=SkylakeX"),
            std::string::npos);
  EXPECT_NE(BlasCoreAdvice("Nehalem", Avx2()).find("OPENBLAS_CORETYPE=Haswell"),
            std::string::npos);
}

TEST(BlasCore, NoAdviceWhenTheKernelsFitOrTheCoreIsUnknown) {
  EXPECT_EQ(BlasCoreAdvice("SkylakeX", Avx512(false)), "");
  EXPECT_EQ(BlasCoreAdvice("Cooperlake", Avx512(true)), "");
  EXPECT_EQ(BlasCoreAdvice("Haswell", Avx2()), "");
  EXPECT_EQ(BlasCoreAdvice("Prescott", CpuVectors{}), "");
  EXPECT_EQ(BlasCoreAdvice("SomeFutureCore", Avx512(true)), "");
  // A wider core than the CPU (a forced OPENBLAS_CORETYPE) is not this
  // check's business: it would fail at the first kernel.
  EXPECT_EQ(BlasCoreAdvice("SkylakeX", Avx2()), "");
}

TEST(BlasCore, ThisProcessesCoreIsKnownOrAdviceIsEmpty) {
  // Whatever this machine is: the advice is empty or names a core whose
  // level is above the one in use.
  const std::string advice = BlasCoreAdvice(BlasCoreName(), ThisCpu());
  if (!advice.empty()) {
    EXPECT_LT(static_cast<int>(*CoreLevel(BlasCoreName())),
              static_cast<int>(CpuLevel(ThisCpu())));
  }
}

}  // namespace
}  // namespace lockstep
