// The kernels of isa_kernels.h built with -mavx512f (CMakeLists.txt); only called
// when the CPU has AVX-512F, AVX2 and FMA (isa_generic.cpp checks at first use).
#define EIGEN_FAST_MATH 0
#define Eigen EigenAvx512
#define GEMM_SUFFIX avx512
#include "gemm_kernel.inc"
#include "panel_kernel.inc"
#include "rows_kernel.inc"
