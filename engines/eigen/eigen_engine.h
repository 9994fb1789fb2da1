// The Eigen engine: shared declarations and the elementwise machinery every
// family uses. No torch header anywhere: only the openreg SDK and Eigen.
#pragma once

#define EIGEN_DONT_PARALLELIZE 1  // threading goes through the host's parallel_for only
// Exact vectorised sqrt (Eigen's fast-math float sqrt is an rsqrt estimate that
// loses 1-2 bits and mishandles +inf, -0 and denormals). tanh is vectorised by hand.
#define EIGEN_FAST_MATH 0

#include <openreg/sdk.hpp>

#include <Eigen/Core>

#include "isa_kernels.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

namespace eigen_engine {
namespace sdk = openreg::sdk;
using sdk::Call;
using sdk::Tensor;

// The type arithmetic happens in: float for bfloat16, else the type itself.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<sdk::bfloat16> { using type = float; };
template <> struct compute_type<sdk::float16> { using type = float; };
template <class T> using C_t = typename compute_type<T>::type;
template <class T> constexpr bool is_eigen_native = std::is_same_v<T, float> || std::is_same_v<T, double>;

inline bool same_dtype(const Tensor& a, const Tensor& b) { return sdk::same_dtype(a.dtype(), b.dtype()); }

// A Python number or 0-dim tensor used as a scalar operand, rounded to T first
// (as ATen casts wrapped numbers to the common dtype).
template <class T> C_t<T> scalar_as(double v) { return static_cast<C_t<T>>(static_cast<T>(v)); }

inline std::string_view str_arg(const Call& call, int i) {
  const openreg_value& v = call.arg(i);
  if (v.kind != OPENREG_VALUE_STRING) return {};
  return std::string_view(v.u.str.data, static_cast<size_t>(v.u.str.length));
}

inline std::vector<bool> bool_list(const Call& call, int i) {
  const openreg_value& v = call.arg(i);
  OPENREG_SDK_CHECK(v.kind == OPENREG_VALUE_BOOL_LIST || v.kind == OPENREG_VALUE_INT_LIST, call.op_name(),
                    ": argument ", i, " should be a bool list");
  std::vector<bool> out;
  for (int64_t k = 0; k < v.u.ints.count; ++k) out.push_back(v.u.ints.items[k] != 0);
  return out;
}

// Declines when any listed tensor's dtype differs from `ref`'s.
inline void require_dtype(const Call& call, const Tensor& ref, const Tensor& t, const char* what) {
  OPENREG_SDK_REQUIRE(same_dtype(ref, t), call.op_name(), ": ", what, " has dtype ", sdk::dtype_name(t.dtype()),
                      ", expected ", sdk::dtype_name(ref.dtype()), " (mixed dtypes are left to the next engine)");
}

// A tensor descriptor over engine memory (scratch), usable with the SDK helpers.
struct LocalTensor {
  int64_t sizes[8] = {0}, strides[8] = {0};
  openreg_tensor t{};
  LocalTensor(void* data, openreg_dtype dtype, std::initializer_list<int64_t> shape) {
    init(data, dtype, shape.begin(), static_cast<int64_t>(shape.size()));
  }
  LocalTensor(void* data, openreg_dtype dtype, sdk::Span<int64_t> shape) { init(data, dtype, shape.begin(), shape.size()); }
  LocalTensor(const LocalTensor&) = delete;
  void init(void* data, openreg_dtype dtype, const int64_t* shape, int64_t n) {
    OPENREG_SDK_REQUIRE(n <= 8, "more than 8 dimensions");
    int64_t st = 1;
    for (int64_t d = n - 1; d >= 0; --d) {
      sizes[d] = shape[d];
      strides[d] = st;
      st *= shape[d];
    }
    t.struct_size = sizeof(openreg_tensor);
    t.ndim = static_cast<int32_t>(n);
    t.data = data;
    t.byte_offset = 0;
    t.sizes = sizes;
    t.strides = strides;
    t.dtype = dtype;
    t.device_index = 0;
  }
  Tensor view() const { return Tensor(&t); }
};

// ------------------------------------------------------------------ emap
// out = f(in_0, ..., in_{N-1}) elementwise, inputs broadcast to out's shape.
// f takes and returns C_t<T>. v (optional, nullptr for none) is the same
// function on Eigen arrays, used on contiguous rows of float/double.
namespace detail {
template <class T, size_t N, class F, size_t... I>
inline void row_contig(F& f, T* o, const std::array<const T*, N>& x, int64_t n, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(static_cast<C_t<T>>(x[I][i])...));
}
template <class T, size_t N, class F, size_t... I>
inline void row_strided(F& f, char* o, int64_t so, const std::array<const char*, N>& x,
                        const std::array<int64_t, N>& sx, int64_t n, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<T*>(o + i * so) =
        static_cast<T>(f(static_cast<C_t<T>>(*reinterpret_cast<const T*>(x[I] + i * sx[I]))...));
}
template <class T>
using ArrMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using CArrMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T, size_t N, class V, size_t... I>
inline void row_vec(V& v, T* o, const std::array<const T*, N>& x, int64_t n, std::index_sequence<I...>) {
  ArrMap<T>(o, n) = v(CArrMap<T>(x[I], n)...);
}
// Two operands, one of them with stride 0 along the row (sx[k] == 0).
template <class T, class V>
inline void row_vec_bcast(V& v, T* o, const std::array<const char*, 2>& x, const std::array<int64_t, 2>& sx,
                          int64_t n) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  const T* x0 = reinterpret_cast<const T*>(x[0]);
  const T* x1 = reinterpret_cast<const T*>(x[1]);
  if (sx[1] == 0) ArrMap<T>(o, n) = v(CArrMap<T>(x0, n), A::Constant(n, *x1));
  else ArrMap<T>(o, n) = v(A::Constant(n, *x0), CArrMap<T>(x1, n));
}
}  // namespace detail

