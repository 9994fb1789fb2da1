// GEMM core built with -mavx2 -mfma (CMakeLists.txt); only called when the CPU
// has both (gemm_generic.cpp checks at first use).
#define Eigen EigenAvx2
#define GEMM_SUFFIX avx2
#include "gemm_kernel.inc"
