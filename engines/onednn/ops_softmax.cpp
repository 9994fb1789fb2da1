// _softmax, _log_softmax and their backwards on oneDNN's softmax_v2 primitives
// (softmax_accurate / softmax_log); source and destination keep their own
// strides. 0-dim inputs are done inline (softmax of one element is 1).
#include <cmath>
#include <cstring>
#include <vector>

#include "ops.h"
#include "vec.hpp"

namespace onednn_engine {

namespace {

void check_softmax(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0), y = call.output(0);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {y});
  OPENREG_SDK_REQUIRE(!call.bool_arg(2), call.op_name(), ": half_to_float is not served");
  // torch 2.13's CPU _softmax.out/_log_softmax.out ignore the strides of a
  // non-contiguous out= (they write it as if contiguous); the reference engine
  // reproduces that, so such calls are left to it to stay bit-compatible.
  OPENREG_SDK_REQUIRE(y.is_contiguous(), call.op_name(),
                      ": non-contiguous out= (left to aten_ref, which matches torch CPU's behaviour)");
}

void check_softmax_backward(const sdk::Call& call) {
  sdk::Tensor g = call.tensor(0), y = call.tensor(1), gx = call.output(0);
  dnnl_dt(g.dtype(), call.op_name().data());
  require_primitives(call, g.dtype());
  require_dtype(call, g.dtype(), {y, gx});
  const auto& v = call.arg(3);
  OPENREG_SDK_REQUIRE(v.kind != OPENREG_VALUE_DTYPE || sdk::same_dtype(v.u.dtype, g.dtype()), call.op_name(),
                      ": input_dtype other than the gradient's is not served");
}

struct FwdEntry {
  dnnl::softmax_v2_forward::primitive_desc pd;
  dnnl::softmax_v2_forward prim;
};
struct BwdEntry {
  dnnl::softmax_v2_backward::primitive_desc pd;
  dnnl::softmax_v2_backward prim;
};

