// _softmax, _log_softmax and their backward ops over any dim and strides;
// nll_loss_forward/backward (weight, reduction, ignore_index); mse_loss and its
// backward. float32 and float64 (accumulation in double for the losses).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

template <class T>
void softmax_t(const sdk::Host& host, const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  for_each_line<T, 2>(host, {out, in}, dim, [log](std::array<T*, 2> p, std::array<int64_t, 2> s, int64_t L) {
    T* o = p[0];
    const T* x = p[1];
    const int64_t so = s[0], sx = s[1];
    if (so == 1 && sx == 1) {
      Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> xv(x, L);
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> ov(o, L);
      const T mx = xv.maxCoeff();
      if (log) {
        const T lse = std::log((xv - mx).exp().sum());
        ov = (xv - mx) - lse;  // x - mx first: exact near the maximum, whatever its size
      } else {
        ov = (xv - mx).exp();
        // 0 where Eigen's exp clamped (a -inf score: weight 0, as torch CPU's)
        const T clamp = std::is_same_v<T, float> ? T(kExpClampF32) : T(kExpClampF64);
        for (int64_t i = 0; i < L; ++i) o[i] = x[i] - mx < clamp ? T(0) : o[i];
        ov *= T(1) / ov.sum();
      }
      return;
    }
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < L; ++i) mx = std::max(mx, x[i * sx]);
    T sum = 0;
    if (log) {
      for (int64_t i = 0; i < L; ++i) sum += std::exp(x[i * sx] - mx);
      const T lse = std::log(sum);
      for (int64_t i = 0; i < L; ++i) o[i * so] = (x[i * sx] - mx) - lse;
    } else {
      for (int64_t i = 0; i < L; ++i) {
        const T e = std::exp(x[i * sx] - mx);
        o[i * so] = e;
        sum += e;
      }
      const T inv = T(1) / sum;
      for (int64_t i = 0; i < L; ++i) o[i * so] *= inv;
    }
  });
}

template <class T>
void softmax_backward_t(const sdk::Host& host, const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim,
                        bool log) {
  for_each_line<T, 3>(host, {gin, g, y}, dim, [log](std::array<T*, 3> p, std::array<int64_t, 3> s, int64_t L) {
    T* o = p[0];
    const T* gp = p[1];
    const T* yp = p[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      using A = Eigen::Array<T, Eigen::Dynamic, 1>;
      Eigen::Map<A> ov(o, L);
      Eigen::Map<const A> gv(gp, L), yv(yp, L);
      if (log) ov = gv - yv.exp() * gv.sum();
      else ov = yv * (gv - (gv * yv).sum());
      return;
    }
    if (log) {  // gI = g - exp(y) * sum(g)
      T sum = 0;
      for (int64_t i = 0; i < L; ++i) sum += gp[i * s[1]];
      for (int64_t i = 0; i < L; ++i) o[i * s[0]] = gp[i * s[1]] - std::exp(yp[i * s[2]]) * sum;
    } else {  // gI = y * (g - sum(g * y))
      T sum = 0;
      for (int64_t i = 0; i < L; ++i) sum += gp[i * s[1]] * yp[i * s[2]];
      for (int64_t i = 0; i < L; ++i) o[i * s[0]] = yp[i * s[2]] * (gp[i * s[1]] - sum);
    }
  });
}

// dst (D) = src (S) elementwise, same shape, any strides.
template <class D, class S>
void convert(const sdk::Host& host, const Tensor& dst, const Tensor& src) {
  sdk::Shape shape = sdk::shape_of(dst);
  std::array<sdk::Operand, 2> ops{sdk::operand(dst, shape), sdk::operand(src, shape)};
  sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<D*>(p[0] + i * s[0]) = static_cast<D>(static_cast<float>(*reinterpret_cast<const S*>(p[1] + i * s[1])));
  });
}

