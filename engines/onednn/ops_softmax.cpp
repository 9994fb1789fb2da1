// _softmax, _log_softmax and their backwards on oneDNN's softmax_v2 primitives
// (softmax_accurate / softmax_log); source and destination keep their own
// strides. 0-dim inputs are done inline (softmax of one element is 1).
#include <cmath>

#include "ops.h"

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

int axis_of(const sdk::Call& call, int i, int64_t ndim) {
  int64_t d = call.int_arg(i);
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (d < 0) d += n;
  OPENREG_SDK_CHECK(d >= 0 && d < n, call.op_name(), ": dim out of range");
  return static_cast<int>(d);
}

void forward(const sdk::Call& call, bool log) {
  check_softmax(call);
  sdk::Tensor x = call.tensor(0), y = call.output(0);
  const int axis = axis_of(call, 1, x.dim());
  if (y.numel() == 0) return;
  if (x.dim() == 0) {
    dispatch_float(y.dtype(), "softmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const float v = log ? 0.0f : 1.0f;
      sdk::unary_map<T>(host(), y, x, [v](T in) { return in != in ? static_cast<float>(in) : v; });
    });
    return;
  }
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