// float32 softmax and log_softmax over a contiguous last dim: an own loop (at
// 32x128 the primitive's fixed cost dominated; larger ones are below), in each
// width of loops.hpp's choice. Rows are done a register at a time in GCC vector
// types (V, vec.hpp's, and VI: 4 lanes in the baseline SSE2 build, 8 in the AVX2
// one, 16 in the AVX-512 one), with a scalar tail: a 16-float vector in the AVX2
// build went through the stack (softmax of 64x1000 took 9x its AVX-512 time).
// The baseline build is there for correctness as much as speed: oneDNN 2.6's
// SSE4.1 softmax primitive gives a row with a NaN and a -inf finite values
// (ATen: NaN across the row).
namespace rows {

using vec::V16;
using vec::V4;
using vec::V8;
using vec::VI16;
using vec::VI4;
using vec::VI8;

// exp(x) for x <= 0 (x - the row's maximum), NaN kept: Cephes' expf (range
// reduction by ln 2 in two parts, degree-6 polynomial, about 1 ulp), 0 below
// -87.3 where float32 results become denormal. Scalar (S = float, SI = int32_t)
// and vector (V, VI) alike.
#define OPENREG_ONEDNN_EXP_BODY(S, SI)                                  \
  const S t = x * 1.44269504088896341f;                                 \
  const S n = (t + 12582912.0f) - 12582912.0f; /* round, |t| < 2^22 */  \
  const S r = (x - n * 0.693359375f) - n * -2.12194440e-4f;             \
  S p = r * 1.9875691500e-4f + 1.3981999507e-3f;                        \
  p = p * r + 8.3334519073e-3f;                                         \
  p = p * r + 4.1665795894e-2f;                                         \
  p = p * r + 1.6666665459e-1f;                                         \
  p = p * r + 5.0000001201e-1f;                                         \
  p = p * r * r + r + 1.0f;

#define OPENREG_ONEDNN_SOFTMAX_ROWS(NAME, ATTR, V, VI)                                   \
  ATTR inline float NAME##_exp1(float x) {                                              \
    OPENREG_ONEDNN_EXP_BODY(float, int32_t)                                             \
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23; /* 2^n */              \
    float scale;                                                                        \
    std::memcpy(&scale, &bits, sizeof scale);                                           \
    return x < -87.33654f ? 0.0f : p * scale;                                           \
  }                                                                                     \
  /* In place: a vector passed by value would change the baseline ABI. */            \
  ATTR inline void NAME##_exp(V& v) {                                                   \
    const V x = v;                                                                      \
    OPENREG_ONEDNN_EXP_BODY(V, VI)                                                      \
    const VI bits = (__builtin_convertvector(n, VI) + 127) << 23;                       \
    const V zero = {};                                                                  \
    v = x < -87.33654f ? zero : p * reinterpret_cast<const V&>(bits);                   \
  }                                                                                     \
  ATTR void NAME(const float* x, float* y, int64_t rows, int64_t n, bool log) {        \
    constexpr int64_t kLanes = sizeof(V) / sizeof(float);                              \
    const int64_t body = n - n % kLanes;                                                \
    for (int64_t row = 0; row < rows; ++row, x += n, y += n) {                          \
      V m = V{} - INFINITY;                                                             \
      for (int64_t i = 0; i < body; i += kLanes) {                                      \
        V v;                                                                            \
        std::memcpy(&v, x + i, sizeof v);                                               \
        m = v > m ? v : m;                                                              \
      }                                                                                 \
      float mx = -INFINITY;                                                             \
      for (int64_t j = 0; j < kLanes; ++j) mx = m[j] > mx ? m[j] : mx;                  \
      for (int64_t i = body; i < n; ++i) mx = x[i] > mx ? x[i] : mx;                    \
      /* NaN is never the maximum; exp(NaN - mx) is NaN, so the row's sum and */        \
      /* every output become NaN, as in ATen. */                                        \
      V s = {};                                                                         \
      for (int64_t i = 0; i < body; i += kLanes) {                                      \
        V v;                                                                            \
        std::memcpy(&v, x + i, sizeof v);                                               \
        V e = v - mx;                                                                   \
        NAME##_exp(e);                                                                  \
        if (!log) std::memcpy(y + i, &e, sizeof e);                                     \
        s += e;                                                                         \
      }                                                                                 \
      float sum = 0.0f;                                                                 \
      for (int64_t j = 0; j < kLanes; ++j) sum += s[j];                                 \
      for (int64_t i = body; i < n; ++i) {                                              \
        const float e = NAME##_exp1(x[i] - mx);                                         \
        if (!log) y[i] = e;                                                             \
        sum += e;                                                                       \
      }                                                                                 \
      if (log) { /* (x - max) - log(sum), as ATen's log_softmax */                     \
        const float lse = std::log(sum);                                                \
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mx) - lse;                       \
        continue;                                                                       \
      }                                                                                 \
      const float inv = 1.0f / sum;                                                     \
      for (int64_t i = 0; i < n; ++i) y[i] *= inv;                                      \
    }                                                                                   \
  }                                                                                     \
  /* Backward: log: gx = g - exp(y) * sum(g); else gx = y * (g - sum(g * y)). */      \
  /* y = log_softmax <= 0 is exp's domain here; a NaN in y stays NaN. */              \
  ATTR void NAME##_backward(const float* g, const float* y, float* gx, int64_t rows, int64_t n, bool log) { \
    constexpr int64_t kLanes = sizeof(V) / sizeof(float);                              \
    const int64_t body = n - n % kLanes;                                                \
    for (int64_t row = 0; row < rows; ++row, g += n, y += n, gx += n) {                 \
      V s = {};                                                                         \
      for (int64_t i = 0; i < body; i += kLanes) {                                      \
        V gv, yv;                                                                       \
        std::memcpy(&gv, g + i, sizeof gv);                                             \
        std::memcpy(&yv, y + i, sizeof yv);                                             \
        s += log ? gv : gv * yv;                                                        \
      }                                                                                 \
      float sum = 0.0f;                                                                 \
      for (int64_t j = 0; j < kLanes; ++j) sum += s[j];                                 \
      for (int64_t i = body; i < n; ++i) sum += log ? g[i] : g[i] * y[i];               \
      for (int64_t i = 0; i < body; i += kLanes) {                                      \
        V gv, yv;                                                                       \
        std::memcpy(&gv, g + i, sizeof gv);                                             \
        std::memcpy(&yv, y + i, sizeof yv);                                             \
        if (log) {                                                                      \
          NAME##_exp(yv);                                                               \
          gv = gv - yv * sum;                                                           \
        } else {                                                                        \
          gv = yv * (gv - sum);                                                         \
        }                                                                               \
        std::memcpy(gx + i, &gv, sizeof gv);                                            \
      }                                                                                 \
      for (int64_t i = body; i < n; ++i)                                                \
        gx[i] = log ? g[i] - NAME##_exp1(y[i]) * sum : y[i] * (g[i] - sum);             \
    }                                                                                   \
  }