template <class T, size_t N, class F, class V = std::nullptr_t>
void emap(const sdk::Host& host, const Tensor& out, const std::array<Tensor, N>& in, F f, V v = nullptr) {
  sdk::Shape shape = sdk::shape_of(out);
  std::array<sdk::Operand, N + 1> ops;
  ops[0] = sdk::operand(out, shape);
  for (size_t i = 0; i < N; ++i) ops[i + 1] = sdk::operand(in[i], shape);
  constexpr int64_t es = sizeof(T);
  sdk::for_each_row(host, shape, ops,
                    [&](const std::array<char*, N + 1>& p, const std::array<int64_t, N + 1>& s, int64_t n) {
                      bool contig = s[0] == es;
                      std::array<const char*, N> xp;
                      std::array<int64_t, N> xs;
                      for (size_t k = 0; k < N; ++k) {
                        xp[k] = p[k + 1];
                        xs[k] = s[k + 1];
                        contig = contig && xs[k] == es;
                      }
                      if constexpr (N == 2 && !std::is_same_v<V, std::nullptr_t> && is_eigen_native<T>) {
                        // One operand broadcast along the row (x * rstd[row], x + bias): a
                        // constant array, so the row stays vectorised.
                        if (s[0] == es && ((xs[0] == es && xs[1] == 0) || (xs[0] == 0 && xs[1] == es))) {
                          detail::row_vec_bcast<T>(v, reinterpret_cast<T*>(p[0]), xp, xs, n);
                          return;
                        }
                      }
                      if (contig) {
                        std::array<const T*, N> xt;
                        for (size_t k = 0; k < N; ++k) xt[k] = reinterpret_cast<const T*>(xp[k]);
                        if constexpr (!std::is_same_v<V, std::nullptr_t> && is_eigen_native<T>) {
                          detail::row_vec<T, N>(v, reinterpret_cast<T*>(p[0]), xt, n, std::make_index_sequence<N>{});
                        } else {
                          detail::row_contig<T, N>(f, reinterpret_cast<T*>(p[0]), xt, n, std::make_index_sequence<N>{});
                        }
                      } else {
                        detail::row_strided<T, N>(f, p[0], s[0], xp, xs, n, std::make_index_sequence<N>{});
                      }
                    });
}

// ------------------------------------------------------------------ lines
// Calls fn(ptrs, strides, L) for every 1-d line of K same-shaped tensors along
// `dim`: ptrs[k] is the line's first element, strides[k] its element stride.
// Lines are spread over the host's threads when there is enough work.
template <class T, size_t K, class Fn>
void for_each_line(const sdk::Host& host, const std::array<Tensor, K>& ts, int64_t dim, Fn fn) {
  const Tensor& ref = ts[0];
  const int64_t nd = ref.dim();
  if (nd == 0) {
    std::array<T*, K> p;
    std::array<int64_t, K> s;
    for (size_t k = 0; k < K; ++k) {
      p[k] = reinterpret_cast<T*>(ts[k].bytes());
      s[k] = 1;
    }
    fn(p, s, int64_t(1));
    return;
  }
  if (dim < 0) dim += nd;
  const int64_t L = ref.size(dim);
  const int64_t total = ref.numel();
  if (total == 0) return;
  const int64_t nlines = total / L;
  // Other dims, innermost first, for index decomposition.
  std::vector<int64_t> osz;
  std::array<std::vector<int64_t>, K> ost;
  for (int64_t d = nd - 1; d >= 0; --d) {
    if (d == dim) continue;
    osz.push_back(ref.size(d));
    for (size_t k = 0; k < K; ++k) ost[k].push_back(ts[k].stride(d));
  }
  std::array<int64_t, K> ls;
  for (size_t k = 0; k < K; ++k) ls[k] = ts[k].stride(dim);
  const int64_t grain = std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(L, 1));
  host.parallel_for(0, nlines, grain, [&](int64_t b, int64_t e) {
    for (int64_t line = b; line < e; ++line) {
      std::array<T*, K> p;
      for (size_t k = 0; k < K; ++k) p[k] = reinterpret_cast<T*>(ts[k].bytes());
      int64_t r = line;
      for (size_t d = 0; d < osz.size(); ++d) {
        const int64_t i = r % osz[d];
        r /= osz[d];
        for (size_t k = 0; k < K; ++k) p[k] += i * ost[k][d];
      }
      fn(p, ls, L);
    }
  });
}

