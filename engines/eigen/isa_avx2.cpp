// The kernels of isa_kernels.h built with -mavx2 -mfma (CMakeLists.txt); only
// called when the CPU has both (isa_generic.cpp checks at first use).
#define EIGEN_FAST_MATH 0
#define Eigen EigenAvx2
#define GEMM_SUFFIX avx2
#include "gemm_kernel.inc"
#include "panel_kernel.inc"
#include "rows_kernel.inc"
