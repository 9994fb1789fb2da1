// openreg engine SDK: max_pool2d's commonest windows, 2x2 with stride 2 (no padding,
// no dilation: nn.MaxPool2d(2) of CNNs), of contiguous float32 tensors, in float
// vectors built for the CPU (vector_isa.hpp), the same code in every engine.
//
// ATen's rule, per window: the elements are visited row by row, a greater value or
// a NaN takes over (so the first maximum wins a tie and the last NaN wins), and the
// index is the winner's flat h * W + w in its input plane. window_max() is that rule
// for one window, scalar; max_pool2x2_f32() runs it N windows at a time.
//
// The walk goes over every output row of every plane, half a vector (N/2 windows of
// one output row) at a time; two consecutive halves fill a vector even across a row's
// or a plane's end, so planes too narrow for a vector per row (the digits CNN's 8x8
// and 4x4) still run N windows at a time: the 2N input floats of each of the two
// input rows split into the windows' even and odd columns by two shuffles. Indices are
// built per half: int32 codes (0, 1, W, W + 1) widened to int64.
//
// max_pool_planes_f32() serves every other window (any size, stride, padding and
// dilation) of float32 planes whose rows are contiguous: per output row, the maxima and
// their indices build up in two row buffers, the input visited window row by window
// column (ATen's order per output) over all output columns at once, N columns a vector
// for column strides 1 and 2 (ResNet's 3x3 stride 2 stem), the other strides a column at
// a time. Indices in int32 lanes (a plane of at most 2^31 elements), widened as stored.
//
// Include it in the one file of the engine that compiles its pooling: its vector
// types are wider than the baseline ABI's and never cross a call (references only).
#pragma once

