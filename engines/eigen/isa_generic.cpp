// The kernels of isa_kernels.h for the baseline instruction set (SSE2 on x86-64),
// and the runtime choice between the variants: AVX2+FMA or AVX-512 when the CPU
// has them, capped by OPENREG_EIGEN_ISA.
#define EIGEN_FAST_MATH 0
#define Eigen EigenGeneric
#define GEMM_SUFFIX generic
#include "gemm_kernel.inc"
#include "panel_kernel.inc"
#include "rows_kernel.inc"
#undef Eigen

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace eigen_engine {
namespace {
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
                           "' is not one of auto, avx512, avx2, generic (it caps the eigen engine's kernels)");
}
const IsaKernels& choose() {
  const int cap = isa_cap();
#if defined(__x86_64__) && defined(OPENREG_EIGEN_MULTI_ISA)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (cap >= 2 && avx2 && __builtin_cpu_supports("avx512f")) return isa_kernels_avx512();
  if (cap >= 1 && avx2) return isa_kernels_avx2();
#endif
  (void)cap;
  return isa_kernels_generic();
}
}  // namespace

const IsaKernels& isa() {
  static const IsaKernels& k = choose();
  return k;
}
}  // namespace eigen_engine
