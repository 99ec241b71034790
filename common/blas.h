// The one place that talks to OpenBLAS (cblas). Nothing else in lockstep
// includes cblas.h.
//
// All matrices are row-major float32. Functions are thin and allocation
// free; they are thread-compatible (OpenBLAS itself is thread-safe).
//
// Profiling: a ScopedBlasProfile installed on a thread makes every call on
// that thread add its wall time to the profile, so a benchmark can report
// the share of a training step spent inside BLAS. With no profile
// installed the overhead is one thread-local load per call.
#ifndef LOCKSTEP_COMMON_BLAS_H_
#define LOCKSTEP_COMMON_BLAS_H_

#include <cstdint>

namespace lockstep {

// C[m,n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
// A is [m,k] (or [k,m] if trans_a), B is [k,n] (or [n,k] if trans_b);
// leading dimensions are the row lengths of the stored matrices.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc);

// y[m or n] = alpha * op(A) * x + beta * y, A is [m,n] row-major.
void Gemv(bool trans_a, int64_t m, int64_t n, float alpha, const float* a,
          int64_t lda, const float* x, float beta, float* y);

// y += alpha * x
void Axpy(int64_t n, float alpha, const float* x, float* y);

// Sets OpenBLAS's thread count for this process (1 = single-threaded).
void SetBlasThreads(int threads);
int BlasThreads();
// The OpenBLAS core name in use, e.g. "Haswell".
const char* BlasCoreName();

struct BlasProfile {
  int64_t calls = 0;
  double seconds = 0;       // wall time inside all BLAS calls
  double gemm_seconds = 0;  // wall time inside Gemm only
};

// Installs `profile` for the current thread until destruction (nestable:
// restores the previous one). `profile` must outlive this object.
class ScopedBlasProfile {
 public:
  explicit ScopedBlasProfile(BlasProfile* profile);
  ~ScopedBlasProfile();
  ScopedBlasProfile(const ScopedBlasProfile&) = delete;
  ScopedBlasProfile& operator=(const ScopedBlasProfile&) = delete;

 private:
  BlasProfile* previous_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BLAS_H_
