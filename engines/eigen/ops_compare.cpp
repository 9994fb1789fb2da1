// Comparisons eq/ne/lt/le/gt/ge (.Tensor, .Scalar, in-place, out=): bool outputs
// (or self's dtype for the in-place forms), broadcasting, any strides; and sign.
#include <limits>
#include <type_traits>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

template <class C>
bool cmp(Compare k, C x, C y) {
  switch (k) {
    case C_EQ: return x == y;
    case C_NE: return x != y;
    case C_LT: return x < y;
    case C_LE: return x <= y;
    case C_GT: return x > y;
    case C_GE: return x >= y;
  }
  return false;
}

// out (O) = cmp(a, b) with a and b (T) broadcast; b absent: compare with y.
template <class T, class O>
void compare_t(const sdk::Host& host, Compare k, const Tensor& out, const Tensor& a, const Tensor* b, C_t<T> y) {
  using C = C_t<T>;
  sdk::Shape shape = sdk::shape_of(out);
  if (b) {
    std::array<sdk::Operand, 3> ops{sdk::operand(out, shape), sdk::operand(a, shape), sdk::operand(*b, shape)};
    sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        const C v = static_cast<C>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
        *reinterpret_cast<O*>(p[0] + i * s[0]) = static_cast<O>(cmp(k, x, v));
      }
    });
  } else {
    std::array<sdk::Operand, 2> ops{sdk::operand(out, shape), sdk::operand(a, shape)};
    sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        *reinterpret_cast<O*>(p[0] + i * s[0]) = static_cast<O>(cmp(k, x, y));
      }
    });
  }
}

}  // namespace

void compare(const Call& call, Compare k) {
  Tensor out = call.output(0), a = call.tensor(0);
  std::optional<Tensor> b;
  double bval = 0;
  std::optional<int64_t> bint;  // the scalar, exactly, when it is an integer
  if (call.kind(1) == OPENREG_VALUE_TENSOR) {
    Tensor t = call.tensor(1);
    if (t.dim() == 0 && !same_dtype(t, a)) {
      bval = t.item();
      bint = t.item_int();
    } else {
      require_dtype(call, a, t, "other");
      b = t;
    }
  } else {
    bval = call.scalar(1);
    bint = call.int_scalar(1);
  }
  const bool to_bool = sdk::same_dtype(out.dtype(), sdk::dtypes::bool_);
  if (!to_bool) require_dtype(call, a, out, "output");
  sdk::dispatch<float, double, sdk::bfloat16, int64_t, int32_t>(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    C_t<T> y = scalar_as<T>(bval);
    if constexpr (std::is_integral_v<T>) {
      if (!b) {
        // An integer tensor against a float number compares in float (type promotion:
        // x == 0.5 is all false, x > nan too), against an int beyond T's range raises
        // in torch: both left to the next engine. An int compares exactly (not through
        // a double, which rounds beyond 2^53).
        OPENREG_SDK_REQUIRE(bint && *bint >= std::numeric_limits<T>::min() && *bint <= std::numeric_limits<T>::max(),
                            call.op_name(), ": ", a.describe(), " against a floating-point or out-of-range number",
                            " (left to the next engine)");
        y = static_cast<T>(*bint);
      }
    }
    if (to_bool) compare_t<T, bool>(call.host(), k, out, a, b ? &*b : nullptr, y);
    else compare_t<T, T>(call.host(), k, out, a, b ? &*b : nullptr, y);
  });
}

void sign(const Call& call) {
  Tensor out = call.output(0), a = call.tensor(0);
  require_dtype(call, out, a, "self");
  // Contiguous float32 on the ISA kernel: the portable loop below did not
  // vectorise (262K floats: 117 us on one AVX2 thread, torch CPU 45-61).
  if (isa_unary_f32(call, out, a, ISA_SIGN, 0.0f, 0.0f)) return;
  sdk::dispatch<float, double, sdk::bfloat16, int64_t, int32_t>(out.dtype(), "sign", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = C_t<T>;
    emap<T, 1>(call.host(), out, {a}, [](C x) { return static_cast<C>((C(0) < x) - (x < C(0))); });
  });
}

}  // namespace eigen_engine
