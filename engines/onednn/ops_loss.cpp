// Losses as loops (oneDNN has no primitive for them). nll_loss forward/backward:
// target gather, class weights, ignore_index, reductions none/mean/sum, ATen's
// total_weight semantics. mse_loss and smooth_l1_loss forward/backward:
// elementwise in float, reductions over self and target of one shape
// (broadcasting is declined).
// Both accumulate in double.
#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>
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

// A target outside [0, C) (other than ignore_index) is declined before anything is
// written: the reference raises PyTorch's IndexError ("Target 9 is out of bounds.").
void check_targets(const sdk::Call& call, const int64_t* tp, const NllArgs& a, int64_t ignore) {
  for (int64_t i = 0; i < a.N; ++i) {
    const int64_t c = tp[i * a.ts];
    OPENREG_SDK_REQUIRE(c == ignore || (c >= 0 && c < a.C), call.op_name(), ": target ", c, " is out of bounds");
  }
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
  check_targets(call, tp, a, ignore);
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
  check_targets(call, tp, a, ignore);
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

namespace {

// The elementwise losses: mse_loss and smooth_l1_loss, forward and backward, one
// loop each over a per-element function of (self, target) in float.
// loss(self, target, reduction, ...) -> out. reduction 0: f(self, target) with
// broadcasting; 1 (mean) and 2 (sum): self and target of the same shape.
template <class F>
void pointwise_loss(const sdk::Call& call, F f) {
  const sdk::Tensor x = call.tensor(0), t = call.tensor(1), out = call.output(0);
  const int64_t reduction = call.int_arg(2);
  OPENREG_SDK_REQUIRE(sdk::same_dtype(x.dtype(), out.dtype()) && sdk::same_dtype(t.dtype(), out.dtype()),
                      call.op_name(), ": self, target and output of different dtypes");
  dispatch_float(out.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (reduction == 0) {
      sdk::binary_map<T>(host(), out, x, t, [f](T a, T b) { return T(f(static_cast<float>(a), static_cast<float>(b))); });
      return;
    }
    OPENREG_SDK_REQUIRE(x.dim() == t.dim(), call.op_name(), ": self and target shapes differ (broadcasting declined)");
    for (int64_t d = 0; d < x.dim(); ++d)
      OPENREG_SDK_REQUIRE(x.size(d) == t.size(d), call.op_name(), ": self and target shapes differ (broadcasting declined)");
    const sdk::Shape shape = sdk::shape_of(x);
    double sum = 0.0;
    std::mutex mutex;  // rows may run on several threads: each adds its own partial sum
    sdk::for_each_row(host(), shape, std::array<sdk::Operand, 2>{sdk::operand(x, shape), sdk::operand(t, shape)},
                      [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& st, int64_t n) {
                        double part = 0.0;
                        int64_t i = 0;
                        if (st[0] == static_cast<int64_t>(sizeof(T)) && st[1] == static_cast<int64_t>(sizeof(T))) {
                          // Contiguous runs: blocks of 32 independent float partial sums
                          // (a vectorised loop; one double accumulator was latency-bound,
                          // 55 us for 65K elements against torch CPU's 22), each block's
                          // total added in double.
                          const T* x0 = reinterpret_cast<const T*>(p[0]);
                          const T* t0 = reinterpret_cast<const T*>(p[1]);
                          for (; i + 1024 <= n; i += 1024) {
                            float lanes[32] = {};
                            for (int64_t j = 0; j < 1024; j += 32)
                              for (int k = 0; k < 32; ++k)
                                lanes[k] += f(static_cast<float>(x0[i + j + k]), static_cast<float>(t0[i + j + k]));
                            for (int k = 0; k < 32; ++k) part += lanes[k];
                          }
                        }
                        for (; i < n; ++i)
                          part += f(static_cast<float>(*reinterpret_cast<const T*>(p[0] + i * st[0])),
                                    static_cast<float>(*reinterpret_cast<const T*>(p[1] + i * st[1])));
                        std::lock_guard<std::mutex> lock(mutex);
                        sum += part;
                      });
    if (reduction == 1) sum = x.numel() ? sum / static_cast<double>(x.numel()) : std::nan("");
    *reinterpret_cast<T*>(out.bytes()) = T(static_cast<float>(sum));
  });
}

// loss_backward(grad_output, self, target, reduction, ...) -> grad_input =
// f(self, target, grad_output, norm), norm = scale / numel for mean, else scale
// (ATen's: 2 for mse_loss, 1 for smooth_l1_loss).
template <class F>
void pointwise_loss_backward(const sdk::Call& call, float scale, F f) {
  const sdk::Tensor g = call.tensor(0), x = call.tensor(1), t = call.tensor(2), out = call.output(0);
  const int64_t reduction = call.int_arg(3);
  OPENREG_SDK_REQUIRE(sdk::same_dtype(x.dtype(), out.dtype()) && sdk::same_dtype(t.dtype(), out.dtype()) &&
                          sdk::same_dtype(g.dtype(), out.dtype()),
                      call.op_name(), ": operands and output of different dtypes");
  const float norm = reduction == 1 ? scale / static_cast<float>(std::max<int64_t>(x.numel(), 1)) : scale;
  const sdk::Shape shape = sdk::shape_of(out);
  dispatch_float(out.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (g.numel() == 1) {  // a reduced loss's gradient: one value, the elementwise loops (vectorised)
      const float gr = static_cast<float>(*reinterpret_cast<const T*>(g.bytes()));
      map2<T>(out, x, t, [f, gr, norm](float a, float b) { return f(a, b, gr, norm); });
      return;
    }
    sdk::for_each_row(host(), shape,
                      std::array<sdk::Operand, 4>{sdk::operand(out, shape), sdk::operand(x, shape),
                                                  sdk::operand(t, shape), sdk::operand(g, shape)},
                      [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& st, int64_t n) {
                        for (int64_t i = 0; i < n; ++i) {
                          const float a = static_cast<float>(*reinterpret_cast<const T*>(p[1] + i * st[1]));
                          const float b = static_cast<float>(*reinterpret_cast<const T*>(p[2] + i * st[2]));
                          const float gr = static_cast<float>(*reinterpret_cast<const T*>(p[3] + i * st[3]));
                          *reinterpret_cast<T*>(p[0] + i * st[0]) = T(f(a, b, gr, norm));
                        }
                      });
  });
}

}  // namespace

