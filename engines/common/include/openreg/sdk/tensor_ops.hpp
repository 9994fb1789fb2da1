// openreg engine SDK: kernels that are the same code in every engine, taking a
// whole sdk::Call (register them directly: e.op("aten::tril", dtypes, sdk::ops::tril)).
// They move or test elements without a library behind them: fill_ of any dtype,
// tril/triu, isneginf/isposinf, all/any, arange, embedding_dense_backward,
// bitwise and/or/xor, comparisons, a strided cat, flip and roll. Every check that can decline runs before the first write; calls
// PyTorch rejects (bad dims, indices out of range) are declined, so the reference
// raises PyTorch's own error.
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/strided.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace openreg {
namespace sdk {
namespace ops {

// Helpers for kernels that move elements (used by engines' own indexing kernels too).
// Calls fn(U{}) with the unsigned integer type of an element size: for kernels
// that copy bits without looking at them.
template <class Fn>
void dispatch_size(const Call& call, int64_t element_size, Fn&& fn) {
  switch (element_size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default: unsupported(str(call.op_name(), ": element size ", element_size));
  }
}

// dim wrapped into [0, ndim) (a 0-dim tensor counts as 1-d); out of range is
// declined, so the reference raises PyTorch's error.
inline int64_t wrap_dim(const Call& call, int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  OPENREG_SDK_REQUIRE(dim >= -n && dim < n, call.op_name(), ": dim ", dim, " out of range for ", ndim,
                      " dims (left to the reference, which raises the error)");
  return dim < 0 ? dim + n : dim;
}

// A strided copy dst <- src of elements of type U over `shape`: memcpy per row
// where both rows are dense, a reversing loop where src's row runs backwards, a
// fill where it stands still (an expanded src: autograd's gradient of a sum, which
// the generic loop flipped at 4.7x torch CPU's time).
template <class U>
void copy_strided(const Host& host, const Shape& shape, const Operand& dst, const Operand& src) {
  constexpr int64_t es = sizeof(U);
  for_each_row(host, shape, std::array<Operand, 2>{dst, src},
               [](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                 if (s[0] == es && s[1] == es) {
                   std::memcpy(p[0], p[1], static_cast<size_t>(n * es));
                   return;
                 }
                 if (s[0] == es && s[1] == 0) {
                   U v;
                   std::memcpy(&v, p[1], sizeof v);
                   std::fill(reinterpret_cast<U*>(p[0]), reinterpret_cast<U*>(p[0]) + n, v);
                   return;
                 }
                 if (s[0] == es && s[1] == -es) {  // a reversed row (flip's last dim): a loop that vectorises
                   U* d = reinterpret_cast<U*>(p[0]);
                   const U* from = reinterpret_cast<const U*>(p[1]) - (n - 1);
                   for (int64_t i = 0; i < n; ++i) d[i] = from[n - 1 - i];
                   return;
                 }
                 for (int64_t i = 0; i < n; ++i)
                   *reinterpret_cast<U*>(p[0] + i * s[0]) = *reinterpret_cast<const U*>(p[1] + i * s[1]);
               });
}

namespace detail {

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) != b.size(d)) return false;
  return true;
}

// True when argument i is an integral number (int, bool, or an int/bool Scalar):
// read it as int64 then, so large int64 values keep every digit.
inline bool integral_arg(const Call& call, int i) {
  const openreg_value& v = call.arg(i);
  if (v.kind == OPENREG_VALUE_INT || v.kind == OPENREG_VALUE_BOOL) return true;
  return v.kind == OPENREG_VALUE_SCALAR &&
         (v.u.scalar.kind == OPENREG_SCALAR_INT || v.u.scalar.kind == OPENREG_SCALAR_BOOL);
}
inline int64_t integral_value(const Call& call, int i) {
  const openreg_value& v = call.arg(i);
  return v.kind == OPENREG_VALUE_SCALAR ? v.u.scalar.v.i : v.u.i;
}

// Scalar argument i converted to T as c10::Scalar::to<T>() does: integral values
// through int64, floating ones through double (truncated toward zero for integer
// T; a value an integer T cannot hold is declined).
template <class T>
T scalar_as(const Call& call, int i) {
  if (integral_arg(call, i)) {
    const int64_t v = integral_value(call, i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      OPENREG_SDK_REQUIRE(v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                              (std::is_same_v<T, int64_t> || v <= static_cast<int64_t>(std::numeric_limits<T>::max())),
                          call.op_name(), ": value ", v, " does not fit ", dtype_name(dtype_of<T>()),
                          " (left to the reference, which raises the error)");
    if constexpr (std::is_same_v<T, bool>) return v != 0;
    else if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) return T(static_cast<float>(v));
    else return static_cast<T>(v);
  }
  const double v = call.scalar(i);
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    OPENREG_SDK_REQUIRE(std::isfinite(v) && std::trunc(v) >= static_cast<double>(std::numeric_limits<T>::min()) &&
                            std::trunc(v) <= static_cast<double>(std::numeric_limits<T>::max()),
                        call.op_name(), ": value ", v, " does not fit ", dtype_name(dtype_of<T>()));
    return static_cast<T>(v);
  } else {
    // c10's checked conversion rejects a finite value beyond the type's range.
    const double max = std::is_same_v<T, float16> ? 65504.0
                       : std::is_same_v<T, double> ? std::numeric_limits<double>::max()
                       : std::is_same_v<T, bfloat16> ? 3.3895313892515355e38
                                                     : static_cast<double>(std::numeric_limits<float>::max());
    OPENREG_SDK_REQUIRE(!std::isfinite(v) || std::fabs(v) <= max, call.op_name(), ": value ", v, " does not fit ",
                        dtype_name(dtype_of<T>()), " (left to the reference, which raises the error)");
    if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) return T(static_cast<float>(v));
    else return static_cast<T>(v);
  }
}

