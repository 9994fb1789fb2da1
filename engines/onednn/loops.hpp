// The engine's own elementwise loops: out[i] = f(a[i], ...) computed in the
// compute type of f. When every operand is contiguous with out's shape (the
// common case: Adam's per-parameter updates, small activations) a plain pointer
// loop, split over the host pool above the grain; otherwise the SDK's strided,
// broadcasting walk.
//
// The library is built for the baseline x86-64 ISA (SSE2), so a plain float32
// loop runs 4 lanes wide. The dense float32 loops are also compiled for AVX2 and
// AVX-512 and picked at run time from the ISA oneDNN reports (ONEDNN_MAX_CPU_ISA
// caps it, as it caps oneDNN's own kernels). mul_ 64x64 in place: 1.27 us
// baseline, 0.42 us AVX2.
//
// Multiplies and adds fused into FMAs: the AVX2 clone has no FMA, so a + k * b
// rounds as in the baseline loop (as ATen's per-element arithmetic does); GCC's
// AVX-512 target implies FMA, and that clone contracts. A function that is an
// approximation anyway (vmath.hpp's polynomials, the activations built on them)
// is passed as loops::contracting(f): its AVX2 clone is built with FMA too, which
// took a fifth to a quarter off tanh's time and gelu's tanh form's (262K floats,
// one AVX2 thread, in the engine: 202 -> 148-154 us and 291-296 -> 222-248; torch
// CPU 870-990 for either).
#pragma once

#include <algorithm>
#include <array>
#include <type_traits>

#include "common.hpp"
#include "isa.hpp"