OPENREG_ONEDNN_SOFTMAX_ROWS(softmax_rows_sse, , V4, VI4)
OPENREG_ONEDNN_SOFTMAX_ROWS(softmax_rows_avx2, __attribute__((target("avx2"))), V8, VI8)
OPENREG_ONEDNN_SOFTMAX_ROWS(softmax_rows_avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), V16, VI16)
#undef OPENREG_ONEDNN_SOFTMAX_ROWS
#undef OPENREG_ONEDNN_EXP_BODY

// bfloat16 too, through float copies of each chunk of rows: oneDNN 2.6's bf16
// softmax over the last dim left a row with a NaN NaN only where the NaN was
// (ATen: the whole row).
// The softmax dim is innermost: the last, or followed by dims of size 1 only ([3, 1]
// over dim 0; oneDNN 2.6's primitive gave [nan, 0, 0] there for [inf, 0.3, -1], where
// the row is all NaN).
bool innermost(const sdk::Tensor& t, int axis) {
  for (int64_t d = axis + 1; d < t.dim(); ++d)
    if (t.size(d) != 1) return false;
  return true;
}

bool applies(const sdk::Tensor& x, const sdk::Tensor& y, int axis) {
  return (is_f32(x.dtype()) || is_bf16(x.dtype())) && innermost(x, axis) && x.is_contiguous() && y.is_contiguous();
}

// Rows in parallel chunks above the memory grain, as the backward: [512, 1000]
// log_softmax took 395 us on oneDNN 2.6's primitive at one thread, torch CPU 305.
void run(const sdk::Tensor& x, const sdk::Tensor& y, bool log, int axis) {
  const int64_t n = x.size(axis), rows = x.numel() / n;
  const loops::Width width = loops::width();
  auto rows_of = [width, n, log](const float* in, float* out, int64_t count) {
    switch (width) {
      case loops::Width::Avx512: return softmax_rows_avx512(in, out, count, n, log);
      case loops::Width::Avx2: return softmax_rows_avx2(in, out, count, n, log);
      case loops::Width::Sse: return softmax_rows_sse(in, out, count, n, log);
    }
  };
  const int64_t grain = std::max<int64_t>(1, sdk::kParallelGrain / n);
  if (is_f32(x.dtype())) {
    const float* xp = reinterpret_cast<const float*>(x.bytes());
    float* yp = reinterpret_cast<float*>(y.bytes());
    host().parallel_for(0, rows, grain, [&](int64_t b, int64_t e) { rows_of(xp + b * n, yp + b * n, e - b); });
    return;
  }
  const sdk::bfloat16* xp = reinterpret_cast<const sdk::bfloat16*>(x.bytes());
  sdk::bfloat16* yp = reinterpret_cast<sdk::bfloat16*>(y.bytes());
  host().parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    std::vector<float> in(static_cast<size_t>((e - b) * n)), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = xp[b * n + static_cast<int64_t>(i)];
    rows_of(in.data(), out.data(), e - b);
    for (size_t i = 0; i < out.size(); ++i) yp[b * n + static_cast<int64_t>(i)] = out[i];
  });
}