// Byte offset of row r of t's leading dims [0, lead) (row-major numbering).
inline int64_t row_offset(const Tensor& t, int64_t lead, int64_t r) {
  int64_t off = 0;
  for (int64_t d = lead - 1; d >= 0; --d) {
    const int64_t s = t.size(d);
    off += (r % s) * t.stride(d);
    r /= s;
  }
  return off * t.element_size();
}

// Sets every element of t to the bytes of `value` (any strides).
template <class T>
void fill_with(const Host& host, const Tensor& t, T value) {
  Shape shape = shape_of(t);
  std::array<Operand, 1> ops{operand(t, shape)};
  for_each_row(host, shape, ops, [value](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
    if (s[0] == static_cast<int64_t>(sizeof(T))) {
      T* o = reinterpret_cast<T*>(p[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = value;
      return;
    }
    for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], &value, sizeof(T));
  });
}

}  // namespace detail

// The dtypes these kernels serve (all of them work on bits or go through double).
template <class F>
decltype(auto) dispatch_tensor_ops(openreg_dtype d, const char* what, F&& f) {
  return dispatch<float, double, bfloat16, float16, int64_t, int32_t, int16_t, int8_t, uint8_t, bool>(
      d, what, std::forward<F>(f));
}

// fill_.Scalar(self, value): any dtype, any strides.
inline void fill(const Call& call) {
  const Tensor out = call.output(0);
  dispatch_tensor_ops(out.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    detail::fill_with<T>(call.host(), out, detail::scalar_as<T>(call, 1));
  });
}