// bfloat16 softmax and its backward as ATen computes them: the operands widened
// to float, the float kernel, the result rounded once. Contiguous float copies
// in scratch (the float kernel then takes its fast path for the last dim).
void softmax_bf16(const sdk::Host& host, const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  const uint64_t bytes = static_cast<uint64_t>(in.numel()) * sizeof(float);
  auto sx = host.scratch(bytes), sy = host.scratch(bytes);
  LocalTensor x(sx.as<float>(), sdk::dtypes::float32, in.sizes()), y(sy.as<float>(), sdk::dtypes::float32, in.sizes());
  convert<float, sdk::bfloat16>(host, x.view(), in);
  softmax_t<float>(host, y.view(), x.view(), dim, log);
  convert<sdk::bfloat16, float>(host, out, y.view());
}

void softmax_backward_bf16(const sdk::Host& host, const Tensor& gin, const Tensor& g, const Tensor& y, int64_t dim,
                           bool log) {
  const uint64_t bytes = static_cast<uint64_t>(g.numel()) * sizeof(float);
  auto sg = host.scratch(bytes), sy = host.scratch(bytes);
  LocalTensor gf(sg.as<float>(), sdk::dtypes::float32, g.sizes()), yf(sy.as<float>(), sdk::dtypes::float32, y.sizes());
  convert<float, sdk::bfloat16>(host, gf.view(), g);
  convert<float, sdk::bfloat16>(host, yf.view(), y);
  softmax_backward_t<float>(host, gf.view(), gf.view(), yf.view(), dim, log);  // in place: line by line
  convert<sdk::bfloat16, float>(host, gin, gf.view());
}

// Sum over all elements of f(a[i], b[i]) (serial, in double).
template <class T, class F>
double sum_pairs(const Tensor& a, const Tensor& b, F f) {
  double acc = 0;
  sdk::Shape shape = sdk::shape_of(a);
  std::array<sdk::Operand, 2> ops{sdk::operand(a, shape), sdk::operand(b, shape)};
  sdk::for_each_row(sdk::Host(), shape, ops,
                    [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i)
                        acc += f(static_cast<double>(*reinterpret_cast<const T*>(p[0] + i * s[0])),
                                 static_cast<double>(*reinterpret_cast<const T*>(p[1] + i * s[1])));
                    });
  return acc;
}

template <class T>
void write_scalar(const Tensor& t, double v) {
  *t.data<T>() = static_cast<T>(v);
}

}  // namespace

// _softmax / _log_softmax(self, dim, half_to_float)
void softmax(const Call& call, bool log) {
  Tensor out = call.output(0), in = call.tensor(0);
  require_dtype(call, out, in, "self");
  OPENREG_SDK_REQUIRE(!call.bool_arg(2), call.op_name(), ": half_to_float");
  const int64_t dim = sdk::ops::wrap_dim(call, call.int_arg(1), out.dim());  // out of range: declined
  // The common case, softmax over the last dim of contiguous float32: the ISA kernel.
  if (sdk::same_dtype(out.dtype(), sdk::dtypes::float32) && out.dim() > 0 &&
      dim == out.dim() - 1 && in.is_contiguous() && out.is_contiguous()) {
    const int64_t L = out.size(-1), rows = L ? out.numel() / L : 0;
    const float* x = in.data<float>();
    float* y = out.data<float>();
    const auto kernel = isa().softmax_f32;
    call.host().parallel_for(0, rows, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(L, 1)),
                             [&](int64_t b, int64_t e) { kernel(x + b * L, y + b * L, e - b, L, log); });
    return;
  }
  if (sdk::same_dtype(out.dtype(), sdk::dtypes::bfloat16)) {
    softmax_bf16(call.host(), out, in, dim, log);
    return;
  }
  sdk::dispatch<float, double>(out.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_t<T>(call.host(), out, in, dim, log);
  });
}