// A contiguous copy of `t` in `scratch` (allocated by the caller with
// contiguous_bytes(t)), or t's own memory when it is contiguous already.
inline uint64_t contiguous_bytes(const Tensor& t) {
  return t.is_contiguous() ? 0 : static_cast<uint64_t>(t.numel() * t.element_size());
}
template <class T>
const T* as_contiguous(const sdk::Host& host, const Tensor& t, const sdk::Host::Scratch& scratch) {
  if (t.is_contiguous()) return t.data<T>();
  LocalTensor dst(scratch.as<T>(), t.dtype(), t.sizes());
  emap<T, 1>(host, dst.view(), {t}, [](C_t<T> x) { return x; });
  return scratch.as<T>();
}
// Writes contiguous `src` (t's shape) into t, whatever t's strides.
template <class T>
void copy_back(const sdk::Host& host, const Tensor& t, const T* src) {
  if (t.is_contiguous() && t.data<T>() == src) return;
  LocalTensor s(const_cast<T*>(src), t.dtype(), t.sizes());
  emap<T, 1>(host, t, {s.view()}, [](C_t<T> x) { return x; });
}

// Dispatch over the elementwise dtypes.
template <class Fn>
void dispatch_ew(openreg_dtype d, const char* what, Fn&& fn) {
  sdk::dispatch<float, double, sdk::bfloat16>(d, what, std::forward<Fn>(fn));
}

// The ISA the SDK's loops (optimizer steps, bias-gradient sums) are built for:
// isa()'s, so OPENREG_EIGEN_ISA caps them too (ops_optim.cpp).
sdk::VectorIsa sdk_vector_isa();

// ------------------------------------------------------------------ GEMM
// C (col-major, ldc) = alpha * op(A) * op(B) + beta * C, A/B col-major with ld;
// ta/tb: use the transpose. Single-threaded; callers split the work.
// beta == 0 overwrites C (NaN in C ignored). The kernel of isa() (isa_kernels.h).
template <class T>
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* A, int64_t lda, const T* B,
                 int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) isa().gemm_f32(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else isa().gemm_f64(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ------------------------------------------------------------------ kernels
enum Binary { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN };
enum Unary {
  U_NEG, U_ABS, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_RELU, U_SIGMOID, U_TANH, U_GELU, U_SIN, U_COS, U_LOG2, U_LOG1P,
  U_EXPM1, U_ERF, U_RECIPROCAL, U_FLOOR, U_CEIL, U_ROUND, U_TRUNC, U_SILU, U_LEAKY_RELU, U_HARDTANH, U_CLAMP, U_POW
};
enum ActBackward { A_THRESHOLD, A_SIGMOID, A_TANH, A_GELU, A_SILU };
enum Ternary { T_ADDCMUL, T_ADDCDIV, T_LERP };
enum Compare { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE };
enum Reduce { R_SUM, R_MEAN, R_AMAX, R_AMIN, R_MAX_DIM, R_MIN_DIM, R_ARGMAX, R_ARGMIN, R_SUM_ALL };

// ops_elementwise.cpp
void binary(const Call&, Binary kind);
void unary(const Call&, Unary kind);
// out = f(a) for contiguous float32 operands of one size through isa().unary_f32
// (f one of IsaUnary, parameters p0, p1), split over the host's threads; false,
// writing nothing, when the operands are not such (the caller's loops then run).
bool isa_unary_f32(const Call& call, const Tensor& out, const Tensor& a, int isa_kind, float p0, float p1);
void activation_backward(const Call&, ActBackward kind);
void ternary(const Call&, Ternary kind);
void fill(const Call&);
void zero(const Call&);
void clone(const Call&);
void copy(const Call&);

// ops_compare.cpp
void compare(const Call&, Compare kind);
void sign(const Call&);

// ops_reduce.cpp
void reduce(const Call&, Reduce kind);

// ops_matmul.cpp (beta/alpha: addmm/baddbmm)
void matmul(const Call&, bool batched, bool add);

// ops_softmax.cpp
void softmax(const Call&, bool log);
void softmax_backward(const Call&, bool log);
void nll_loss_forward(const Call&);
void nll_loss_backward(const Call&);
void mse_loss(const Call&);
void mse_loss_backward(const Call&);

// ops_norm.cpp
void layer_norm(const Call&);
void layer_norm_backward(const Call&);
void batch_norm(const Call&);
void batch_norm_backward(const Call&);

// ops_index.cpp
void index_select(const Call&);
void cat(const Call&);
void where(const Call&);

// ops_conv.cpp
void convolution(const Call&);
void convolution_backward(const Call&);
void max_pool2d(const Call&);
void max_pool2d_backward(const Call&);
void avg_pool2d(const Call&);
void avg_pool2d_backward(const Call&);
}  // namespace eigen_engine
