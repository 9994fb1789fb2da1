// Unary elementwise ops (relu, gelu, sigmoid, tanh, exp, log, sqrt, abs) and the
// activation backwards (threshold_backward, sigmoid/tanh/gelu_backward).
// Large tensors whose input and output share one layout go to oneDNN's eltwise
// primitives; small ones (< 32768 elements, ATen's grain) and odd layouts
// (expanded inputs, input and output with different strides) and bfloat16 on
// CPUs without oneDNN bf16 primitives (isa.hpp) run a plain loop in float, on
// the calling thread for small sizes.
#include <cmath>
#include <cstring>

#include "ops.h"
#include "vmath.hpp"

namespace onednn_engine {

namespace {

using Alg = dnnl::algorithm;

std::string string_arg(const sdk::Call& call, int i) {
  if (call.is_none(i)) return "none";
  const auto& v = call.arg(i);
  OPENREG_SDK_CHECK(v.kind == OPENREG_VALUE_STRING, call.op_name(), ": argument ", i, " should be a string");
  return std::string(v.u.str.data, static_cast<size_t>(v.u.str.length));
}

// gelu's `approximate`: "none" or "tanh"; any other the engine declines, and the
// reference engine raises CPU's error for it.
std::string gelu_approximate(const sdk::Call& call, int i) {
  std::string mode = string_arg(call, i);
  OPENREG_SDK_REQUIRE(mode == "none" || mode == "tanh", call.op_name(), ": approximate=", mode);
  return mode;
}

bool same_layout(const sdk::Tensor& a, const sdk::Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int64_t i = 0; i < a.dim(); ++i)
    if (a.size(i) != b.size(i) || (a.size(i) != 1 && a.stride(i) != b.stride(i))) return false;
  return true;
}

bool primitive_ok(const sdk::Tensor& a, const sdk::Tensor& b, int64_t min_numel) {
  return a.numel() >= min_numel && has_primitives(a.dtype()) && same_layout(a, b) && !has_zero_stride(a) &&
         is_dense(a);
}

// Ops built on erf/exp/tanh/log take the primitive at every size: its JIT
// kernels are vectorised, where a loop calling libm once per element is not
// (sigmoid and log still do; gelu 32x128 through std::erf took 27 us in the
// loop, against 9.9 us on torch CPU).
bool transcendental(Alg a) { return a != Alg::eltwise_relu && a != Alg::eltwise_abs && a != Alg::eltwise_sqrt; }

// Except, where the engine's vectorised loops (vmath.hpp) measured faster, on 262K
// floats, one thread, on an AMD EPYC (torch CPU in brackets):
// - below AVX-512, tanh and gelu's tanh approximation: oneDNN 2.6's AVX2 tanh
//   kernel took 4.5x its AVX-512 time (599 us against 133; the loop 383, 215 since
//   vmath::tanh is a rational function); gelu(approximate='tanh') 447 us in the
//   loop against 731 (715), its backward 528 against 803 (785). On AVX-512 the
//   primitives were faster (gelu tanh: 172 against 252, before the rational tanh;
//   not measured since: no AVX-512 machine).
// - exp, everywhere: oneDNN 2.6's AVX2 exp gives inf for NaN (and flushes results
//   below 2^-126 to 0); vmath::exp keeps NaN and subnormals as std::exp does, and
//   took 188-197 us against the primitive's 194-198 at one thread, 108 against
//   124-139 at two (262K floats, AVX2 EPYC; torch CPU 270-360, 150-210). Not
//   measured on AVX-512, where the primitive may be faster but was not checked on NaN.
// - on AVX-512, float32 gelu and its backward: 134 us against 163 (129), 213
//   against 427 (223). On AVX2 the primitive is faster (181 against 243, 255
//   against 396, measured outside the engine), and the bfloat16 loops are not
//   vectorised. Tried on AVX2 (2026-11-29): the loops with FMA and erf as a
//   rational function (no exp), in the engine at 262K floats: gelu 220 us against
//   the primitive's 230-290 at one thread, 120 against 151 at two, the backward
//   no faster; but gelu's absolute error went from torch CPU's 3.8e-7 (which the
//   primitive matches) to 9.3e-7, its relative error in the tail 0.57 -> 5.2 at
//   x in [-5.5, -3]. Not taken.
// - relu, everywhere, for NaN: the primitive's relu gives 0 for NaN from 32K
//   floats on (where the engine took it), torch keeps NaN, as relu_f does (found by
//   differential fuzzing, 2026-12-02). The loop runs as fast (memory-bound).
// - log, everywhere, for accuracy: oneDNN 2.6's AVX2 log gave log(1) = -1.4e-6 and
//   lost the relative accuracy of results near 0; vmath::log is within 1 ulp.
bool loop_is_faster(Alg a, openreg_dtype dt) {
  const loops::Width w = loops::width();
  if (a == Alg::eltwise_exp || a == Alg::eltwise_relu || a == Alg::eltwise_log) return true;
  if (a == Alg::eltwise_tanh || a == Alg::eltwise_gelu_tanh) return w == loops::Width::Avx2;
  if (a == Alg::eltwise_gelu_erf) return w == loops::Width::Avx512 && is_f32(dt);
  return false;
}

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kSqrt2_Pi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

struct UnarySpec {
  Alg alg;
  float alpha, beta;
  float (*f)(float);
};

float relu_f(float x) { return x > 0.0f || x != x ? x : 0.0f; }
// gelu(x) = x * Phi(x), Phi the standard normal CDF: Phi(-|x|) = erfc(|x| / sqrt 2) / 2.
// Forced inline: the loops of loops.hpp are compiled per ISA, and a call left to
// the baseline copy made gelu's backward 17x slower (3.7 ms for 262K floats).
[[gnu::always_inline]] inline float normal_cdf(float x) {
  const float lower = 0.5f * vmath::erfc_nonneg(std::fabs(x) * kSqrt1_2);
  return x < 0.0f ? lower : 1.0f - lower;
}
float gelu_erf_f(float x) { return x * normal_cdf(x); }
float gelu_tanh_f(float x) { return 0.5f * x * (1.0f + vmath::tanh(kSqrt2_Pi * (x + 0.044715f * x * x * x))); }
// d/dx of gelu: Phi(x) + x * phi(x), phi the normal density; and of its tanh form.
[[gnu::always_inline]] inline float gelu_erf_grad(float x) {
  return normal_cdf(x) + x * kInvSqrt2Pi * vmath::exp_nonpositive(-0.5f * x * x);
}
[[gnu::always_inline]] inline float gelu_tanh_grad(float x) {
  const float t = vmath::tanh(kSqrt2_Pi * (x + 0.044715f * x * x * x));
  const float dinner = kSqrt2_Pi * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
}
float sigmoid_f(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float tanh_f(float x) { return vmath::tanh(x); }
float exp_f(float x) { return vmath::exp(x); }
float log_f(float x) { return vmath::log(x); }
float sqrt_f(float x) { return std::sqrt(x); }
float abs_f(float x) { return std::fabs(x); }

UnarySpec unary_spec(const std::string& name, const std::string& approximate) {
  if (name == "relu") return {Alg::eltwise_relu, 0.0f, 0.0f, relu_f};
  if (name == "gelu") return approximate == "tanh" ? UnarySpec{Alg::eltwise_gelu_tanh, 0, 0, gelu_tanh_f}
                                                   : UnarySpec{Alg::eltwise_gelu_erf, 0, 0, gelu_erf_f};
  if (name == "sigmoid") return {Alg::eltwise_logistic, 0, 0, sigmoid_f};
  if (name == "tanh") return {Alg::eltwise_tanh, 0, 0, tanh_f};
  if (name == "exp") return {Alg::eltwise_exp, 0, 0, exp_f};
  if (name == "log") return {Alg::eltwise_log, 0, 0, log_f};
  if (name == "sqrt") return {Alg::eltwise_sqrt, 0, 0, sqrt_f};
  if (name == "abs") return {Alg::eltwise_abs, 0, 0, abs_f};
  sdk::fail(OPENREG_STATUS_INTERNAL, "onednn: unknown unary op " + name);
}

struct FwdEntry {
  dnnl::eltwise_forward::primitive_desc pd;
  dnnl::eltwise_forward prim;
};
struct BwdEntry {
  dnnl::eltwise_backward::primitive_desc pd;
  dnnl::eltwise_backward prim;
};

void eltwise_fwd(const sdk::Tensor& src, const sdk::Tensor& dst, const UnarySpec& s) {
  const memory::desc md = md_of(src);
  Key k("eltwise_fwd");
  k.add(static_cast<int64_t>(s.alg)).add(static_cast<double>(s.alpha)).add(src);
  auto e = cached<FwdEntry>(k, [&] {
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, s.alg, md, s.alpha, s.beta);
    dnnl::eltwise_forward::primitive_desc pd(d, base_attr(), cpu());
    return FwdEntry{pd, dnnl::eltwise_forward(pd)};
  });
  execute(e->prim, e->pd, {{DNNL_ARG_SRC, make_mem(src, md)}, {DNNL_ARG_DST, make_mem(dst, md)}});
}

// diff_src = f'(data) * diff_dst; `data` is src or dst depending on the algorithm.
// The backward of `alg` from the forward's input (`data`).
void eltwise_bwd(const sdk::Tensor& grad, const sdk::Tensor& data, const sdk::Tensor& out, Alg alg) {
  const memory::desc gmd = md_of(grad), dmd = md_of(data);
  Key k("eltwise_bwd");
  k.add(static_cast<int64_t>(alg)).add(grad).add(data);
  auto e = cached<BwdEntry>(k, [&] {
    dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training, alg, dmd, 0.0f, 0.0f);
    dnnl::eltwise_forward::primitive_desc hint(fd, base_attr(), cpu());
    dnnl::eltwise_backward::desc d(alg, gmd, dmd, 0.0f, 0.0f);
    dnnl::eltwise_backward::primitive_desc pd(d, base_attr(), cpu(), hint);
    return BwdEntry{pd, dnnl::eltwise_backward(pd)};
  });
  execute(e->prim, e->pd,
          {{DNNL_ARG_SRC, make_mem(data, dmd)},
           {DNNL_ARG_DIFF_DST, make_mem(grad, gmd)},
           {DNNL_ARG_DIFF_SRC, make_mem(out, gmd)}});
}

