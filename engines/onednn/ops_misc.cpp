// Elementwise math oneDNN has no primitive for (sin, cos) or none this engine
// maps (neg, rsqrt, silu, pow with a scalar exponent, silu_backward, the
// piecewise-linear activations leaky_relu, hardswish, hardsigmoid and the
// backwards of leaky_relu, hardtanh, hardsigmoid): the
// engine's own loops (loops.hpp), with ATen's CPU formulas; exp, sin and cos
// of float32 from vmath.hpp, which the loops vectorise (libm is a call per
// element), std::pow for exponents without a special case. bfloat16 computes
// in float, float64 in double; neg also serves int64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ops_misc.h"
#include "vmath.hpp"

namespace onednn_engine {

namespace {

template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, sdk::bfloat16>, float, T>;

// sigmoid in the compute type: for float from exp(-|x|), which never overflows,
// so the cheaper vmath::exp_nonpositive serves (silu of 8x64x344, one thread:
// 63 us against 91 through vmath::exp, backward 73 against 105; torch CPU 74,
// 93); as 1 / (1 + exp(-x)) for double.
template <class C>
inline C sigmoid_c(C x) {
  if constexpr (std::is_same_v<C, float>) {
    const float e = vmath::exp_nonpositive(-std::fabs(x));
    const float r = 1.0f / (1.0f + e);
    return x < 0.0f ? e * r : r;
  } else {
    return C(1) / (C(1) + std::exp(-x));
  }
}

// out = op(self) for out's dtype among Ts; op is a generic lambda over the compute type.
template <class... Ts, class Op>
void unary_loop(const sdk::Call& call, Op op) {
  const sdk::Tensor out = call.output(0), a = call.tensor(0);
  require_dtype(call, out.dtype(), {a});
  sdk::dispatch<Ts...>(out.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    map1<T>(out, a, [op](C x) { return op(x); });
  });
}

// True if every |x[i]| is within vmath::kTrigMax (false for an infinity or NaN).
// A branch-free count, which vectorises: the per-element test with its libm call
// took twice the polynomial's time (sin of 262K floats 824 us, torch CPU 495).
bool within_trig_range(const float* x, int64_t n) {
  int32_t outside = 0;
  for (int64_t i = 0; i < n; ++i) outside += !(std::fabs(x[i]) <= vmath::kTrigMax);
  return outside == 0;
}

// min(max(x + 3, 0), 6) as selects, which keep a NaN (no comparison holds):
// hardswish's and hardsigmoid's common part.
template <class C>
inline C relu6_of_x_plus_3(C x) {
  C t = x + C(3);
  t = t < C(0) ? C(0) : t;
  return t > C(6) ? C(6) : t;
}

// sin/cos. Dense float32 through vmath::trig (vectorised, within 1.6 ulp); a
// range with elements past vmath::kTrigMax (or infinities, NaN) block by block,
// those elements redone with libm; other dtypes and layouts in the libm loop.
template <bool kCos>
void trig(const sdk::Call& call) {
  const sdk::Tensor out = call.output(0), a = call.tensor(0);
  if (is_f32(out.dtype()) && is_f32(a.dtype()) && same_dense(out, a)) {
    float* o = reinterpret_cast<float*>(out.bytes());  // may alias a (sin_)
    const float* x = reinterpret_cast<const float*>(a.bytes());
    host().parallel_for(0, out.numel(), sdk::kParallelGrain, [o, x](int64_t b, int64_t e) {
      auto f = [](float v) { return vmath::trig(v, kCos); };
      if (within_trig_range(x + b, e - b)) return loops::dense1(o + b, x + b, e - b, f);
      constexpr int64_t kBlock = 256;
      float tmp[kBlock];
      for (int64_t i = b; i < e; i += kBlock) {
        const int64_t m = std::min(kBlock, e - i);
        loops::dense1(tmp, x + i, m, f);
        for (int64_t k = 0; k < m; ++k)
          if (!(std::fabs(x[i + k]) <= vmath::kTrigMax)) tmp[k] = kCos ? std::cos(x[i + k]) : std::sin(x[i + k]);
        std::memcpy(o + i, tmp, static_cast<size_t>(m) * sizeof(float));
      }
    });
    return;
  }
  unary_loop<float, sdk::bfloat16, double>(call, [](auto v) { return kCos ? std::cos(v) : std::sin(v); });
}

}  // namespace

sdk::Kernel math_unary(const char* name) {
  const std::string n = name;
  if (n == "neg")
    return [](const sdk::Call& c) { unary_loop<float, sdk::bfloat16, double, int64_t>(c, [](auto x) { return -x; }); };
  if (n == "rsqrt")
    return [](const sdk::Call& c) {
      unary_loop<float, sdk::bfloat16, double>(c, [](auto x) { return decltype(x)(1) / std::sqrt(x); });
    };
  if (n == "silu")
    return [](const sdk::Call& c) {
      unary_loop<float, sdk::bfloat16, double>(c, [](auto x) { return x * sigmoid_c(x); });
    };
  if (n == "sin") return trig<false>;
  if (n == "cos") return trig<true>;
  // hardswish: x * min(max(x + 3, 0), 6) / 6, hardsigmoid: min(max(x + 3, 0), 6) / 6,
  // in ATen's order of operations; the selects keep a NaN (no comparison holds).
  if (n == "hardswish")
    return [](const sdk::Call& c) {
      unary_loop<float, sdk::bfloat16, double>(c, [](auto x) { return x * relu6_of_x_plus_3(x) / decltype(x)(6); });
    };
  if (n == "hardsigmoid")
    return [](const sdk::Call& c) {
      unary_loop<float, sdk::bfloat16, double>(c, [](auto x) { return relu6_of_x_plus_3(x) / decltype(x)(6); });
    };
  sdk::fail(OPENREG_STATUS_INTERNAL, "onednn math_unary: unknown op " + n);
}