// tril / triu (functional, in-place, out=): (self, diagonal=0); the elements
// outside the triangle become zero (all-zero bits: +0, false). Batched over
// the leading dims, any strides.
template <bool kLower>
void triangle(const Call& call) {
  const Tensor x = call.tensor(0), out = call.output(0);
  const int64_t k = call.is_none(1) ? 0 : call.int_arg(1);
  OPENREG_SDK_REQUIRE(x.dim() >= 2, call.op_name(), ": input of ", x.dim(),
                      " dims (left to the reference, which raises the error)");
  OPENREG_SDK_REQUIRE(same_dtype(x.dtype(), out.dtype()), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()), ", input ", dtype_name(x.dtype()));
  OPENREG_SDK_CHECK(detail::same_shape(x, out), call.op_name(), ": output ", out.describe(), " for input ",
                    x.describe());
  const int64_t nd = x.dim(), R = x.size(-2), C = x.size(-1);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / C, es = x.element_size();
  const int64_t xr = x.stride(-2) * es, xc = x.stride(-1) * es, orr = out.stride(-2) * es, oc = out.stride(-1) * es;
  dispatch_size(call, es, [&](auto zero) {
    using U = decltype(zero);
    call.host().parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / C), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t batch = r / R, i = r % R;
        const char* src = x.bytes() + detail::row_offset(x, nd - 2, batch) + i * xr;
        char* dst = out.bytes() + detail::row_offset(out, nd - 2, batch) + i * orr;
        // Columns kept: j - i <= k (lower) or j - i >= k (upper).
        const int64_t lo = kLower ? 0 : std::clamp<int64_t>(i + k, 0, C);
        const int64_t hi = kLower ? std::clamp<int64_t>(i + k + 1, 0, C) : C;
        if (xc == es && oc == es) {  // dense rows: a copy and two fills (the loop below took 8x torch CPU's time)
          if (src != dst) std::memcpy(dst + lo * es, src + lo * es, static_cast<size_t>((hi - lo) * es));
          std::memset(dst, 0, static_cast<size_t>(lo * es));
          std::memset(dst + hi * es, 0, static_cast<size_t>((C - hi) * es));
          continue;
        }
        if (xc == 0 && oc == es) {  // one value along the row (an expanded gradient): three fills
          U* d = reinterpret_cast<U*>(dst);
          const U v = *reinterpret_cast<const U*>(src);
          std::fill(d, d + lo, U(0));
          std::fill(d + lo, d + hi, v);
          std::fill(d + hi, d + C, U(0));
          continue;
        }
        for (int64_t j = 0; j < C; ++j) {
          U v = (j >= lo && j < hi) ? *reinterpret_cast<const U*>(src + j * xc) : U(0);
          *reinterpret_cast<U*>(dst + j * oc) = v;
        }
      }
    });
  });
}
inline void tril(const Call& call) { triangle<true>(call); }
inline void triu(const Call& call) { triangle<false>(call); }

// isneginf / isposinf (functional, out=): bool output; integers and bool are
// never infinite.
template <bool kNegative>
void is_signed_inf(const Call& call) {
  const Tensor x = call.tensor(0), out = call.output(0);
  OPENREG_SDK_REQUIRE(same_dtype(out.dtype(), dtypes::bool_), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()), " (PyTorch requires bool: left to the reference)");
  OPENREG_SDK_CHECK(detail::same_shape(x, out), call.op_name(), ": output ", out.describe(), " for input ",
                    x.describe());
  const double inf = kNegative ? -HUGE_VAL : HUGE_VAL;
  dispatch_tensor_ops(x.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Shape shape = shape_of(out);
    for_each_row(call.host(), shape, std::array<Operand, 2>{operand(out, shape), operand(x, shape)},
                 [inf](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                   for (int64_t i = 0; i < n; ++i)
                     *reinterpret_cast<bool*>(p[0] + i * s[0]) =
                         to_double(*reinterpret_cast<const T*>(p[1] + i * s[1])) == inf;
                 });
  });
}
inline void isneginf(const Call& call) { is_signed_inf<true>(call); }
inline void isposinf(const Call& call) { is_signed_inf<false>(call); }

