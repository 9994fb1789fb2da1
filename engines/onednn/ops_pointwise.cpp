// Ops oneDNN has no primitive for, written as strided loops in float over the
// SDK's for_each_row (parallel through the host pool only above 32768
// elements): Adam's addcmul/addcdiv/lerp and zero_ (fill_ is the SDK's, for
// every dtype).
#include <openreg/sdk/tensor_ops.hpp>

#include <cstring>

#include <algorithm>

#include "ops.h"

namespace onednn_engine {

namespace {

// out[i] = f(a[i], b[i], c[i]) with a, b, c broadcast to out's shape.
template <class T, class F>
void ternary_map(const sdk::Tensor& out, const sdk::Tensor& a, const sdk::Tensor& b, const sdk::Tensor& c, F f) {
  if (same_dense(out, a) && same_dense(out, b) && same_dense(out, c)) {  // vectorisable pointer loop
    T* o = reinterpret_cast<T*>(out.bytes());  // may alias a (in-place ops)
    const T* x = reinterpret_cast<const T*>(a.bytes());
    const T* y = reinterpret_cast<const T*>(b.bytes());
    const T* z = reinterpret_cast<const T*>(c.bytes());
    host().parallel_for(0, out.numel(), sdk::kParallelGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        o[i] = static_cast<T>(f(static_cast<float>(x[i]), static_cast<float>(y[i]), static_cast<float>(z[i])));
    });
    return;
  }
  sdk::Shape shape = sdk::shape_of(out);
  std::array<sdk::Operand, 4> ops{sdk::operand(out, shape), sdk::operand(a, shape), sdk::operand(b, shape),
                                  sdk::operand(c, shape)};
  sdk::for_each_row(host(), shape, ops, [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
    char* o = p[0];
    const char *x = p[1], *y = p[2], *z = p[3];
    for (int64_t i = 0; i < n; ++i, o += s[0], x += s[1], y += s[2], z += s[3])
      *reinterpret_cast<T*>(o) = static_cast<T>(f(static_cast<float>(*reinterpret_cast<const T*>(x)),
                                                  static_cast<float>(*reinterpret_cast<const T*>(y)),
                                                  static_cast<float>(*reinterpret_cast<const T*>(z))));
  });
}

float lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w); }

void check_ternary(const sdk::Call& call) {
  sdk::Tensor out = call.output(0);
  dnnl_dt(out.dtype(), call.op_name().data());
  require_dtype(call, out.dtype(), {call.tensor(0), call.tensor(1)});
  if (call.kind(2) == OPENREG_VALUE_TENSOR) require_dtype(call, out.dtype(), {call.tensor(2)});
}

void check_fill(const sdk::Call& call) { dnnl_dt(call.output(0).dtype(), call.op_name().data()); }

}  // namespace

void addcmul(const sdk::Call& call) {
  check_ternary(call);
  const float v = static_cast<float>(call.scalar_or(3, 1.0));
  dispatch_float(call.output(0).dtype(), "addcmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ternary_map<T>(call.output(0), call.tensor(0), call.tensor(1), call.tensor(2),
                   [v](float s, float a, float b) { return s + v * a * b; });
  });
}

void addcdiv(const sdk::Call& call) {
  check_ternary(call);
  const float v = static_cast<float>(call.scalar_or(3, 1.0));
  dispatch_float(call.output(0).dtype(), "addcdiv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ternary_map<T>(call.output(0), call.tensor(0), call.tensor(1), call.tensor(2),
                   [v](float s, float a, float b) { return s + v * (a / b); });
  });
}

void lerp_scalar(const sdk::Call& call) {
  check_ternary(call);
  const float w = static_cast<float>(call.scalar(2));
  dispatch_float(call.output(0).dtype(), "lerp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // ATen's two formulas, chosen once per call (the weight is a scalar).
    if (w < 0.5f)
      map2<T>(call.output(0), call.tensor(0), call.tensor(1),
              [w](T a, T b) { return static_cast<float>(a) + w * (static_cast<float>(b) - static_cast<float>(a)); });
    else
      map2<T>(call.output(0), call.tensor(0), call.tensor(1), [w](T a, T b) {
        return static_cast<float>(b) - (static_cast<float>(b) - static_cast<float>(a)) * (1.0f - w);
      });
  });
}

void lerp_tensor(const sdk::Call& call) {
  check_ternary(call);
  dispatch_float(call.output(0).dtype(), "lerp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ternary_map<T>(call.output(0), call.tensor(0), call.tensor(1), call.tensor(2),
                   [](float a, float b, float w) { return lerp(a, b, w); });
  });
}

// fill_ of any dtype: the SDK's kernel (shared with the eigen engine).
// A dense float32 fill as one flat loop over the host pool (the SDK's strided
// walk took 3x torch CPU's time on 512x1000, the loss gradient's fill_); other
// dtypes and layouts through the SDK.
void fill_scalar(const sdk::Call& call) {
  const sdk::Tensor out = call.output(0);
  if (!is_f32(out.dtype()) || !out.is_contiguous()) return sdk::ops::fill(call);
  const float v = sdk::ops::detail::scalar_as<float>(call, 1);
  float* o = reinterpret_cast<float*>(out.bytes());
  host().parallel_for(0, out.numel(), sdk::kParallelGrain, [o, v](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
}

void zero(const sdk::Call& call) {
  check_fill(call);
  sdk::Tensor out = call.output(0);
  dispatch_float(out.dtype(), "zero_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map1<T>(out, out, [](T) { return T(0.0f); });
  });
}

}  // namespace onednn_engine
