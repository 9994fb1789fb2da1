// openreg engine SDK: group normalisation, forward and backward
// (aten::native_group_norm, aten::native_group_norm_backward), float32 and float64,
// the same code in every engine: nn.GroupNorm of diffusion UNets and detection
// heads. ATen's reference serves these through its out= wrappers, which copy every
// output once more (group_norm of [8, 32, 32, 32] in 8 groups took twice torch
// CPU's time on the reference engine).
//
// The input is seen as [N, C, HxW] (N * C * HxW = its elements), each of the N x
// group groups one contiguous block of C / group channels x HxW: served for
// contiguous operands only (a channels-last input, gapped statistics, ...) are
// declined to the reference. So are calls torch rejects (sizes that do not
// multiply to the input's, C not divisible by group, a weight of the wrong
// size): the reference raises torch's own error.
//
// The arithmetic is ATen's (aten/src/ATen/native/cpu/group_norm_kernel.cpp, read
// for the formulas): forward y = x * a[c] + b[c] with a = rstd * weight[c],
// b = bias[c] - mean * a, the biased variance, rstd = 1 / sqrt(var + eps);
// backward from the given mean and rstd, per channel ds = sum(dy * x),
// db = sum(dy), per group c2 = (db_g * mean - ds_g) * rstd^3 / (D * HxW),
// c3 = -c2 * mean - db_g * rstd / (D * HxW) (ds_g, db_g: the group's ds, db
// weighted by weight[c]), dx = rstd * weight[c] * dy + c2 * x + c3,
// dweight[c] = sum over n of (ds - db * mean) * rstd, dbias[c] = sum over n of db.
// Sums run in lanes of the element type (vectorised, built for `isa`:
// vector_isa.hpp) flushed into a double every kFlush elements; the mean and the
// variance are two passes over the group (the group is read again from cache),
// not E[x^2] - E[x]^2, which cancels for inputs far from zero.
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/engine.hpp>
#include <openreg/sdk/strided.hpp>
#include <openreg/sdk/vector_isa.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

