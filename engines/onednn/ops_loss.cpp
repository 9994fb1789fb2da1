// nll_loss forward/backward as loops (oneDNN has no primitive for it): target
// gather, class weights, ignore_index, reductions none/mean/sum, ATen's
// total_weight semantics. Accumulates in double.
#include <cmath>
#include <vector>

#include <cstring>

#include "ops.h"

namespace onednn_engine {

namespace {
struct NllArgs {
  int64_t N, C;
  int64_t xs0, xs1, ts;
};
NllArgs nll_args(const sdk::Tensor& x, const sdk::Tensor& t) {
  NllArgs a;
  if (x.dim() == 1) {
    a.N = 1;
    a.C = x.size(0);
    a.xs0 = 0;
    a.xs1 = x.stride(0);
  } else {
    a.N = x.size(0);
    a.C = x.size(1);
    a.xs0 = x.stride(0);
    a.xs1 = x.stride(1);
  }
  a.ts = t.dim() == 0 ? 0 : t.stride(0);
  return a;
}

void check_nll_loss(const sdk::Call& call) {
  const bool backward = call.op_name().find("backward") != std::string_view::npos;
  sdk::Tensor x = call.tensor(backward ? 1 : 0), t = call.tensor(backward ? 2 : 1);
  dnnl_dt(x.dtype(), call.op_name().data());
  OPENREG_SDK_REQUIRE(x.dim() == 1 || x.dim() == 2, call.op_name(), ": 1-d or 2-d input only");
  OPENREG_SDK_REQUIRE(sdk::same_dtype(t.dtype(), sdk::dtypes::int64), call.op_name(), ": int64 targets only");
  if (auto w = call.optional_tensor(backward ? 3 : 2)) require_dtype(call, x.dtype(), {*w});
  for (int i = 0; i < call.num_outputs(); ++i)
    if (call.output(i).defined()) require_dtype(call, x.dtype(), {call.output(i)});
  if (backward) require_dtype(call, x.dtype(), {call.tensor(0), call.tensor(6)});
}
}  // namespace

void nll_loss_forward(const sdk::Call& call) {
  check_nll_loss(call);
  sdk::Tensor x = call.tensor(0), t = call.tensor(1), out = call.output(0), tw = call.output(1);
  std::optional<sdk::Tensor> w = call.optional_tensor(2);
  const int64_t reduction = call.int_arg(3), ignore = call.int_arg(4);
  const NllArgs a = nll_args(x, t);
  std::vector<float> wv(static_cast<size_t>(a.C), 1.0f);
  if (w) to_float_vec(*w, wv.data());
  const int64_t* tp = t.data<int64_t>();
  for (int64_t i = 0; i < a.N; ++i) {
    const int64_t c = tp[i * a.ts];
    OPENREG_SDK_CHECK(c == ignore || (c >= 0 && c < a.C), "nll_loss: target ", c, " is out of bounds");
  }
  dispatch_float(x.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = reinterpret_cast<const T*>(x.bytes());
    T* op = reinterpret_cast<T*>(out.bytes());
    T* twp = reinterpret_cast<T*>(tw.bytes());
    if (reduction == 0 && x.dim() == 2) {
      const int64_t os = out.dim() ? out.stride(0) : 0;
      for (int64_t i = 0; i < a.N; ++i) {
        const int64_t c = tp[i * a.ts];
        op[i * os] = c == ignore ? T(0.0f) : T(-wv[c] * static_cast<float>(xp[i * a.xs0 + c * a.xs1]));
      }
      if (tw.numel()) *twp = T(0.0f);
      return;
    }
    double sum = 0.0, wsum = 0.0;
    for (int64_t i = 0; i < a.N; ++i) {
      const int64_t c = tp[i * a.ts];
      if (c == ignore) continue;
      sum -= static_cast<double>(wv[c]) * static_cast<double>(xp[i * a.xs0 + c * a.xs1]);
      wsum += wv[c];
    }
    if (reduction == 1) sum = sum / wsum;  // 0/0 -> NaN, as ATen
    *op = T(static_cast<float>(sum));
    *twp = T(static_cast<float>(wsum));
  });
}

void nll_loss_backward(const sdk::Call& call) {
  check_nll_loss(call);
  sdk::Tensor g = call.tensor(0), x = call.tensor(1), t = call.tensor(2), tw = call.tensor(6), gi = call.output(0);
  std::optional<sdk::Tensor> w = call.optional_tensor(3);
  const int64_t reduction = call.int_arg(4), ignore = call.int_arg(5);
  const NllArgs a = nll_args(x, t);
  std::vector<float> wv(static_cast<size_t>(a.C), 1.0f);
  if (w) to_float_vec(*w, wv.data());
  const int64_t* tp = t.data<int64_t>();
  dispatch_float(x.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (gi.is_contiguous())  // all-zero bits are +0 in every float dtype; the strided walk is scalar
      std::memset(gi.bytes(), 0, static_cast<size_t>(gi.numel() * gi.element_size()));
    else
      sdk::unary_map<T>(host(), gi, gi, [](T) { return 0.0f; });
    T* gp = reinterpret_cast<T*>(gi.bytes());
    const int64_t gs0 = gi.dim() == 2 ? gi.stride(0) : 0, gs1 = gi.stride(gi.dim() - 1);
    const T* gop = reinterpret_cast<const T*>(g.bytes());
    const bool per_row = reduction == 0 && x.dim() == 2;
    const int64_t gos = per_row && g.dim() ? g.stride(0) : 0;
    float scale = 1.0f;
    if (!per_row) {
      scale = static_cast<float>(*gop);
      if (reduction == 1) scale /= static_cast<float>(*reinterpret_cast<const T*>(tw.bytes()));
    }
    for (int64_t i = 0; i < a.N; ++i) {
      const int64_t c = tp[i * a.ts];
      if (c == ignore) continue;
      const float gv = per_row ? static_cast<float>(gop[i * gos]) : scale;
      gp[i * gs0 + c * gs1] = T(-wv[c] * gv);
    }
  });
}

}  // namespace onednn_engine