bool applies_backward(const sdk::Tensor& g, const sdk::Tensor& y, const sdk::Tensor& gx, int axis) {
  return (is_f32(g.dtype()) || is_bf16(g.dtype())) && innermost(y, axis) && g.is_contiguous() && y.is_contiguous() &&
         gx.is_contiguous();
}

// Rows in parallel chunks above the memory grain ([512, 1000] log_softmax
// backward took 9 ms in oneDNN 2.6's primitive, its n not a multiple of 16).
// bfloat16 through float copies, as the forward: the primitive's bf16
// log_softmax backward kept a NaN gradient to its own element (ATen: the row).
void run_backward(const sdk::Tensor& g, const sdk::Tensor& y, const sdk::Tensor& gx, bool log, int axis) {
  const int64_t n = y.size(axis), rows = y.numel() / n;
  const loops::Width width = loops::width();
  auto rows_of = [width, n, log](const float* gp, const float* yp, float* op, int64_t count) {
    switch (width) {
      case loops::Width::Avx512: return softmax_rows_avx512_backward(gp, yp, op, count, n, log);
      case loops::Width::Avx2: return softmax_rows_avx2_backward(gp, yp, op, count, n, log);
      case loops::Width::Sse: return softmax_rows_sse_backward(gp, yp, op, count, n, log);
    }
  };
  const int64_t grain = std::max<int64_t>(1, sdk::kParallelGrain / n);
  if (is_f32(g.dtype())) {
    const float* gp = reinterpret_cast<const float*>(g.bytes());
    const float* yp = reinterpret_cast<const float*>(y.bytes());
    float* op = reinterpret_cast<float*>(gx.bytes());
    host().parallel_for(0, rows, grain,
                        [&](int64_t b, int64_t e) { rows_of(gp + b * n, yp + b * n, op + b * n, e - b); });
    return;
  }
  const sdk::bfloat16* gp = reinterpret_cast<const sdk::bfloat16*>(g.bytes());
  const sdk::bfloat16* yp = reinterpret_cast<const sdk::bfloat16*>(y.bytes());
  sdk::bfloat16* op = reinterpret_cast<sdk::bfloat16*>(gx.bytes());
  host().parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    const size_t m = static_cast<size_t>((e - b) * n);
    std::vector<float> gf(m), yf(m), of(m);
    const int64_t at = b * n;
    for (size_t i = 0; i < m; ++i) {
      gf[i] = gp[at + static_cast<int64_t>(i)];
      yf[i] = yp[at + static_cast<int64_t>(i)];
    }
    rows_of(gf.data(), yf.data(), of.data(), e - b);
    for (size_t i = 0; i < m; ++i) op[b * n + static_cast<int64_t>(i)] = of[i];
  });
}

}  // namespace rows

// Out of range: declined, for the reference to raise PyTorch's IndexError.
int axis_of(const sdk::Call& call, int i, int64_t ndim) {
  return static_cast<int>(sdk::ops::wrap_dim(call, call.int_arg(i), ndim));
}