namespace openreg {
namespace sdk {
namespace group_norm {

namespace detail {

// Partial sums: two AVX-512 registers of floats (an add's latency is 4 cycles: one
// register of 16 lanes ran at half the speed; 64 lanes spilled).
constexpr int64_t kLanes = 32;
constexpr int64_t kFlush = 1024;  // elements summed in the lanes before a double takes them

// sum over i < n of f(i), in kLanes partial sums of T (the element type: float
// lanes vectorise), folded pairwise (a serial fold of 32 lanes cost more than
// summing a 512-element group) and flushed into a double every kFlush elements.
template <class T, class F>
OPENREG_SDK_ROW_INLINE double lane_sum(int64_t n, const F& f) {
  double total = 0.0;
  for (int64_t i = 0; i < n;) {
    const int64_t end = std::min(n, i + kFlush);
    T lanes[kLanes] = {};
    for (; i + kLanes <= end; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += f(i + j);
    for (int64_t j = 0; i < end; ++i, ++j) lanes[j] += f(i);  // the tail: fewer than kLanes
    for (int64_t half = kLanes / 2; half > 0; half /= 2)
      for (int64_t j = 0; j < half; ++j) lanes[j] += lanes[j + half];
    total += static_cast<double>(lanes[0]);
  }
  return total;
}

// The operands of one call, checked: sizes from the call's N, C, HxW and group.
struct Dims {
  int64_t N, C, HxW, G, D;  // D = C / G channels per group
};

inline bool contiguous_or_empty(const Tensor& t) { return !t.defined() || t.numel() == 0 || t.is_contiguous(); }

inline Dims dims(const Call& call, const Tensor& x, int first) {
  Dims d{call.int_arg(first), call.int_arg(first + 1), call.int_arg(first + 2), call.int_arg(first + 3), 0};
  OPENREG_SDK_REQUIRE(d.N >= 0 && d.C > 0 && d.HxW >= 0 && d.G > 0 && d.C % d.G == 0 && d.N * d.C * d.HxW == x.numel(),
                      call.op_name(), ": N=", d.N, ", C=", d.C, ", HxW=", d.HxW, ", group=", d.G, " for input ",
                      x.describe(), " (left to the reference, which raises the error)");
  d.D = d.C / d.G;
  return d;
}

// A 1-d [C] weight or bias of x's dtype, contiguous; else declined.
inline void require_param(const Call& call, const std::optional<Tensor>& p, const Tensor& x, int64_t C,
                          const char* what) {
  if (!p) return;
  OPENREG_SDK_REQUIRE(same_dtype(p->dtype(), x.dtype()), call.op_name(), ": ", what, " of dtype ",
                      dtype_name(p->dtype()), ", input ", dtype_name(x.dtype()), " (left to the reference)");
  OPENREG_SDK_REQUIRE(p->dim() == 1 && p->size(0) == C && p->is_contiguous(), call.op_name(), ": ", what, " ",
                      p->describe(), " for ", C, " channels (left to the reference)");
}

// Each named tensor (undefined ones skipped) of x's dtype and contiguous; else declined.
inline void require_same(const Call& call, const Tensor& x,
                         std::initializer_list<std::pair<const Tensor*, const char*>> named) {
  for (const auto& [t, what] : named) {
    if (!t->defined()) continue;
    OPENREG_SDK_REQUIRE(same_dtype(t->dtype(), x.dtype()), call.op_name(), ": ", what, " of dtype ",
                        dtype_name(t->dtype()), ", input ", dtype_name(x.dtype()), " (left to the reference)");
    OPENREG_SDK_REQUIRE(contiguous_or_empty(*t), call.op_name(), ": ", what, " ", t->describe(),
                        " is not contiguous (left to the reference)");
  }
}

template <class T>
void forward(const Call& call, const Dims& d, VectorIsa isa) {
  const Tensor x = call.tensor(0), y = call.output(0), mean = call.output(1), rstd = call.output(2);
  const std::optional<Tensor> w = call.optional_tensor(1), b = call.optional_tensor(2);
  const double eps = call.double_arg(7);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  T* mp = mean.data<T>();
  T* rp = rstd.data<T>();
  const T* wp = w ? w->data<T>() : nullptr;
  const T* bp = b ? b->data<T>() : nullptr;
  const int64_t L = d.D * d.HxW;  // elements of a group
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, L));
  call.host().parallel_for(0, d.N * d.G, grain, [&](int64_t g0, int64_t g1) {
    run_vectorised(isa, [&]() OPENREG_SDK_ROW_LAMBDA {
      for (int64_t ng = g0; ng < g1; ++ng) {
        const T* xg = xp + ng * L;
        T* yg = yp + ng * L;
        const double mu = L ? lane_sum<T>(L, [&](int64_t i) OPENREG_SDK_ROW_LAMBDA { return xg[i]; }) / L : 0.0;
        const T mu_t = static_cast<T>(mu);
        const double var = L ? lane_sum<T>(L, [&](int64_t i) OPENREG_SDK_ROW_LAMBDA {
                                 const T v = xg[i] - mu_t;
                                 return v * v;
                               }) / L
                             : 0.0;
        const double rs = 1.0 / std::sqrt(std::max(var, 0.0) + eps);
        mp[ng] = mu_t;
        rp[ng] = static_cast<T>(rs);
        const int64_t c0 = (ng % d.G) * d.D;
        for (int64_t k = 0; k < d.D; ++k) {
          const double wc = wp ? static_cast<double>(wp[c0 + k]) : 1.0;
          const double bc = bp ? static_cast<double>(bp[c0 + k]) : 0.0;
          const T a = static_cast<T>(rs * wc), sh = static_cast<T>(bc - mu * rs * wc);
          const T* xr = xg + k * d.HxW;
          T* yr = yg + k * d.HxW;
          for (int64_t i = 0; i < d.HxW; ++i) yr[i] = xr[i] * a + sh;
        }
      }
    });
  });
}

template <class T>
void backward(const Call& call, const Dims& d, VectorIsa isa) {
  const Tensor dy = call.tensor(0), x = call.tensor(1), mean = call.tensor(2), rstd = call.tensor(3);
  const std::optional<Tensor> w = call.optional_tensor(4);
  const Span<int64_t> mask = call.bool_list(9);
  const Tensor dx = call.output(0), dw = call.output(1), db = call.output(2);
  const bool want_x = mask.size() > 0 && mask[0] && dx.defined();
  const bool want_w = mask.size() > 1 && mask[1] && dw.defined();
  const bool want_b = mask.size() > 2 && mask[2] && db.defined();
  const T* gp = dy.data<T>();
  const T* xp = x.data<T>();
  const T* mp = mean.data<T>();
  const T* rp = rstd.data<T>();
  const T* wp = w ? w->data<T>() : nullptr;
  const int64_t L = d.D * d.HxW, NC = d.N * d.C;
  // Per (n, c): ds = sum(dy * x), db = sum(dy), in double.
  auto sums = call.host().scratch(sizeof(double) * 2 * static_cast<uint64_t>(std::max<int64_t>(NC, 1)));
  double* ds = sums.as<double>();
  double* dbs = ds + NC;
  const double s = L ? 1.0 / static_cast<double>(L) : 0.0;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, 2 * L));
  call.host().parallel_for(0, d.N * d.G, grain, [&](int64_t g0, int64_t g1) {
    run_vectorised(isa, [&]() OPENREG_SDK_ROW_LAMBDA {
      for (int64_t ng = g0; ng < g1; ++ng) {
        const int64_t c0 = (ng % d.G) * d.D;
        double ds_g = 0.0, db_g = 0.0;
        for (int64_t k = 0; k < d.D; ++k) {
          const int64_t row = ng * d.D + k;  // n * C + c
          const T* g = gp + row * d.HxW;
          const T* v = xp + row * d.HxW;
          ds[row] = lane_sum<T>(d.HxW, [&](int64_t i) OPENREG_SDK_ROW_LAMBDA { return g[i] * v[i]; });
          dbs[row] = lane_sum<T>(d.HxW, [&](int64_t i) OPENREG_SDK_ROW_LAMBDA { return g[i]; });
          const double wc = wp ? static_cast<double>(wp[c0 + k]) : 1.0;
          ds_g += ds[row] * wc;
          db_g += dbs[row] * wc;
        }
        if (!want_x) continue;
        const double mu = static_cast<double>(mp[ng]), rs = static_cast<double>(rp[ng]);
        const double c2 = (db_g * mu - ds_g) * rs * rs * rs * s;
        const double c3 = -c2 * mu - db_g * rs * s;
        const T c2_t = static_cast<T>(c2), c3_t = static_cast<T>(c3);
        T* out = dx.data<T>();
        for (int64_t k = 0; k < d.D; ++k) {
          const int64_t row = ng * d.D + k;
          const T c1 = static_cast<T>(rs * (wp ? static_cast<double>(wp[c0 + k]) : 1.0));
          const T* g = gp + row * d.HxW;
          const T* v = xp + row * d.HxW;
          T* o = out + row * d.HxW;
          for (int64_t i = 0; i < d.HxW; ++i) o[i] = c1 * g[i] + c2_t * v[i] + c3_t;
        }
      }
    });
  });
  if (want_w || want_b) {
    T* wo = want_w ? dw.data<T>() : nullptr;
    T* bo = want_b ? db.data<T>() : nullptr;
    for (int64_t c = 0; c < d.C; ++c) {
      double sw = 0.0, sb = 0.0;
      const int64_t g = c / d.D;
      for (int64_t n = 0; n < d.N; ++n) {
        const int64_t row = n * d.C + c, ng = n * d.G + g;
        sw += (ds[row] - dbs[row] * static_cast<double>(mp[ng])) * static_cast<double>(rp[ng]);
        sb += dbs[row];
      }
      if (wo) wo[c] = static_cast<T>(sw);
      if (bo) bo[c] = static_cast<T>(sb);
    }
  }
}

}  // namespace detail

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd)
inline void native_group_norm(const Call& call, VectorIsa isa) {
  const Tensor x = call.tensor(0), y = call.output(0), mean = call.output(1), rstd = call.output(2);
  const detail::Dims d = detail::dims(call, x, 3);
  detail::require_same(call, x, {{&x, "input"}, {&y, "output"}, {&mean, "mean"}, {&rstd, "rstd"}});
  detail::require_param(call, call.optional_tensor(1), x, d.C, "weight");
  detail::require_param(call, call.optional_tensor(2), x, d.C, "bias");
  OPENREG_SDK_REQUIRE(d.HxW > 0 || d.N == 0, call.op_name(), ": empty groups (left to the reference)");
  OPENREG_SDK_CHECK(mean.numel() == d.N * d.G && rstd.numel() == d.N * d.G && y.numel() == x.numel(),
                    call.op_name(), ": outputs ", y.describe(), ", ", mean.describe(), ", ", rstd.describe(),
                    " do not fit input ", x.describe(), " in ", d.G, " groups");
  if (x.numel() == 0) return;
  dispatch_floating(x.dtype(), "native_group_norm", [&](auto tag) {
    detail::forward<typename decltype(tag)::type>(call, d, isa);
  });
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
// output_mask) -> (grad_input, grad_weight, grad_bias)
inline void native_group_norm_backward(const Call& call, VectorIsa isa) {
  const Tensor dy = call.tensor(0), x = call.tensor(1), mean = call.tensor(2), rstd = call.tensor(3);
  const detail::Dims d = detail::dims(call, x, 5);
  const Tensor dx = call.output(0), dw = call.output(1), db = call.output(2);
  detail::require_same(call, x,
                       {{&dy, "grad_out"}, {&x, "input"}, {&mean, "mean"}, {&rstd, "rstd"}, {&dx, "grad_input"},
                        {&dw, "grad_weight"}, {&db, "grad_bias"}});
  detail::require_param(call, call.optional_tensor(4), x, d.C, "weight");
  OPENREG_SDK_REQUIRE(d.HxW > 0 || d.N == 0, call.op_name(), ": empty groups (left to the reference)");
  OPENREG_SDK_CHECK(dy.numel() == x.numel() && mean.numel() == d.N * d.G && rstd.numel() == d.N * d.G,
                    call.op_name(), ": grad_out ", dy.describe(), ", mean ", mean.describe(), ", rstd ",
                    rstd.describe(), " do not fit input ", x.describe(), " in ", d.G, " groups");
  OPENREG_SDK_CHECK((!dx.defined() || dx.numel() == x.numel()) && (!dw.defined() || dw.numel() == d.C) &&
                        (!db.defined() || db.numel() == d.C),
                    call.op_name(), ": outputs of the wrong size for input ", x.describe());
  dispatch_floating(x.dtype(), "native_group_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (x.numel() == 0) {  // no batch: parameter gradients are zeros
      for (const Tensor& t : {dw, db})
        if (t.defined())
          for (int64_t c = 0; c < t.numel(); ++c) t.data<T>()[c] = T(0);
      return;
    }
    detail::backward<T>(call, d, isa);
  });
}

// Registers both ops (float32, float64) on an engine, the loops built for `isa`
// (the engine's own ISA cap).
inline void register_ops(EngineDef& e, VectorIsa isa = cpu_vector_isa()) {
  const auto f32 = dtypes::float32, f64 = dtypes::float64;
  e.op("aten::native_group_norm", {f32, f64}, [isa](const Call& c) { native_group_norm(c, isa); });
  e.op("aten::native_group_norm_backward", {f32, f64}, [isa](const Call& c) { native_group_norm_backward(c, isa); });
}

}  // namespace group_norm
}  // namespace sdk
}  // namespace openreg
