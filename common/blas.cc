#include "common/blas.h"

#include <cblas.h>

#include <chrono>

namespace lockstep {
namespace {

thread_local BlasProfile* current_profile = nullptr;

// Times a BLAS call when a profile is installed on this thread.
class CallTimer {
 public:
  explicit CallTimer(bool is_gemm) : profile_(current_profile), is_gemm_(is_gemm) {
    if (profile_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~CallTimer() {
    if (profile_ == nullptr) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    profile_->calls++;
    profile_->seconds += s;
    if (is_gemm_) profile_->gemm_seconds += s;
  }

 private:
  BlasProfile* profile_;
  bool is_gemm_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  CallTimer t(/*is_gemm=*/true);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void Gemv(bool trans_a, int64_t m, int64_t n, float alpha, const float* a,
          int64_t lda, const float* x, float beta, float* y) {
  if (m == 0 || n == 0) {
    // y has length n (trans) or m; with an empty A it is just scaled.
    int64_t len = trans_a ? n : m;
    for (int64_t i = 0; i < len; ++i) y[i] = beta == 0.0f ? 0.0f : beta * y[i];
    return;
  }
  CallTimer t(/*is_gemm=*/false);
  cblas_sgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), alpha, a,
              static_cast<blasint>(lda), x, 1, beta, y, 1);
}

void Axpy(int64_t n, float alpha, const float* x, float* y) {
  if (n == 0) return;
  CallTimer t(/*is_gemm=*/false);
  cblas_saxpy(static_cast<blasint>(n), alpha, x, 1, y, 1);
}

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }
int BlasThreads() { return openblas_get_num_threads(); }
const char* BlasCoreName() { return openblas_get_corename(); }

ScopedBlasProfile::ScopedBlasProfile(BlasProfile* profile)
    : previous_(current_profile) {
  current_profile = profile;
}
ScopedBlasProfile::~ScopedBlasProfile() { current_profile = previous_; }

}  // namespace lockstep