// _softmax_backward_data / _log_softmax_backward_data(grad_output, output, dim, input_dtype)
void softmax_backward(const Call& call, bool log) {
  Tensor gin = call.output(0), g = call.tensor(0), y = call.tensor(1);
  require_dtype(call, gin, g, "grad_output");
  require_dtype(call, gin, y, "output");
  const openreg_value& dt = call.arg(3);
  OPENREG_SDK_REQUIRE(dt.kind != OPENREG_VALUE_DTYPE || sdk::same_dtype(dt.u.dtype, gin.dtype()), call.op_name(),
                      ": input_dtype differs from the gradient's");
  const int64_t dim = sdk::ops::wrap_dim(call, call.int_arg(2), gin.dim());  // out of range: declined
  // Over the last dim of contiguous float32: the ISA kernel (the portable loop
  // below is built for the baseline ISA: [512, 1000] log_softmax backward took
  // 6.5x torch CPU's time).
  if (sdk::same_dtype(gin.dtype(), sdk::dtypes::float32) && gin.dim() > 0 &&
      dim == gin.dim() - 1 && g.is_contiguous() && y.is_contiguous() && gin.is_contiguous()) {
    const int64_t L = gin.size(-1), rows = L ? gin.numel() / L : 0;
    const float* gp = g.data<float>();
    const float* yp = y.data<float>();
    float* op = gin.data<float>();
    const auto kernel = isa().softmax_backward_f32;
    call.host().parallel_for(0, rows, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(L, 1)),
                             [&](int64_t b, int64_t e) { kernel(gp + b * L, yp + b * L, op + b * L, e - b, L, log); });
    return;
  }
  if (sdk::same_dtype(gin.dtype(), sdk::dtypes::bfloat16)) {
    softmax_backward_bf16(call.host(), gin, g, y, dim, log);
    return;
  }
  sdk::dispatch<float, double>(gin.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_t<T>(call.host(), gin, g, y, dim, log);
  });
}

// nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
void nll_loss_forward(const Call& call) {
  Tensor x = call.tensor(0), target = call.tensor(1);
  Tensor out = call.output(0), total = call.output(1);
  std::optional<Tensor> w = call.optional_tensor(2);
  const int64_t reduction = call.int_arg(3), ignore = call.int_arg(4);
  require_dtype(call, out, x, "self");
  require_dtype(call, total, x, "total_weight");
  if (w) require_dtype(call, x, *w, "weight");
  OPENREG_SDK_REQUIRE(sdk::same_dtype(target.dtype(), sdk::dtypes::int64), call.op_name(), ": target not int64");
  OPENREG_SDK_REQUIRE(x.dim() == 1 || x.dim() == 2, call.op_name(), ": input of ", x.dim(), " dims");
  const int64_t N = x.dim() == 2 ? x.size(0) : 1, C = x.size(-1);
  const int64_t xs0 = x.dim() == 2 ? x.stride(0) : 0, xs1 = x.stride(-1);
  const int64_t ts = target.dim() >= 1 ? target.stride(0) : 0;
  const int64_t* tp = target.data<int64_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = tp[n * ts];
    // Declined before anything is written: the reference raises PyTorch's IndexError.
    OPENREG_SDK_REQUIRE(t == ignore || (t >= 0 && t < C), call.op_name(), ": target ", t, " is out of bounds");
  }
  sdk::dispatch<float, double>(x.dtype(), "nll_loss_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* wp = w ? w->data<T>() : nullptr;
    const int64_t ws = w ? w->stride(0) : 0;
    if (reduction == 0 && x.dim() == 2) {
      T* op = out.data<T>();
      const int64_t os = out.dim() ? out.stride(0) : 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t t = tp[n * ts];
        op[n * os] = t == ignore ? T(0) : -(wp ? wp[t * ws] : T(1)) * xp[n * xs0 + t * xs1];
      }
      write_scalar<T>(total, 0.0);
      return;
    }
    double loss = 0, tw = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = tp[n * ts];
      if (t == ignore) continue;
      const double wt = wp ? static_cast<double>(wp[t * ws]) : 1.0;
      loss -= wt * static_cast<double>(xp[n * xs0 + t * xs1]);
      tw += wt;
    }
    if (reduction == 1) loss = tw == 0 ? std::numeric_limits<double>::quiet_NaN() : loss / tw;
    write_scalar<T>(out, loss);
    write_scalar<T>(total, tw);
  });
}

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight)
void nll_loss_backward(const Call& call) {
  Tensor g = call.tensor(0), x = call.tensor(1), target = call.tensor(2), total = call.tensor(6);
  Tensor gin = call.output(0);
  std::optional<Tensor> w = call.optional_tensor(3);
  const int64_t reduction = call.int_arg(4), ignore = call.int_arg(5);
  require_dtype(call, gin, x, "self");
  require_dtype(call, gin, g, "grad_output");
  require_dtype(call, gin, total, "total_weight");
  if (w) require_dtype(call, gin, *w, "weight");
  OPENREG_SDK_REQUIRE(sdk::same_dtype(target.dtype(), sdk::dtypes::int64), call.op_name(), ": target not int64");
  OPENREG_SDK_REQUIRE(gin.dim() == 1 || gin.dim() == 2, call.op_name(), ": input of ", gin.dim(), " dims");
  const int64_t N = gin.dim() == 2 ? gin.size(0) : 1, C = gin.size(-1);
  const int64_t ts = target.dim() >= 1 ? target.stride(0) : 0;
  const int64_t* tp = target.data<int64_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = tp[n * ts];
    // Declined before anything is written: the reference raises PyTorch's IndexError.
    OPENREG_SDK_REQUIRE(t == ignore || (t >= 0 && t < C), call.op_name(), ": target ", t, " is out of bounds");
  }
  sdk::dispatch<float, double>(gin.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* op = gin.data<T>();
    const int64_t os0 = gin.dim() == 2 ? gin.stride(0) : 0, os1 = gin.stride(-1);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) op[n * os0 + c * os1] = T(0);
    const T* gp = g.data<T>();
    const T* wp = w ? w->data<T>() : nullptr;
    const int64_t ws = w ? w->stride(0) : 0;
    const bool per_sample = reduction == 0 && gin.dim() == 2;
    const int64_t gs = per_sample && g.dim() ? g.stride(0) : 0;
    const T scale = reduction == 1 ? T(1) / *total.data<T>() : T(1);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = tp[n * ts];
      if (t == ignore) continue;
      const T wt = wp ? wp[t * ws] : T(1);
      op[n * os0 + t * os1] = -wt * gp[n * gs] * scale;
    }
  });
}

