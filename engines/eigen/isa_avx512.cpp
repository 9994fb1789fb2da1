// GEMM core built with -mavx512f (CMakeLists.txt); only called when the CPU has
// AVX-512F, AVX2 and FMA (gemm_generic.cpp checks at first use).
#define Eigen EigenAvx512
#define GEMM_SUFFIX avx512
#include "gemm_kernel.inc"