namespace onednn_engine {

namespace loops {

// The widest dense float32 loop this CPU (as capped) runs.
enum class Width { Sse, Avx2, Avx512 };
inline Width width() {
  static const Width w = cpu_caps().avx512_core ? Width::Avx512 : cpu_caps().avx2 ? Width::Avx2 : Width::Sse;
  return w;
}

// The function is copied first: read through the reference, its captures (a
// scalar operand, a slope) might change with each store to o as far as GCC
// knows, and a select between them stayed a branch (leaky_relu's backward:
// 1.5 ms for 262K floats, a branch mispredicted on random signs).
#define OPENREG_ONEDNN_LOOP1(NAME, ATTR)                                   \
  template <class F>                                                       \
  ATTR void NAME(float* o, const float* x, int64_t n, const F& f_ref) {    \
    const F f = f_ref;                                                     \
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(f(x[i]));   \
  }
#define OPENREG_ONEDNN_LOOP2(NAME, ATTR)                                                  \
  template <class F>                                                                      \
  ATTR void NAME(float* o, const float* x, const float* y, int64_t n, const F& f_ref) {   \
    const F f = f_ref;                                                                    \
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(f(x[i], y[i]));            \
  }
#define OPENREG_ONEDNN_AVX2 __attribute__((target("avx2")))
#define OPENREG_ONEDNN_AVX2_FMA __attribute__((target("avx2,fma")))
#define OPENREG_ONEDNN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
OPENREG_ONEDNN_LOOP1(dense1_sse, )
OPENREG_ONEDNN_LOOP1(dense1_avx2, OPENREG_ONEDNN_AVX2)
OPENREG_ONEDNN_LOOP1(dense1_avx2_fma, OPENREG_ONEDNN_AVX2_FMA)
OPENREG_ONEDNN_LOOP1(dense1_avx512, OPENREG_ONEDNN_AVX512)
OPENREG_ONEDNN_LOOP2(dense2_sse, )
OPENREG_ONEDNN_LOOP2(dense2_avx2, OPENREG_ONEDNN_AVX2)
OPENREG_ONEDNN_LOOP2(dense2_avx2_fma, OPENREG_ONEDNN_AVX2_FMA)
OPENREG_ONEDNN_LOOP2(dense2_avx512, OPENREG_ONEDNN_AVX512)
#undef OPENREG_ONEDNN_LOOP1
#undef OPENREG_ONEDNN_LOOP2
#undef OPENREG_ONEDNN_AVX2
#undef OPENREG_ONEDNN_AVX2_FMA
#undef OPENREG_ONEDNN_AVX512

// f, marked as free to have its multiplies and adds fused (the header comment).
template <class F>
struct Contracting {
  F f;
  template <class... A>
  __attribute__((always_inline)) auto operator()(A... a) const {
    return f(a...);
  }
};
template <class F>
Contracting<F> contracting(F f) {
  return {f};
}
template <class F>
constexpr bool is_contracting = false;
template <class F>
constexpr bool is_contracting<Contracting<F>> = true;
// g, marked as f is (row2 binds a broadcast operand into a one-operand function).
template <class F, class G>
auto marked_as(const F&, G g) {
  if constexpr (is_contracting<F>) return contracting(g);
  else return g;
}

// o may alias x or y (in-place ops): the loops read element i before writing it.
template <class F>
void dense1(float* o, const float* x, int64_t n, const F& f) {
  switch (width()) {
    case Width::Avx512: return dense1_avx512(o, x, n, f);
    case Width::Avx2:
      if constexpr (is_contracting<F>) return dense1_avx2_fma(o, x, n, f);
      else return dense1_avx2(o, x, n, f);
    case Width::Sse: return dense1_sse(o, x, n, f);
  }
}
template <class F>
void dense2(float* o, const float* x, const float* y, int64_t n, const F& f) {
  switch (width()) {
    case Width::Avx512: return dense2_avx512(o, x, y, n, f);
    case Width::Avx2:
      if constexpr (is_contracting<F>) return dense2_avx2_fma(o, x, y, n, f);
      else return dense2_avx2(o, x, y, n, f);
    case Width::Sse: return dense2_sse(o, x, y, n, f);
  }
}

// One strided row of float32 (byte strides s, n elements): the dense loops
// when the row is contiguous in every operand (or a broadcast scalar in y),
// a fill where the inputs are broadcast along the row (the gradient of a sum
// or mean, expanded), the plain strided loop otherwise. A broadcast scalar's wrapper holds f by
// value, for the reason the dense loops copy it.
template <class F>
void row1(const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n, const F& f) {
  float* o = reinterpret_cast<float*>(p[0]);
  const float* x = reinterpret_cast<const float*>(p[1]);
  if (s[0] == 4 && s[1] == 4) return dense1(o, x, n, f);
  if (s[0] == 4 && s[1] == 0) return std::fill(o, o + n, static_cast<float>(f(*x)));  // an expanded input
  for (int64_t i = 0; i < n; ++i) o[i * (s[0] / 4)] = static_cast<float>(f(x[i * (s[1] / 4)]));
}
template <class F>
void row2(const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n, const F& f) {
  float* o = reinterpret_cast<float*>(p[0]);
  const float* x = reinterpret_cast<const float*>(p[1]);
  const float* y = reinterpret_cast<const float*>(p[2]);
  if (s[0] == 4 && s[1] == 4 && s[2] == 4) return dense2(o, x, y, n, f);
  if (s[0] == 4 && s[1] == 0 && s[2] == 0) return std::fill(o, o + n, static_cast<float>(f(*x, *y)));
  if (s[0] == 4 && s[1] == 4 && s[2] == 0) {
    const float yv = *y;
    return dense1(o, x, n, marked_as(f, [f, yv](float v) { return f(v, yv); }));
  }
  if (s[0] == 4 && s[1] == 0 && s[2] == 4) {
    const float xv = *x;
    return dense1(o, y, n, marked_as(f, [f, xv](float v) { return f(xv, v); }));
  }
  for (int64_t i = 0; i < n; ++i) o[i * (s[0] / 4)] = static_cast<float>(f(x[i * (s[1] / 4)], y[i * (s[2] / 4)]));
}

}  // namespace loops

// out = f(a) / f(a, b) with a and b broadcast to out's shape, any strides.
// Dense operands take one flat loop; otherwise float32 walks the strided rows
// with the dense loops on each row that is contiguous (a transposed or
// broadcast operand whose inner dimension is dense: bias adds, x.t() + y),
// as the SDK's walk compiles to a scalar loop.
template <class T, class F>
void map1(const sdk::Tensor& out, const sdk::Tensor& a, F f) {
  if (same_dense(out, a)) {
    T* o = reinterpret_cast<T*>(out.bytes());  // may alias a (in-place ops)
    const T* x = reinterpret_cast<const T*>(a.bytes());
    host().parallel_for(0, out.numel(), sdk::kParallelGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        loops::dense1(o + b, x + b, e - b, f);
      } else {
        for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(f(x[i]));
      }
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    sdk::Shape shape = sdk::shape_of(out);
    sdk::for_each_row(host(), shape, std::array<sdk::Operand, 2>{sdk::operand(out, shape), sdk::operand(a, shape)},
                      [&f](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                        loops::row1(p, s, n, f);
                      });
    return;
  }
  sdk::unary_map<T>(host(), out, a, f);
}

template <class T, class F>
void map2(const sdk::Tensor& out, const sdk::Tensor& a, const sdk::Tensor& b, F f) {
  if (same_dense(out, a) && same_dense(out, b)) {
    T* o = reinterpret_cast<T*>(out.bytes());  // may alias a (in-place ops)
    const T* x = reinterpret_cast<const T*>(a.bytes());
    const T* y = reinterpret_cast<const T*>(b.bytes());
    host().parallel_for(0, out.numel(), sdk::kParallelGrain, [&](int64_t lo, int64_t hi) {
      if constexpr (std::is_same_v<T, float>) {
        loops::dense2(o + lo, x + lo, y + lo, hi - lo, f);
      } else {
        for (int64_t i = lo; i < hi; ++i) o[i] = static_cast<T>(f(x[i], y[i]));
      }
    });
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    sdk::Shape shape = sdk::shape_of(out);
    sdk::for_each_row(host(), shape,
                      std::array<sdk::Operand, 3>{sdk::operand(out, shape), sdk::operand(a, shape),
                                                  sdk::operand(b, shape)},
                      [&f](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                        loops::row2(p, s, n, f);
                      });
    return;
  }
  sdk::binary_map<T>(host(), out, a, b, f);
}

}  // namespace onednn_engine