// all / any over every dim (all, all.all_out), one dim (all.dim, all.out) or a
// list (all.dims, all.dims_out; None: every dim, []: none), keepdim. An element is true when
// it is not zero (NaN is true); an empty reduction gives true for all, false for
// any. The output is bool, or uint8 for a uint8 input, as in ATen.
template <bool kAll>
void all_any(const Call& call) {
  const Tensor x = call.tensor(0), out = call.output(0);
  const bool out_u8 = same_dtype(out.dtype(), dtypes::uint8);
  OPENREG_SDK_REQUIRE(same_dtype(out.dtype(), dtypes::bool_) || out_u8, call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()));
  const int64_t nd = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  bool keepdim = false;
  // Out= forms pass their out tensor as a trailing argument: only an int or an
  // int list at 1 is a dim, only a bool at 2 is keepdim.
  const bool has_dims = call.num_args() > 1 && (call.kind(1) == OPENREG_VALUE_INT || call.kind(1) == OPENREG_VALUE_INT_LIST);
  if (!has_dims) {  // every dim (all, all.all_out, all.dims with None)
    std::fill(reduced.begin(), reduced.end(), true);
  } else {
    const Span<int64_t> dims = call.int_list(1);  // an empty list reduces nothing (each element tested)
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(call, d, nd);
      if (nd == 0) continue;
      OPENREG_SDK_REQUIRE(!reduced[static_cast<size_t>(w)], call.op_name(), ": dim ", w,
                          " twice (left to the reference, which raises the error)");
      reduced[static_cast<size_t>(w)] = true;
    }
  }
  if (call.num_args() > 2 && call.kind(2) == OPENREG_VALUE_BOOL) keepdim = call.bool_arg(2);
  // out's strides seen over x's shape: 0 along the reduced dims.
  Shape shape = shape_of(x);
  Operand o{out.bytes(), Shape(static_cast<size_t>(nd), 0)};
  int64_t od = 0;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[static_cast<size_t>(d)] && !keepdim) continue;
    OPENREG_SDK_CHECK(od < out.dim() && out.size(od) == (reduced[static_cast<size_t>(d)] ? 1 : x.size(d)),
                      call.op_name(), ": output ", out.describe(), " for input ", x.describe());
    if (!reduced[static_cast<size_t>(d)]) o.byte_strides[static_cast<size_t>(d)] = out.stride(od) * out.element_size();
    ++od;
  }
  OPENREG_SDK_CHECK(od == out.dim(), call.op_name(), ": output ", out.describe(), " for input ", x.describe());
  dispatch_tensor_ops(x.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    detail::fill_with<uint8_t>(call.host(), out, kAll ? 1 : 0);  // bool and uint8 alike: one byte, 0 or 1
    // Serial: several rows may fold into one output element.
    for_each_row(Host(), shape, std::array<Operand, 2>{o, operand(x, shape)},
                 [](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                   if (s[0] == 0) {  // the row folds into one output: stop at the first decisive element
                     uint8_t& acc = *reinterpret_cast<uint8_t*>(p[0]);
                     if (acc != (kAll ? 1 : 0)) return;
                     for (int64_t i = 0; i < n; ++i) {
                       if ((to_double(*reinterpret_cast<const T*>(p[1] + i * s[1])) != 0) != kAll) {
                         acc = kAll ? 0 : 1;
                         return;
                       }
                     }
                     return;
                   }
                   for (int64_t i = 0; i < n; ++i) {
                     uint8_t& acc = *reinterpret_cast<uint8_t*>(p[0] + i * s[0]);
                     const bool v = to_double(*reinterpret_cast<const T*>(p[1] + i * s[1])) != 0;
                     acc = kAll ? (acc && v) : (acc || v);
                   }
                 });
  });
}
inline void all(const Call& call) { all_any<true>(call); }
inline void any(const Call& call) { all_any<false>(call); }