#include <openreg/sdk/vector_isa.hpp>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace openreg {
namespace sdk {
namespace max_pool {

// The type a window's values are compared in: double for double, else float
// (bfloat16 and float16 widen exactly).
template <class T>
using WindowValue = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One 2x2 window, scalar: its maximum and the maximum's offset from r0's element in
// the plane's flat index (0, 1, W or W + 1). r0: the window's first element;
// row_stride: elements between its two rows.
template <class T>
OPENREG_SDK_ROW_INLINE void window_max(const T* r0, int64_t row_stride, int64_t W, WindowValue<T>& m, int64_t& i) {
  using A = WindowValue<T>;
  const T* r1 = r0 + row_stride;
  const A v1 = static_cast<A>(r0[1]), v2 = static_cast<A>(r1[0]), v3 = static_cast<A>(r1[1]);
  m = static_cast<A>(r0[0]);
  i = 0;
  bool t = (v1 > m) | (v1 != v1);
  m = t ? v1 : m;
  i = t ? 1 : i;
  t = (v2 > m) | (v2 != v2);
  m = t ? v2 : m;
  i = t ? W : i;
  t = (v3 > m) | (v3 != v3);
  m = t ? v3 : m;
  i = t ? W + 1 : i;
}

// Contiguous float32 planes: input [planes, H, W], outputs [planes, OH, OW] (values
// and int64 indices). Every window inside the input: 2 * OH <= H, 2 * OW <= W
// (ceil_mode's overhanging windows are the caller's).
struct Dense2x2 {
  const float* x;
  float* y;
  int64_t* ind;
  int64_t H, W, OH, OW;
};

// Any window over float32 planes with contiguous rows (max_pool_planes_f32): the plane
// and window geometry, and the strides, in elements, of the input's rows and of the
// outputs' rows and columns.
struct PlaneWindows {
  int64_t H, W, OH, OW;
  int64_t kH, kW, sH, sW, pH, pW, dH, dW;
  int64_t x_row, y_row, y_col, i_row, i_col;
};

// Where plane pl's input, output and indices start (max_pool_planes_f32's `at`).
struct PlaneStart {
  const float* x;
  float* y;
  int64_t* ind;
};

namespace detail {

// Per vector width N: the float vector V, its int32 compare lanes I, and half-vector
// int32 (IH) and int64 (LH) lanes; the shuffles the walk needs.
template <int N>
struct PoolLanes;
template <>
struct PoolLanes<4> {
  typedef float V __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
  typedef int32_t IH __attribute__((vector_size(8)));
  typedef int64_t LH __attribute__((vector_size(16)));
  static OPENREG_SDK_ROW_INLINE void deinterleave(const V& a, const V& b, V& ev, V& od) {
    ev = __builtin_shufflevector(a, b, 0, 2, 4, 6);
    od = __builtin_shufflevector(a, b, 1, 3, 5, 7);
  }
  static OPENREG_SDK_ROW_INLINE void split(const I& c, IH& lo, IH& hi) {
    lo = __builtin_shufflevector(c, c, 0, 1);
    hi = __builtin_shufflevector(c, c, 2, 3);
  }
  // The even elements of the 2N - 1 floats a ++ b, b loaded N - 1 after a: a stride-2
  // run of N values read without going past its last element.
  static OPENREG_SDK_ROW_INLINE V evens_overlapping(const V& a, const V& b) {
    return __builtin_shufflevector(a, b, 0, 2, 5, 7);
  }
};
template <>
struct PoolLanes<8> {
  typedef float V __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
  typedef int32_t IH __attribute__((vector_size(16)));
  typedef int64_t LH __attribute__((vector_size(32)));
  static OPENREG_SDK_ROW_INLINE void deinterleave(const V& a, const V& b, V& ev, V& od) {
    ev = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
    od = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
  }
  static OPENREG_SDK_ROW_INLINE void split(const I& c, IH& lo, IH& hi) {
    lo = __builtin_shufflevector(c, c, 0, 1, 2, 3);
    hi = __builtin_shufflevector(c, c, 4, 5, 6, 7);
  }
  static OPENREG_SDK_ROW_INLINE V evens_overlapping(const V& a, const V& b) {
    return __builtin_shufflevector(a, b, 0, 2, 4, 6, 9, 11, 13, 15);
  }
};
// Where a half-vector's windows start: the first input row of its first window, and
// that element's flat offset (h * W + w) in its plane.
struct Half {
  const float* r0;
  int64_t base;
};

// Planes [b, e) in vectors of N lanes; false (nothing written) unless OW is a
// multiple of N / 2.
template <int N>
OPENREG_SDK_ROW_INLINE bool walk(const Dense2x2& a, int64_t b, int64_t e) {
  using L = PoolLanes<N>;
  using V = typename L::V;
  using I = typename L::I;
  using IH = typename L::IH;
  using LH = typename L::LH;
  constexpr int64_t Hn = N / 2;
  const int64_t H = a.H, W = a.W, OH = a.OH, OW = a.OW;
  if (OW % Hn != 0) return false;
  const I zero = {}, c1 = zero + 1, cW = zero + static_cast<int32_t>(W), cW1 = cW + 1;
  LH iota2 = {};  // 2k: the k-th window's first column within a half
  for (int64_t k = 0; k < Hn; ++k) iota2[k] = 2 * k;
  // The running position: pointers over planes [b, e), a half at a time.
  const float* r0 = a.x + b * H * W;
  float* y = a.y + b * OH * OW;
  int64_t* ind = a.ind + b * OH * OW;
  int64_t oh = 0, ow = 0;
  auto next = [&](Half& h) OPENREG_SDK_ROW_LAMBDA {
    h.r0 = r0 + 2 * ow;
    h.base = 2 * oh * W + 2 * ow;
    ow += Hn;
    if (ow == OW) {
      ow = 0;
      r0 += 2 * W;
      if (++oh == OH) {
        oh = 0;
        r0 += (H - 2 * OH) * W;  // an odd height's last row, in no window
      }
    }
  };
  const int64_t halves = (e - b) * OH * (OW / Hn);
  Half h0{}, h1{};
  for (int64_t n = 0; n + 1 < halves; n += 2) {
    next(h0);
    next(h1);
    V t0a, t0b, t1a, t1b;  // the two halves' first and second input rows
    std::memcpy(&t0a, h0.r0, sizeof(V));
    std::memcpy(&t0b, h1.r0, sizeof(V));
    std::memcpy(&t1a, h0.r0 + W, sizeof(V));
    std::memcpy(&t1b, h1.r0 + W, sizeof(V));
    V e0, o0, e1, o1;
    L::deinterleave(t0a, t0b, e0, o0);
    L::deinterleave(t1a, t1b, e1, o1);
    V m = e0;
    I code = zero;
    auto t = (o0 > m) | (o0 != o0);  // NaN wins; on a tie the first element stays
    m = t ? o0 : m;
    code = t ? c1 : code;
    t = (e1 > m) | (e1 != e1);
    m = t ? e1 : m;
    code = t ? cW : code;
    t = (o1 > m) | (o1 != o1);
    m = t ? o1 : m;
    code = t ? cW1 : code;
    IH lo, hi;
    L::split(code, lo, hi);
    const LH i0 = __builtin_convertvector(lo, LH) + iota2 + h0.base;
    const LH i1 = __builtin_convertvector(hi, LH) + iota2 + h1.base;
    std::memcpy(y, &m, sizeof m);
    std::memcpy(ind, &i0, sizeof i0);
    std::memcpy(ind + Hn, &i1, sizeof i1);
    y += N;
    ind += N;
  }
  if (halves % 2) {  // an odd half at the end: its windows one by one
    next(h0);
    for (int64_t k = 0; k < Hn; ++k) {
      int64_t i;
      window_max(h0.r0 + 2 * k, W, W, y[k], i);
      ind[k] = h0.base + 2 * k + i;
    }
  }
  return true;
}

// One output row oh of a plane: the maxima and their flat indices over the windows
// of every output column, into mbuf and ibuf (OW each).
template <int N>
OPENREG_SDK_ROW_INLINE void window_row(const PlaneWindows& g, const float* x, int64_t oh, float* __restrict mbuf,
                                       int32_t* __restrict ibuf) {
  using L = PoolLanes<N>;
  using V = typename L::V;
  using I = typename L::I;
  I iota = {};  // k, the lanes' column offsets in output columns
  for (int k = 0; k < N; ++k) iota[k] = k;
  const int64_t W = g.W;
  int64_t h0 = oh * g.sH - g.pH;
  const int64_t h1 = std::min(h0 + (g.kH - 1) * g.dH + 1, g.H);
  while (h0 < 0) h0 += g.dH;
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    int64_t w0 = ow * g.sW - g.pW;
    while (w0 < 0) w0 += g.dW;
    mbuf[ow] = -std::numeric_limits<float>::infinity();
    ibuf[ow] = static_cast<int32_t>(h0 * W + w0);
  }
  for (int64_t h = h0; h < h1; h += g.dH) {
    const float* row = x + h * g.x_row;
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      const int64_t c = kw * g.dW - g.pW;  // this window column's input column: ow * sW + c
      const int64_t ow_a = c >= 0 ? 0 : (-c + g.sW - 1) / g.sW;
      const int64_t ow_b = std::min<int64_t>(g.OW, W - c <= 0 ? 0 : (W - c + g.sW - 1) / g.sW);
      int64_t ow = ow_a;
      const float* r = row + c;
      const int32_t at0 = static_cast<int32_t>(h * W + c);  // flat index of column c
      if (g.sW == 1 || g.sW == 2) {
        const I step = iota * static_cast<int32_t>(g.sW);
        for (; ow + N <= ow_b; ow += N) {
          V v;
          if (g.sW == 1) {
            std::memcpy(&v, r + ow, sizeof v);
          } else {
            V lo, hi;
            std::memcpy(&lo, r + 2 * ow, sizeof lo);
            std::memcpy(&hi, r + 2 * ow + N - 1, sizeof hi);
            v = L::evens_overlapping(lo, hi);
          }
          V m;
          I i;
          std::memcpy(&m, mbuf + ow, sizeof m);
          std::memcpy(&i, ibuf + ow, sizeof i);
          const auto take = (v > m) | (v != v);  // NaN wins, as in ATen
          m = take ? v : m;
          i = take ? step + static_cast<int32_t>(at0 + g.sW * ow) : i;
          std::memcpy(mbuf + ow, &m, sizeof m);
          std::memcpy(ibuf + ow, &i, sizeof i);
        }
      }
      for (; ow < ow_b; ++ow) {
        const float v = r[ow * g.sW];
        const bool take = (v > mbuf[ow]) | (v != v);
        mbuf[ow] = take ? v : mbuf[ow];
        ibuf[ow] = take ? static_cast<int32_t>(at0 + g.sW * ow) : ibuf[ow];
      }
    }
  }
}

}  // namespace detail

