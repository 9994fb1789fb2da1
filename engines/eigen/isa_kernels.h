// The hot loops compiled once per instruction set: isa_generic.cpp (baseline),
// isa_avx2.cpp (AVX2+FMA), isa_avx512.cpp (AVX-512), each from isa_kernels.inc.
// isa() picks one table at first use from the CPU and OPENREG_EIGEN_ISA.
//
// Only plain types here: the per-ISA files include nothing of the engine (an
// inline function compiled with -mavx512f could otherwise be the one the linker
// keeps for every caller). Single-threaded: callers split the work.
#pragma once

#include <cstdint>

namespace eigen_engine {

// Below these arguments Eigen's vectorised exp returns its clamp's result (2.9e-39
// in float, 5.6e-309 in double), not 0: exp(-inf) was 2.9e-39 (torch CPU: 0), and a
// softmax weight of a -inf score not 0. The kernels give 0 there (exactly what
// std::exp gives for -inf; at most 2.9e-39 (5.6e-309) away from it above).
constexpr float kExpClampF32 = -88.7228394f;
constexpr double kExpClampF64 = -709.0895657128241;

// The elementwise float32 functions of IsaKernels::unary_f32; the last two take
// parameters: leaky_relu its negative slope (p0), clamp its bounds (p0, p1; -inf
// and inf for a bound not given).
enum IsaUnary {
  ISA_EXP,
  ISA_TANH,
  ISA_SIGMOID,
  ISA_SILU,
  ISA_ERF,
  ISA_EXPM1,
  ISA_LOG1P,
  ISA_LOG,
  ISA_LOG2,
  ISA_SIN,
  ISA_COS,
  ISA_RSQRT,
  ISA_FLOOR,
  ISA_CEIL,
  ISA_ROUND,
  ISA_RECIPROCAL,
  ISA_LEAKY_RELU,
  ISA_CLAMP,
  ISA_SIGN
};
// The activation backwards of IsaKernels::activation_backward_f32.
enum IsaActBackward { ISA_GELU_ERF_BACKWARD, ISA_GELU_TANH_BACKWARD, ISA_SILU_BACKWARD };
// The binary float32 operations of IsaKernels::binary_f32.
enum IsaBinary { ISA_ADD, ISA_MUL, ISA_DIV, ISA_MAX, ISA_MIN };  // max/min: NaN propagated

struct IsaKernels {
  const char* name;  // "avx512", "avx2" or "generic"
  // C (col-major, ldc) = alpha * op(A) * op(B) + beta * C (see gemm() in eigen_engine.h).
  void (*gemm_f32)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
  void (*gemm_f64)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* A, int64_t lda,
                   const double* B, int64_t ldb, double beta, double* C, int64_t ldc);
  // Contiguous float32 rows of n elements, `rows` of them, one after the other.
  // softmax (or log_softmax) of each row.
  void (*softmax_f32)(const float* x, float* y, int64_t rows, int64_t n, bool log);
  // Their backward from the forward's output y: log: gx = g - exp(y) * sum(g),
  // else gx = y * (g - sum(g * y)). gx may be g or y (in place).
  void (*softmax_backward_f32)(const float* g, const float* y, float* gx, int64_t rows, int64_t n, bool log);
  // Sum of n floats: float lanes over blocks of 256, the block sums in double.
  double (*sum_f32)(const float* x, int64_t n);
  // Layer norm of each row (statistics in double); w and b may be null.
  void (*layer_norm_f32)(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t n, double eps);
  // The input gradient of layer norm for each row from the saved mean and
  // rstd (sums in double); w may be null.
  void (*layer_norm_backward_f32)(const float* g, const float* x, const float* w, const float* mean,
                                  const float* rstd, float* gi, int64_t rows, int64_t n);
  // gelu of n floats, exact (erf) or tanh-approximated.
  void (*gelu_f32)(const float* x, float* y, int64_t n, bool tanh_approx);
  // y = f(x) over n floats, f one of IsaUnary (the formulas of ops_elementwise.cpp).
  void (*unary_f32)(int kind, const float* x, float* y, int64_t n, float p0, float p1);
  // The largest (is_max) or smallest of n > 0 floats; NaN if one of them is NaN.
  float (*extremum_f32)(const float* x, int64_t n, bool is_max);
  // acc[i] = max(acc[i], x[i]) (or min) over n floats, NaN kept.
  void (*extremum_accumulate_f32)(float* acc, const float* x, int64_t n, bool is_max);
  // gx = g * f'(x) over n floats, f one of IsaActBackward (the formulas of ops_elementwise.cpp).
  void (*activation_backward_f32)(int kind, const float* g, const float* x, float* gx, int64_t n);
  // o = a + alpha * b, a * b, a / b, max or min over n floats; b null: the scalar bs instead.
  void (*binary_f32)(int kind, const float* a, const float* b, float bs, float alpha, float* o, int64_t n);
  // Convolution micro-kernel (panel_kernel.inc): C[M, panel_cols] = A[M, K] (row
  // stride lda) @ Bp[K, panel_cols], Bp packed panel_cols floats per k, C dense.
  int panel_cols;
  void (*panel_gemm_f32)(int64_t M, int64_t K, const float* A, int64_t lda, const float* Bp, float* C);
};

const IsaKernels& isa();

// One table per instruction set (the variants the CPU cannot run are never called).
const IsaKernels& isa_kernels_generic();
const IsaKernels& isa_kernels_avx2();
const IsaKernels& isa_kernels_avx512();

}  // namespace eigen_engine