// arange.start_out(start, end, step, *, out): out (1-d, sized by the host from
// the Meta kernel) gets start + i * step, computed as ATen's CPU kernel does:
// in int64 for integer dtypes, in double for float32/float64, in float for the
// 16-bit floats.
inline void arange(const Call& call) {
  const Tensor out = call.output(0);
  OPENREG_SDK_CHECK(out.dim() == 1, call.op_name(), ": output ", out.describe(), " is not 1-d");
  const int64_t n = out.numel(), stride = out.stride(0);
  dispatch<float, double, bfloat16, float16, int64_t, int32_t, int16_t, int8_t, uint8_t>(
      out.dtype(), "arange", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using Acc = std::conditional_t<std::is_integral_v<T>, int64_t,
                                       std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>,
                                                          double, float>>;
        Acc start, step;
        if constexpr (std::is_integral_v<T>) {
          start = detail::scalar_as<int64_t>(call, 0);
          step = detail::scalar_as<int64_t>(call, 2);
        } else {
          start = static_cast<Acc>(call.scalar(0));
          step = static_cast<Acc>(call.scalar(2));
        }
        T* o = reinterpret_cast<T*>(out.bytes());
        call.host().parallel_for(0, n, kParallelGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) o[i * stride] = static_cast<T>(start + step * static_cast<Acc>(i));
        });
      });
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
// scale_grad_by_freq) -> [num_weights, D]: row k is the sum, in index order, of
// the grad rows whose index is k (not padding_idx), each scaled by 1/count(k)
// with scale_grad_by_freq, added in the grad dtype as ATen's add_ does. Indices
// (int64 or int32) out of range are declined: ATen's CPU kernel does not check them.
inline void embedding_dense_backward(const Call& call) {
  const Tensor grad = call.tensor(0), index = call.tensor(1), out = call.output(0);
  const int64_t num_weights = call.int_arg(2), padding_idx = call.int_arg(3);
  const bool by_freq = call.bool_arg(4);
  OPENREG_SDK_REQUIRE(same_dtype(grad.dtype(), out.dtype()), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()));
  OPENREG_SDK_REQUIRE(out.is_contiguous(), call.op_name(), ": strided output");
  const int64_t count = index.numel(), lead = index.dim();
  OPENREG_SDK_REQUIRE(grad.dim() == lead + 1, call.op_name(), ": grad of ", grad.dim(), " dims for indices of ",
                      lead);
  for (int64_t d = 0; d < lead; ++d)
    OPENREG_SDK_REQUIRE(grad.size(d) == index.size(d), call.op_name(), ": grad ", grad.describe(), " for indices ",
                        index.describe());
  const int64_t D = grad.size(-1);
  OPENREG_SDK_CHECK(out.dim() == 2 && out.size(0) == num_weights && out.size(1) == D, call.op_name(), ": output ",
                    out.describe());
  // The indices as int64 (any strides), each checked.
  std::vector<int64_t> idx(static_cast<size_t>(count));
  dispatch<int64_t, int32_t>(index.dtype(), "embedding_dense_backward indices", [&](auto tag) {
    using I = typename decltype(tag)::type;
    for (int64_t r = 0; r < count; ++r) {
      const int64_t v = *reinterpret_cast<const I*>(index.bytes() + detail::row_offset(index, lead, r));
      OPENREG_SDK_REQUIRE(v == padding_idx || (v >= 0 && v < num_weights), call.op_name(), ": index ", v,
                          " out of range for ", num_weights, " rows");
      idx[static_cast<size_t>(r)] = v;
    }
  });
  std::vector<int64_t> freq;
  if (by_freq) {
    freq.assign(static_cast<size_t>(num_weights), 0);
    for (int64_t v : idx)
      if (v >= 0 && v < num_weights) ++freq[static_cast<size_t>(v)];
  }
  dispatch<float, double, bfloat16, float16>(grad.dtype(), "embedding_dense_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    T* w = reinterpret_cast<T*>(out.bytes());
    std::fill(w, w + num_weights * D, T(0.0f));
    const int64_t gs = grad.stride(-1);
    // Each thread owns a range of weight rows and scans every index, as ATen does.
    auto section = [&](int64_t lo, int64_t hi) {
      for (int64_t r = 0; r < count; ++r) {
        const int64_t k = idx[static_cast<size_t>(r)];
        if (k == padding_idx || k < lo || k >= hi) continue;
        const C scale = by_freq ? static_cast<C>(1.0 / static_cast<double>(freq[static_cast<size_t>(k)])) : C(1);
        const T* g = reinterpret_cast<const T*>(grad.bytes() + detail::row_offset(grad, lead, r));
        T* row = w + k * D;
        for (int64_t j = 0; j < D; ++j)
          row[j] = static_cast<T>(static_cast<C>(row[j]) + scale * static_cast<C>(g[j * gs]));
      }
    };
    if (count > 1000) call.host().parallel_for(0, num_weights, 1, [&](int64_t lo, int64_t hi) { section(lo, hi); });
    else section(0, num_weights);
  });
}

// bitwise_and / bitwise_or / bitwise_xor .Tensor (functional, in-place, out=):
// bool and integer tensors of one dtype, broadcast to out (attention masks
// combined). Mixed dtypes (type promotion) are left to the next engine.
enum class Bitwise { And, Or, Xor };
template <Bitwise kOp>
void bitwise(const Call& call) {
  const Tensor a = call.tensor(0), b = call.tensor(1), out = call.output(0);
  OPENREG_SDK_REQUIRE(same_dtype(a.dtype(), out.dtype()) && same_dtype(b.dtype(), out.dtype()), call.op_name(),
                      ": dtypes ", dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " -> ", dtype_name(out.dtype()),
                      " (mixed dtypes are left to the next engine)");
  dispatch<bool, uint8_t, int8_t, int16_t, int32_t, int64_t>(out.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {  // dispatch also instantiates the body for float (return type)
      binary_map<T>(call.host(), out, a, b, [](T x, T y) {
        if constexpr (kOp == Bitwise::And) return static_cast<T>(x & y);
        else if constexpr (kOp == Bitwise::Or) return static_cast<T>(x | y);
        else return static_cast<T>(x ^ y);
      });
    }
  });
}
inline void bitwise_and(const Call& call) { bitwise<Bitwise::And>(call); }
inline void bitwise_or(const Call& call) { bitwise<Bitwise::Or>(call); }
inline void bitwise_xor(const Call& call) { bitwise<Bitwise::Xor>(call); }