// Planes [b, e) of `a`, from the vector build of `isa` (capped by the CPU), the widest
// vector whose half divides OW: false, having written nothing, when none does (an odd
// OW; the caller's scalar loop, window_max per window, serves it).
//
// The AVX-512 build walks 8 lanes too: at 16, GCC turned the walk's vector selects into
// scalar code (a compare and an insert per lane), and [8,64,64,64] took 7.6 ms against
// the 8-lane walk's 0.64 on the same Xeon (torch CPU 9.2).
inline bool max_pool2x2_f32(VectorIsa isa, const Dense2x2& a, int64_t b, int64_t e) {
  bool done = false;
  const VectorIsa use = usable_vector_isa(isa);
  if (use == VectorIsa::kAvx512 || use == VectorIsa::kAvx2) {
    run_vectorised(use, [&]() OPENREG_SDK_ROW_LAMBDA { done = detail::walk<8>(a, b, e) || detail::walk<4>(a, b, e); });
  } else {
    done = detail::walk<4>(a, b, e);
  }
  return done;
}

// Planes [b, e) of windows `g`, plane pl at `at(pl)` (a PlaneStart), from the vector
// build of `isa` (8 floats for AVX2 and AVX-512, as the walk above; 4 below); false,
// having written nothing, when a plane has more elements than int32 indices count.
template <class At>
bool max_pool_planes_f32(VectorIsa isa, const PlaneWindows& g, int64_t b, int64_t e, At at) {
  if (g.H * g.W > std::numeric_limits<int32_t>::max()) return false;
  std::vector<float> mb(static_cast<size_t>(g.OW));
  std::vector<int32_t> ib(static_cast<size_t>(g.OW));
  float* mbuf = mb.data();
  int32_t* ibuf = ib.data();
  auto planes = [&](auto lanes) OPENREG_SDK_ROW_LAMBDA {
    constexpr int N = decltype(lanes)::value;
    for (int64_t pl = b; pl < e; ++pl) {
      const PlaneStart p = at(pl);
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        detail::window_row<N>(g, p.x, oh, mbuf, ibuf);
        float* y = p.y + oh * g.y_row;
        int64_t* ind = p.ind + oh * g.i_row;
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          y[ow * g.y_col] = mbuf[ow];
          ind[ow * g.i_col] = ibuf[ow];
        }
      }
    }
  };
  const VectorIsa use = usable_vector_isa(isa);
  if (use == VectorIsa::kAvx512 || use == VectorIsa::kAvx2) {
    run_vectorised(use, [&]() OPENREG_SDK_ROW_LAMBDA { planes(std::integral_constant<int, 8>{}); });
  } else {
    planes(std::integral_constant<int, 4>{});
  }
  return true;
}

}  // namespace max_pool
}  // namespace sdk
}  // namespace openreg