// mse_loss(self, target, reduction): (self - target)^2.
void mse_loss(const sdk::Call& call) {
  pointwise_loss(call, [](float a, float b) {
    const float d = a - b;
    return d * d;
  });
}

// mse_loss_backward(grad_output, self, target, reduction): norm * (self - target) * grad_output.
void mse_loss_backward(const sdk::Call& call) {
  pointwise_loss_backward(call, 2.0f, [](float a, float b, float g, float norm) { return norm * (a - b) * g; });
}

// smooth_l1_loss(self, target, reduction, beta), ATen's formula: z = |self - target|,
// 0.5 * z * z / beta where z < beta, else z - 0.5 * beta (beta 0: the L1 loss).
void smooth_l1_loss(const sdk::Call& call) {
  const float beta = static_cast<float>(call.double_arg(3));
  pointwise_loss(call, [beta](float a, float b) {
    const float z = std::fabs(a - b);
    return z < beta ? 0.5f * z * z / beta : z - 0.5f * beta;
  });
}

// smooth_l1_loss_backward(grad_output, self, target, reduction, beta[, grad_input]):
// x = self - target; -norm * g where x <= -beta, norm * g where x >= beta, else
// norm * x * g / beta.
void smooth_l1_loss_backward(const sdk::Call& call) {
  const float beta = static_cast<float>(call.double_arg(4));
  pointwise_loss_backward(call, 1.0f, [beta](float a, float b, float g, float norm) {
    const float x = a - b;
    return x <= -beta ? -norm * g : (x >= beta ? norm * g : norm * x * g / beta);
  });
}

}  // namespace onednn_engine
