// GEMM core for the baseline instruction set (SSE2 on x86-64), and the runtime
// choice between the variants: AVX2+FMA or AVX-512 when the CPU has them, capped
// by OPENREG_EIGEN_ISA.
#define Eigen EigenGeneric
#define GEMM_SUFFIX generic
#include "gemm_kernel.inc"
#undef Eigen

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace eigen_engine {
void gemm_f32_avx2(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                   float*, int64_t);
void gemm_f64_avx2(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t,
                   double, double*, int64_t);
void gemm_f32_avx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                     float, float*, int64_t);
void gemm_f64_avx512(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t,
                     double, double*, int64_t);

namespace {
using F32 = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                     float, float*, int64_t);
using F64 = void (*)(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t,
                     double, double*, int64_t);
struct Choice {
  F32 f32;
  F64 f64;
  const char* isa;
};
// OPENREG_EIGEN_ISA caps the choice (as ONEDNN_MAX_CPU_ISA caps oneDNN's), so
// the AVX2 and baseline kernels can be tested on an AVX-512 machine: unset or
// "auto" takes the best the CPU runs; "avx512", "avx2", "generic" the best the
// CPU runs up to that level. Any other value is an error (init fails).
int isa_cap() {
  const char* v = std::getenv("OPENREG_EIGEN_ISA");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto" || s == "avx512") return 2;
  if (s == "avx2") return 1;
  if (s == "generic") return 0;
  throw std::runtime_error("OPENREG_EIGEN_ISA='" + s +
                           "' is not one of auto, avx512, avx2, generic (it caps the eigen engine's GEMM kernel)");
}
Choice choose() {
  const int cap = isa_cap();
#if defined(__x86_64__) && defined(OPENREG_EIGEN_MULTI_ISA)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (cap >= 2 && avx2 && __builtin_cpu_supports("avx512f")) return {gemm_f32_avx512, gemm_f64_avx512, "avx512"};
  if (cap >= 1 && avx2) return {gemm_f32_avx2, gemm_f64_avx2, "avx2"};
#endif
  (void)cap;
  return {gemm_f32_generic, gemm_f64_generic, "generic"};
}
const Choice& choice() {
  static const Choice c = choose();
  return c;
}
}  // namespace

void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  choice().f32(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  choice().f64(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
const char* gemm_isa() { return choice().isa; }
}  // namespace eigen_engine
