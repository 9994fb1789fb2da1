// openreg engine SDK: PReLU (aten::_prelu_kernel, aten::_prelu_kernel_backward),
// the same code in every engine, floating dtypes. F.prelu hands the kernels a weight
// already shaped to broadcast against self ([1, C, 1, 1] for an image batch, [1] for
// one shared slope). The reference served them through ATen's out= wrappers, a copy
// of every output more (forward of [8, 32, 32, 32]: 1.9x torch CPU's time).
//
//   _prelu_kernel(self, weight):                 out = self > 0 ? self : weight * self
//   _prelu_kernel_backward(grad, self, weight):  grad_self   = self > 0 ? grad : weight * grad
//                                                grad_weight = self > 0 ? 0 : self * grad
// Both backward outputs have self's shape (autograd sums grad_weight down to the
// weight's). 16-bit floats compute in float: one multiply, so the result rounds
// once, as ATen's does. A row whose self and outputs are dense and whose weight is
// one value or dense too runs a loop the compiler vectorises (select_positive:
// written as `v > 0 ? v : w * v`, a build with trapping math, GCC's default, may not
// compute w * v where v > 0, and the eigen engine's loop stayed a branch per element
// at 7x onednn's time, which builds with -fno-trapping-math); other layouts walk
// their strides. A weight that does not broadcast to self, or operands of another
// dtype, are declined (the reference raises torch's error).
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/dtype.hpp>
#include <openreg/sdk/strided.hpp>
#include <openreg/sdk/tensor_ops.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace openreg {
namespace sdk {
namespace ops {

namespace detail {

// float for float32 and the 16-bit floats, double for float64.
template <class T>
using prelu_acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

inline void require_prelu_operands(const Call& call, const Tensor& self, const Tensor& weight,
                                   std::initializer_list<Tensor> same_as_self) {
  OPENREG_SDK_REQUIRE(same_dtype(weight.dtype(), self.dtype()), call.op_name(), ": weight of dtype ",
                      dtype_name(weight.dtype()), ", self ", dtype_name(self.dtype()), " (left to the reference)");
  bool broadcasts = weight.dim() <= self.dim();
  for (int64_t d = 0; broadcasts && d < weight.dim(); ++d) {
    const int64_t ws = weight.size(weight.dim() - 1 - d), xs = self.size(self.dim() - 1 - d);
    broadcasts = ws == 1 || ws == xs;
  }
  OPENREG_SDK_REQUIRE(broadcasts, call.op_name(), ": weight ", weight.describe(), " does not broadcast to self ",
                      self.describe(), " (left to the reference, which raises the error)");
  for (const Tensor& t : same_as_self) {
    OPENREG_SDK_REQUIRE(same_dtype(t.dtype(), self.dtype()), call.op_name(), ": ", t.describe(), " of dtype ",
                        dtype_name(t.dtype()), ", self ", dtype_name(self.dtype()), " (left to the reference)");
    OPENREG_SDK_CHECK(same_shape(t, self), call.op_name(), ": ", t.describe(), " is not self's shape ",
                      self.describe());
  }
}

template <class T>
T prelu_at(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

// v > 0 ? a : b with a and b both computed, selected through their bits: no branch,
// whatever the build's trapping-math setting, so loops of it vectorise.
template <class A>
inline A select_positive(A v, A a, A b) {
  using Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;
  Bits ba, bb;
  std::memcpy(&ba, &a, sizeof a);
  std::memcpy(&bb, &b, sizeof b);
  const Bits mask = Bits(0) - static_cast<Bits>(v > 0);
  const Bits r = (ba & mask) | (bb & ~mask);
  A out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

}  // namespace detail

inline void prelu_kernel(const Call& call) {
  const Tensor self = call.tensor(0), weight = call.tensor(1), out = call.output(0);
  detail::require_prelu_operands(call, self, weight, {out});
  dispatch<float, double, bfloat16, float16>(self.dtype(), "_prelu_kernel", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = detail::prelu_acc<T>;
    constexpr int64_t es = sizeof(T);
    const Shape shape = shape_of(out);
    for_each_row(call.host(), shape,
                 std::array<Operand, 3>{operand(out, shape), operand(self, shape), operand(weight, shape)},
                 [](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                   T* o = reinterpret_cast<T*>(p[0]);
                   const T* x = reinterpret_cast<const T*>(p[1]);
                   const T* w = reinterpret_cast<const T*>(p[2]);
                   if (s[0] == es && s[1] == es && s[2] == 0) {  // one slope for the row
                     const A wv = static_cast<A>(w[0]);
                     for (int64_t i = 0; i < n; ++i) {
                       const A v = static_cast<A>(x[i]);
                       o[i] = static_cast<T>(detail::select_positive(v, v, wv * v));
                     }
                     return;
                   }
                   if (s[0] == es && s[1] == es && s[2] == es) {
                     for (int64_t i = 0; i < n; ++i) {
                       const A v = static_cast<A>(x[i]);
                       o[i] = static_cast<T>(detail::select_positive(v, v, static_cast<A>(w[i]) * v));
                     }
                     return;
                   }
                   for (int64_t i = 0; i < n; ++i) {
                     const A v = static_cast<A>(detail::prelu_at<T>(p[1] + i * s[1]));
                     const A wv = static_cast<A>(detail::prelu_at<T>(p[2] + i * s[2]));
                     *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(detail::select_positive(v, v, wv * v));
                   }
                 });
  });
}

inline void prelu_kernel_backward(const Call& call) {
  const Tensor grad = call.tensor(0), self = call.tensor(1), weight = call.tensor(2);
  const Tensor gself = call.output(0), gweight = call.output(1);
  detail::require_prelu_operands(call, self, weight, {grad, gself, gweight});
  dispatch<float, double, bfloat16, float16>(self.dtype(), "_prelu_kernel_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = detail::prelu_acc<T>;
    constexpr int64_t es = sizeof(T);
    const Shape shape = shape_of(self);
    for_each_row(call.host(), shape,
                 std::array<Operand, 5>{operand(gself, shape), operand(gweight, shape), operand(grad, shape),
                                        operand(self, shape), operand(weight, shape)},
                 [](const std::array<char*, 5>& p, const std::array<int64_t, 5>& s, int64_t n) {
                   // Dense rows with one slope; the gradient dense or one value (autograd's
                   // gradient of a sum is a 0-dim one expanded: 1.8 ms for [8, 32, 32, 32]
                   // through the strided loop, as long as torch CPU's own kernel takes).
                   auto dense = [&](auto g_step) {
                     T* gi = reinterpret_cast<T*>(p[0]);
                     T* gw = reinterpret_cast<T*>(p[1]);
                     const T* g = reinterpret_cast<const T*>(p[2]);
                     const T* x = reinterpret_cast<const T*>(p[3]);
                     const A wv = static_cast<A>(*reinterpret_cast<const T*>(p[4]));
                     for (int64_t i = 0; i < n; ++i) {
                       const A v = static_cast<A>(x[i]), gv = static_cast<A>(g[i * decltype(g_step)::value]);
                       gi[i] = static_cast<T>(detail::select_positive(v, gv, wv * gv));
                       gw[i] = static_cast<T>(detail::select_positive(v, A(0), v * gv));
                     }
                   };
                   if (s[0] == es && s[1] == es && s[3] == es && s[4] == 0) {
                     if (s[2] == es) return dense(std::integral_constant<int64_t, 1>{});
                     if (s[2] == 0) return dense(std::integral_constant<int64_t, 0>{});
                   }
                   for (int64_t i = 0; i < n; ++i) {
                     const A gv = static_cast<A>(detail::prelu_at<T>(p[2] + i * s[2]));
                     const A v = static_cast<A>(detail::prelu_at<T>(p[3] + i * s[3]));
                     const A wv = static_cast<A>(detail::prelu_at<T>(p[4] + i * s[4]));
                     *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(detail::select_positive(v, gv, wv * gv));
                     *reinterpret_cast<T*>(p[1] + i * s[1]) = static_cast<T>(detail::select_positive(v, A(0), v * gv));
                   }
                 });
  });
}

}  // namespace ops
}  // namespace sdk
}  // namespace openreg