// eq/ne/lt/le/gt/ge, .Tensor and .Scalar (functional, in-place, out=): out is
// bool (in place: self's dtype). other is a tensor of self's dtype (broadcast), or
// a value: a Scalar or a 0-dim tensor, which ATen converts to self's dtype when
// self is floating, and which must be integral when self is (a float would
// promote the comparison: left to the next engine). 16-bit floats compare as
// float (exact), integers as int64.
enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };
template <Cmp kOp, class C>
bool compare_values(C x, C y) {
  if constexpr (kOp == Cmp::Eq) return x == y;
  else if constexpr (kOp == Cmp::Ne) return x != y;
  else if constexpr (kOp == Cmp::Lt) return x < y;
  else if constexpr (kOp == Cmp::Le) return x <= y;
  else if constexpr (kOp == Cmp::Gt) return x > y;
  else return x >= y;
}
template <Cmp kOp>
void compare(const Call& call) {
  const Tensor a = call.tensor(0), out = call.output(0);
  const bool to_bool = same_dtype(out.dtype(), dtypes::bool_);
  OPENREG_SDK_REQUIRE(to_bool || same_dtype(out.dtype(), a.dtype()), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()), " for ", dtype_name(a.dtype()), " operands");
  const bool floating = a.dtype().code == OPENREG_DTYPE_CODE_FLOAT || a.dtype().code == OPENREG_DTYPE_CODE_BFLOAT;
  // other: a tensor of self's dtype, or a value (is_value) read as double or int64.
  bool is_value = true, value_integral = false;
  double dvalue = 0;
  int64_t ivalue = 0;
  const Tensor* other = nullptr;
  std::optional<Tensor> other_tensor;
  if (call.kind(1) == OPENREG_VALUE_TENSOR) {
    other_tensor = call.tensor(1);
    if (same_dtype(other_tensor->dtype(), a.dtype())) {
      is_value = false;
      other = &*other_tensor;
    } else {
      OPENREG_SDK_REQUIRE(other_tensor->dim() == 0, call.op_name(), ": other of dtype ",
                          dtype_name(other_tensor->dtype()), " for self of ", dtype_name(a.dtype()),
                          " (mixed dtypes are left to the next engine)");
      const openreg_dtype d = other_tensor->dtype();
      value_integral = d.code == OPENREG_DTYPE_CODE_INT || d.code == OPENREG_DTYPE_CODE_UINT ||
                       d.code == OPENREG_DTYPE_CODE_BOOL;
      if (value_integral)
        ivalue = dispatch<int64_t, int32_t, int16_t, int8_t, uint8_t, bool>(d, "compare", [&](auto tag) {
          using V = typename decltype(tag)::type;
          return static_cast<int64_t>(*reinterpret_cast<const V*>(other_tensor->bytes()));
        });
      else
        dvalue = other_tensor->item();
    }
  } else {
    value_integral = detail::integral_arg(call, 1);
    if (value_integral) ivalue = detail::integral_value(call, 1);
    else dvalue = call.scalar(1);
  }
  OPENREG_SDK_REQUIRE(!is_value || floating || value_integral, call.op_name(), ": a floating value compared with ",
                      dtype_name(a.dtype()), " (type promotion is left to the next engine)");
  dispatch<float, double, bfloat16, float16, int64_t, int32_t, int16_t, int8_t, uint8_t>(
      a.dtype(), call.op_name().data(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = std::conditional_t<std::is_integral_v<T>, int64_t,
                                     std::conditional_t<std::is_same_v<T, double>, double, float>>;
        // The value as ATen sees it: converted to self's dtype (floating self).
        C y{};
        if constexpr (std::is_integral_v<T>) {
          y = ivalue;
        } else {
          const double v = value_integral ? static_cast<double>(ivalue) : dvalue;
          y = static_cast<C>(static_cast<T>(static_cast<C>(v)));
        }
        auto write = [&](char* o, bool r) {
          if (to_bool) *reinterpret_cast<bool*>(o) = r;
          else *reinterpret_cast<T*>(o) = static_cast<T>(r ? 1.0f : 0.0f);
        };
        Shape shape = shape_of(out);
        if (other) {
          for_each_row(call.host(), shape, std::array<Operand, 3>{operand(out, shape), operand(a, shape), operand(*other, shape)},
                       [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& st, int64_t n) {
                         for (int64_t i = 0; i < n; ++i)
                           write(p[0] + i * st[0],
                                 compare_values<kOp>(static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * st[1])),
                                                     static_cast<C>(*reinterpret_cast<const T*>(p[2] + i * st[2]))));
                       });
        } else {
          for_each_row(call.host(), shape, std::array<Operand, 2>{operand(out, shape), operand(a, shape)},
                       [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& st, int64_t n) {
                         for (int64_t i = 0; i < n; ++i)
                           write(p[0] + i * st[0],
                                 compare_values<kOp>(static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * st[1])), y));
                       });
        }
      });
}