// leaky_relu(self, negative_slope): self where self > 0, else self * slope, in the
// compute type (ATen's formula; a NaN takes the product and stays NaN). A select,
// which the loops vectorise (this engine builds with -fno-trapping-math).
void leaky_relu(const sdk::Call& call) {
  const double slope = call.scalar(1);
  unary_loop<float, sdk::bfloat16, double>(call, [slope](auto x) {
    using C = decltype(x);
    const C k = static_cast<C>(slope);
    return x > C(0) ? x : x * k;
  });
}

// pow(self, exponent): the special exponents of ATen's pow_tensor_scalar kernel
// (0.5, 2, 3, -0.5, -1, -2) as products and roots, others through std::pow
// (exponent 0 gives 1, even for NaN; exponent 1 gives self: pow's backward
// asks for x^1 when the exponent is 2, as in RMSNorm).
void pow_scalar(const sdk::Call& call) {
  const double e = call.scalar(1);
  if (e == 1) return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return x; });
  if (e == 0.5) return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return std::sqrt(x); });
  if (e == 2) return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return x * x; });
  if (e == 3) return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return x * x * x; });
  if (e == -0.5)
    return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return decltype(x)(1) / std::sqrt(x); });
  if (e == -1) return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return decltype(x)(1) / x; });
  if (e == -2) return unary_loop<float, sdk::bfloat16, double>(call, [](auto x) { return decltype(x)(1) / (x * x); });
  unary_loop<float, sdk::bfloat16, double>(call, [e](auto x) {
    using C = decltype(x);
    return std::pow(x, static_cast<C>(e));
  });
}

namespace {

// grad_input = f(grad, self) for float, bfloat16 (in float) and double: `make`
// gets a value of the compute type and returns f for it.
template <class Make>
void activation_grad(const sdk::Call& call, Make make) {
  const sdk::Tensor out = call.output(0), g = call.tensor(0), x = call.tensor(1);
  require_dtype(call, out.dtype(), {g, x});
  sdk::dispatch<float, sdk::bfloat16, double>(out.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map2<T>(out, g, x, make(compute_t<T>{}));
  });
}

}  // namespace

// grad_input = grad * s * (1 + x * (1 - s)), s = sigmoid(x).
void silu_backward(const sdk::Call& call) {
  activation_grad(call, [](auto zero) {
    using C = decltype(zero);
    return [](C dy, C v) {
      const C s = sigmoid_c(v);
      return dy * s * (C(1) + v * (C(1) - s));
    };
  });
}

// The piecewise-linear activations' backwards, ATen's CPU formulas: selects on
// the input (a NaN input takes the branch no comparison holds for).
// leaky_relu_backward(grad, self, negative_slope, self_is_result): grad where
// self > 0, else grad * slope. A negative slope on the result is an error ATen
// raises: declined, so that the reference engine raises it.
void leaky_relu_backward(const sdk::Call& call) {
  const double slope = call.scalar(2);
  OPENREG_SDK_REQUIRE(!(call.bool_arg(3) && slope < 0), call.op_name(),
                      ": a negative slope with self_is_result (an error: left to aten_ref, which raises it)");
  activation_grad(call, [slope](auto zero) {
    using C = decltype(zero);
    const C k = static_cast<C>(slope);
    return [k](C dy, C v) { return v > C(0) ? dy : dy * k; };
  });
}

// hardtanh_backward(grad, self, min_val, max_val): grad where min_val < self <
// max_val, else 0. A NaN self gets 0, as in ATen's vectorised loop (its scalar
// loop, which does a row's last elements, gives grad).
void hardtanh_backward(const sdk::Call& call) {
  const double lo = call.scalar(2), hi = call.scalar(3);
  activation_grad(call, [lo, hi](auto zero) {
    using C = decltype(zero);
    const C l = static_cast<C>(lo), h = static_cast<C>(hi);
    return [l, h](C dy, C v) { return v > l && v < h ? dy : C(0); };
  });
}

// hardsigmoid_backward(grad, self): grad * (1/6) where -3 < self < 3, else 0; 1/6
// is float's for every dtype (ATen's 1.0f / 6.0f, in double too).
void hardsigmoid_backward(const sdk::Call& call) {
  activation_grad(call, [](auto zero) {
    using C = decltype(zero);
    return [](C dy, C v) { return v > C(-3) && v < C(3) ? dy * C(1.0f / 6.0f) : C(0); };
  });
}

}  // namespace onednn_engine