// mse_loss(self, target, reduction)
void mse_loss(const Call& call) {
  Tensor x = call.tensor(0), t = call.tensor(1), out = call.output(0);
  const int64_t reduction = call.int_arg(2);
  require_dtype(call, out, x, "self");
  require_dtype(call, out, t, "target");
  sdk::dispatch<float, double>(out.dtype(), "mse_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (reduction == 0) {
      emap<T, 2>(call.host(), out, {x, t}, [](T a, T b) { return (a - b) * (a - b); },
                 [](const auto& a, const auto& b) { return (a - b).square(); });
      return;
    }
    OPENREG_SDK_CHECK(x.numel() == t.numel(), call.op_name(), ": self and target sizes differ");
    double s = sum_pairs<T>(x, t, [](double a, double b) { return (a - b) * (a - b); });
    if (reduction == 1) s = x.numel() == 0 ? std::numeric_limits<double>::quiet_NaN() : s / x.numel();
    write_scalar<T>(out, s);
  });
}

// mse_loss_backward(grad_output, self, target, reduction)
void mse_loss_backward(const Call& call) {
  Tensor g = call.tensor(0), x = call.tensor(1), t = call.tensor(2), out = call.output(0);
  const int64_t reduction = call.int_arg(3);
  require_dtype(call, out, x, "self");
  require_dtype(call, out, t, "target");
  require_dtype(call, out, g, "grad_output");
  sdk::dispatch<float, double>(out.dtype(), "mse_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T norm = reduction == 1 ? T(2) / static_cast<T>(std::max<int64_t>(x.numel(), 1)) : T(2);
    emap<T, 3>(call.host(), out, {x, t, g}, [norm](T a, T b, T gr) { return norm * (a - b) * gr; });
  });
}

}  // namespace eigen_engine