// cat(tensors, dim) -> out: tensors of out's dtype, any strides. 1-d empty
// tensors are skipped, as ATen does (the legacy "empty" placeholder).
inline void cat(const Call& call) {
  const std::vector<Tensor> ts = call.tensor_list(0);
  const Tensor out = call.output(0);
  const int64_t nd = out.dim();
  OPENREG_SDK_REQUIRE(nd > 0, call.op_name(), ": 0-dim output");
  const int64_t dim = wrap_dim(call, call.int_arg(1), nd);
  int64_t along = 0;
  for (const Tensor& t : ts) {
    OPENREG_SDK_REQUIRE(t.defined(), call.op_name(), ": an undefined tensor in the list");
    if (t.dim() == 1 && t.size(0) == 0) continue;
    OPENREG_SDK_REQUIRE(same_dtype(t.dtype(), out.dtype()), call.op_name(), ": a tensor of dtype ",
                        dtype_name(t.dtype()), ", the output ", dtype_name(out.dtype()),
                        " (mixed dtypes are left to the next engine)");
    OPENREG_SDK_CHECK(t.dim() == nd, call.op_name(), ": tensors of ", t.dim(), " and ", nd, " dims");
    for (int64_t d = 0; d < nd; ++d)
      OPENREG_SDK_CHECK(d == dim || t.size(d) == out.size(d), call.op_name(), ": size ", t.size(d), " at dim ", d,
                        ", expected ", out.size(d));
    along += t.size(dim);
  }
  OPENREG_SDK_CHECK(along == out.size(dim), call.op_name(), ": the tensors make ", along, " along dim ", dim,
                    ", the output has ", out.size(dim));
  if (out.numel() == 0) return;
  const int64_t es = out.element_size();
  dispatch_size(call, es, [&](auto zero) {
    using U = decltype(zero);
    int64_t at = 0;  // where the next part starts along dim
    for (const Tensor& t : ts) {
      if ((t.dim() == 1 && t.size(0) == 0) || t.size(dim) == 0) continue;
      const Shape shape = shape_of(t);
      Operand dst;  // out's strides over the part's shape, from `at` along dim
      dst.base = out.bytes() + at * out.stride(dim) * es;
      for (int64_t d = 0; d < nd; ++d) dst.byte_strides.push_back(out.stride(d) * es);
      copy_strided<U>(call.host(), shape, dst, operand(t, shape));
      at += t.size(dim);
    }
  });
}

namespace detail {

// The bytes [first, last) a tensor's elements span (numel() > 0).
inline std::pair<const char*, const char*> byte_span(const Tensor& t) {
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d) * t.element_size();
    (reach < 0 ? lo : hi) += reach;
  }
  return {t.bytes() + lo, t.bytes() + hi + t.element_size()};
}

// out and self of one dtype and shape, out sharing no memory with self (these
// kernels read self while they write out); else declined or an internal error.
inline void require_copy_operands(const Call& call, const Tensor& self, const Tensor& out) {
  OPENREG_SDK_REQUIRE(same_dtype(out.dtype(), self.dtype()), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()), ", self ", dtype_name(self.dtype()));
  OPENREG_SDK_CHECK(same_shape(out, self), call.op_name(), ": output ", out.describe(), " is not self's shape ",
                    self.describe());
  if (out.numel() == 0) return;
  const auto a = byte_span(self), b = byte_span(out);
  OPENREG_SDK_REQUIRE(b.second <= a.first || a.second <= b.first, call.op_name(),
                      ": the output overlaps self (left to the reference)");
}

}  // namespace detail

// flip(self, dims): out[i] = self[i with index j along each listed dim
// read as size - 1 - j]. A copy from self seen backwards along those dims (negative
// strides). A dim listed twice or out of range is declined (the reference raises).
inline void flip(const Call& call) {
  const Tensor self = call.tensor(0), out = call.output(0);
  detail::require_copy_operands(call, self, out);
  if (out.numel() == 0) return;
  const int64_t nd = self.dim(), es = self.element_size();
  const Shape shape = shape_of(self);
  Operand from = operand(self, shape);
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
  for (int64_t v : call.int_list(1)) {
    const int64_t d = wrap_dim(call, v, nd);
    OPENREG_SDK_REQUIRE(!seen[static_cast<size_t>(d)], call.op_name(), ": dim ", d,
                        " listed twice (left to the reference, which raises the error)");
    seen[static_cast<size_t>(d)] = true;
    if (nd == 0) continue;
    from.base += (self.size(d) - 1) * self.stride(d) * es;
    from.byte_strides[static_cast<size_t>(d)] = -from.byte_strides[static_cast<size_t>(d)];
  }
  dispatch_size(call, es, [&](auto zero) {
    copy_strided<decltype(zero)>(call.host(), shape, operand(out, shape), from);
  });
}