void check_same(const sdk::Call& call, const sdk::Tensor& out, std::initializer_list<sdk::Tensor> ins) {
  dnnl_dt(out.dtype(), call.op_name().data());
  require_dtype(call, out.dtype(), ins);
}

}  // namespace

sdk::Kernel unary(const char* name) {
  const std::string op = name;
  const bool gelu = op == "gelu";
  return [op, gelu](const sdk::Call& call) {
    sdk::Tensor x = call.tensor(0), y = call.output(0);
    check_same(call, y, {x});
    // torch 2.13's CPU gelu.out (approximate='none') ignores the strides of a
    // non-contiguous out=; the reference engine reproduces that: leave it there.
    if (gelu && !y.is_contiguous() && call.op_name().find(".out") != std::string_view::npos)
      sdk::unsupported(sdk::str(call.op_name(),
                                ": non-contiguous out= (left to aten_ref, which matches torch CPU's behaviour)"));
    const UnarySpec s = unary_spec(op, gelu ? gelu_approximate(call, 1) : "none");
    if (y.numel() == 0) return;
    if (!loop_is_faster(s.alg, y.dtype()) && primitive_ok(x, y, transcendental(s.alg) ? 1 : kSmall))
      return eltwise_fwd(x, y, s);
    dispatch_float(y.dtype(), op.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      // One instantiation per op, so the function inlines into the loop.
      auto run = [&](auto fn) { map1<T>(y, x, [fn](T v) { return fn(static_cast<float>(v)); }); };
      // tanh's rational approximation may fuse its multiplies and adds (loops.hpp).
      auto run_fused = [&](auto fn) {
        map1<T>(y, x, loops::contracting([fn](T v) { return fn(static_cast<float>(v)); }));
      };
      if (s.f == relu_f) run([](float v) { return relu_f(v); });
      else if (s.f == gelu_erf_f) run([](float v) { return gelu_erf_f(v); });
      else if (s.f == gelu_tanh_f) run_fused([](float v) { return gelu_tanh_f(v); });
      else if (s.f == sigmoid_f) run([](float v) { return sigmoid_f(v); });
      else if (s.f == tanh_f) run_fused([](float v) { return tanh_f(v); });
      else if (s.f == exp_f) run_fused([](float v) { return exp_f(v); });
      else if (s.f == log_f) run_fused([](float v) { return log_f(v); });
      else if (s.f == sqrt_f) run([](float v) { return sqrt_f(v); });
      else run([](float v) { return abs_f(v); });
    });
  };
}