void forward(const sdk::Call& call, bool log) {
  check_softmax(call);
  sdk::Tensor x = call.tensor(0), y = call.output(0);
  const int axis = axis_of(call, 1, x.dim());
  if (y.numel() == 0) return;
  if (x.dim() == 0) {
    dispatch_float(y.dtype(), "softmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      // ATen's arithmetic on one element: d = x - max(x) is 0, or NaN for a NaN or an
      // infinity; softmax exp(d) / exp(d) is 1 or NaN, log_softmax d - log(exp(d)) 0 or NaN.
      sdk::unary_map<T>(host(), y, x, [log](T in) {
        const float d = static_cast<float>(in) - static_cast<float>(in);
        return log ? d : d + 1.0f;
      });
    });
    return;
  }
  if (rows::applies(x, y, axis)) return rows::run(x, y, log, axis);
  Buffers buf;
  const View xv = view_of(buf, x);
  const memory::desc& xmd = xv.md;
  const memory::desc ymd = md_of(y);
  Key k(log ? "logsoftmax_fwd" : "softmax_fwd");
  k.add(x).add(y).add(static_cast<int64_t>(axis)).add(static_cast<int64_t>(has_zero_stride(x)));
  auto e = cached<FwdEntry>(k, [&] {
    dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_training,
                                     log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, xmd, ymd,
                                     axis);
    dnnl::softmax_v2_forward::primitive_desc pd(d, base_attr(), cpu());
    return FwdEntry{pd, dnnl::softmax_v2_forward(pd)};
  });
  execute(e->prim, e->pd, {{DNNL_ARG_SRC, memory(xmd, cpu(), xv.p)}, {DNNL_ARG_DST, make_mem(y, ymd)}});
}

void backward(const sdk::Call& call, bool log) {
  check_softmax_backward(call);
  sdk::Tensor g = call.tensor(0), y = call.tensor(1), gx = call.output(0);
  const int axis = axis_of(call, 2, y.dim());
  if (gx.numel() == 0) return;
  if (y.dim() == 0) {  // one element: the gradient is g - g = 0
    dispatch_float(gx.dtype(), "softmax_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sdk::binary_map<T>(host(), gx, g, y, [log](T gv, T yv) {
        const float gf = static_cast<float>(gv), yf = static_cast<float>(yv);
        return log ? gf - std::exp(yf) * gf : yf * (gf - gf * yf);
      });
    });
    return;
  }
  if (rows::applies_backward(g, y, gx, axis)) return rows::run_backward(g, y, gx, log, axis);
  Buffers buf;
  const View gv = view_of(buf, g), yv = view_of(buf, y);
  const memory::desc &gmd = gv.md, &ymd = yv.md;
  const memory::desc gxmd = md_of(gx);
  Key k(log ? "logsoftmax_bwd" : "softmax_bwd");
  k.add(g).add(y).add(gx).add(static_cast<int64_t>(axis));
  k.add(static_cast<int64_t>(has_zero_stride(g))).add(static_cast<int64_t>(has_zero_stride(y)));
  auto e = cached<BwdEntry>(k, [&] {
    const auto alg = log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    dnnl::softmax_v2_forward::desc fd(dnnl::prop_kind::forward_training, alg, gxmd, ymd, axis);
    dnnl::softmax_v2_forward::primitive_desc hint(fd, base_attr(), cpu());
    dnnl::softmax_v2_backward::desc d(alg, gxmd, gmd, ymd, axis);
    dnnl::softmax_v2_backward::primitive_desc pd(d, base_attr(), cpu(), hint);
    return BwdEntry{pd, dnnl::softmax_v2_backward(pd)};
  });
  execute(e->prim, e->pd,
          {{DNNL_ARG_DST, memory(ymd, cpu(), yv.p)},
           {DNNL_ARG_DIFF_DST, memory(gmd, cpu(), gv.p)},
           {DNNL_ARG_DIFF_SRC, make_mem(gx, gxmd)}});
}

}  // namespace

void softmax(const sdk::Call& call) { forward(call, false); }
void log_softmax(const sdk::Call& call) { forward(call, true); }
void softmax_backward(const sdk::Call& call) { backward(call, false); }
void log_softmax_backward(const sdk::Call& call) { backward(call, true); }

}  // namespace onednn_engine