// roll(self, shifts, dims): out's index j along each listed dim takes
// self's (j - shift) mod size; with no dims, self's elements in row-major order
// move by shifts[0] (then shape and strides of out are self's). Each rolled dim
// splits into two ranges, so the call is 2^k block copies for k dims. (flip.out and
// roll.out never reach an engine as themselves: torch runs them as these and a copy.)
inline void roll(const Call& call) {
  const Tensor self = call.tensor(0), out = call.output(0);
  detail::require_copy_operands(call, self, out);
  const Span<int64_t> shifts = call.int_list(1), dims = call.int_list(2);
  const int64_t nd = self.dim(), es = self.element_size();
  if (dims.size() == 0) {
    OPENREG_SDK_REQUIRE(shifts.size() == 1, call.op_name(), ": ", shifts.size(),
                        " shifts and no dims (left to the reference, which raises the error)");
  } else {
    OPENREG_SDK_REQUIRE(shifts.size() == dims.size(), call.op_name(), ": ", shifts.size(), " shifts for ",
                        dims.size(), " dims (left to the reference, which raises the error)");
  }
  if (out.numel() == 0) return;
  if (nd == 0) {  // one element: nothing moves
    dispatch_size(call, es, [&](auto zero) {
      copy_strided<decltype(zero)>(call.host(), Shape{}, Operand{out.bytes(), {}}, Operand{self.bytes(), {}});
    });
    return;
  }
  // The rolled view: (sizes, self's byte strides, out's byte strides) per dim.
  Shape sizes, from, to;
  std::vector<int64_t> shift;  // per dim of `sizes`, in [0, size)
  if (dims.size() == 0) {
    // Row-major order is the flat order: only a dense self and out can be read as 1-d.
    OPENREG_SDK_REQUIRE(self.is_contiguous() && out.is_contiguous(), call.op_name(),
                        ": a roll without dims of a non-contiguous tensor (left to the reference)");
    sizes = {self.numel()};
    from = {es};
    to = {es};
    shift.assign(1, 0);
    shift[0] = ((shifts[0] % self.numel()) + self.numel()) % self.numel();
  } else {
    sizes = shape_of(self);
    from = operand(self, sizes).byte_strides;
    to = operand(out, sizes).byte_strides;
    shift.assign(static_cast<size_t>(nd), 0);
    for (int64_t i = 0; i < dims.size(); ++i) {
      const int64_t d = wrap_dim(call, dims[i], nd);
      const int64_t n = self.size(d);
      shift[static_cast<size_t>(d)] = ((shift[static_cast<size_t>(d)] + shifts[i]) % n + n) % n;
    }
  }
  std::vector<int64_t> rolled;  // dims with a shift
  for (size_t d = 0; d < sizes.size(); ++d)
    if (shift[d] != 0) rolled.push_back(static_cast<int64_t>(d));
  dispatch_size(call, es, [&](auto zero) {
    using U = decltype(zero);
    // Block `mask`: along rolled dim r, bit 0 is out's [s, n) from self's [0, n - s),
    // bit 1 out's [0, s) from self's [n - s, n).
    for (uint64_t mask = 0; mask < (uint64_t{1} << rolled.size()); ++mask) {
      Shape block = sizes;
      Operand dst{out.bytes(), to}, src{self.bytes(), from};
      for (size_t k = 0; k < rolled.size(); ++k) {
        const size_t d = static_cast<size_t>(rolled[k]);
        const int64_t n = sizes[d], s = shift[d];
        if ((mask >> k) & 1) {
          block[d] = s;
          src.base += (n - s) * from[d];
        } else {
          block[d] = n - s;
          dst.base += s * to[d];
        }
      }
      copy_strided<U>(call.host(), block, dst, src);
    }
  });
}

}  // namespace ops
}  // namespace sdk
}  // namespace openreg