sdk::Kernel activation_backward(const char* name) {
  const std::string op = name;
  return [op](const sdk::Call& call) {
    sdk::Tensor g = call.tensor(0), d = call.tensor(1), out = call.output(0);
    check_same(call, out, {g, d});
    if (out.numel() == 0) return;
    // threshold, sigmoid and tanh backward (one multiply or select an element) run
    // the vectorised loops at every size: oneDNN 2.6's eltwise backward took 3x
    // their time (262K floats: 111 against 37 us on one thread, 37 against 22 on
    // two; torch CPU 37 and 22), and no size measured in its favour. gelu's takes
    // the primitive but where loop_is_faster.
    const bool tanh_approx = op == "gelu_backward" && gelu_approximate(call, 2) == "tanh";
    const Alg gelu_alg = tanh_approx ? Alg::eltwise_gelu_tanh : Alg::eltwise_gelu_erf;
    const bool prim = op == "gelu_backward" && !loop_is_faster(gelu_alg, out.dtype()) &&
                      primitive_ok(g, out, kSmall) && d.numel() == g.numel() && same_layout(d, g) &&
                      !has_zero_stride(d);
    if (op == "threshold_backward") {
      const double th = call.scalar(2);
      const float t = static_cast<float>(th);
      dispatch_float(out.dtype(), op.c_str(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        map2<T>(out, g, d, [t](T gv, T x) { return static_cast<float>(x) <= t ? 0.0f : static_cast<float>(gv); });
      });
      return;
    }
    if (op == "sigmoid_backward") {
      dispatch_float(out.dtype(), op.c_str(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        map2<T>(out, g, d, [](T gv, T y) {
          const float yf = static_cast<float>(y);
          return static_cast<float>(gv) * (1.0f - yf) * yf;
        });
      });
      return;
    }
    if (op == "tanh_backward") {
      dispatch_float(out.dtype(), op.c_str(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        map2<T>(out, g, d, [](T gv, T y) {
          const float yf = static_cast<float>(y);
          return static_cast<float>(gv) * (1.0f - yf * yf);
        });
      });
      return;
    }
    if (op == "gelu_backward") {
      if (prim) return eltwise_bwd(g, d, out, gelu_alg);
      dispatch_float(out.dtype(), op.c_str(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // One instantiation per formula, so the loop has no branch to keep it scalar.
        if (tanh_approx)
          map2<T>(out, g, d, loops::contracting([](T gv, T xv) {
                    return static_cast<float>(gv) * gelu_tanh_grad(static_cast<float>(xv));
                  }));
        else
          map2<T>(out, g, d,
                  [](T gv, T xv) { return static_cast<float>(gv) * gelu_erf_grad(static_cast<float>(xv)); });
      });
      return;
    }
    sdk::fail(OPENREG_STATUS_INTERNAL, "onednn: unknown activation backward " + op);
  };
}

}  // namespace onednn_engine
