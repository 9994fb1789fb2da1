// sum.dim_IntList and mean.dim on oneDNN's reduction primitive: the source keeps
// its strides, the destination is the output seen with the reduced dims kept as
// size 1 (keepdim=False outputs just get those dims inserted).
#include <limits>

#include "ops.h"

namespace onednn_engine {

namespace {

struct RedEntry {
  bool ok = false;
  dnnl::reduction::primitive_desc pd;
  dnnl::reduction prim;
};

std::vector<bool> reduced_dims(const sdk::Call& call, const sdk::Tensor& x) {
  const int64_t n = x.dim();
  std::vector<bool> r(static_cast<size_t>(n), false);
  bool any = false;
  if (!call.is_none(1)) {
    for (int64_t d : call.int_list(1)) {
      if (d < 0) d += n;
      OPENREG_SDK_CHECK(d >= 0 && d < std::max<int64_t>(n, 1), call.op_name(), ": dim out of range");
      if (n) r[static_cast<size_t>(d)] = true;
      any = true;
    }
  }
  if (!any) r.assign(static_cast<size_t>(n), true);  // no dims: everything
  return r;
}

void run_reduction(const sdk::Call& call, bool mean) {
  check_reduction(call);
  sdk::Tensor x = call.tensor(0), out = call.output(0);
  const bool keepdim = call.bool_arg(2);
  const std::vector<bool> red = reduced_dims(call, x);
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // empty reduction: 0 (sum) or NaN (mean)
    const float v = mean ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    dispatch_float(out.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sdk::unary_map<T>(host(), out, out, [v](T) { return v; });
    });
    return;
  }
  const int64_t n = x.dim();
  memory::dims dd, ds;
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (red[static_cast<size_t>(i)]) {
      dd.push_back(1);
      ds.push_back(keepdim ? out.stride(i) : 1);
      if (keepdim) ++k;
    } else {
      dd.push_back(x.size(i));
      ds.push_back(out.stride(k++));
    }
  }
  if (n == 0) {
    dd = {1};
    ds = {1};
  }
  const memory::desc xmd = md_of(x), omd = md_of(out, dd, ds);
  Key key(mean ? "mean" : "sum");
  key.add(x).add(dd).add(ds);
  auto e = cached<RedEntry>(key, [&] {
    RedEntry r;
    try {
      dnnl::reduction::desc d(mean ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_sum, xmd, omd, 0.0f,
                              0.0f);
      r.pd = dnnl::reduction::primitive_desc(d, base_attr(), cpu());
      r.prim = dnnl::reduction(r.pd);
      r.ok = true;
    } catch (const dnnl::error&) {
    }
    return r;
  });
  if (!e->ok) {  // nothing reduced (only size-1 dims): a copy
    dispatch_float(out.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sdk::Shape shape = sdk::shape_of(x);
      sdk::Operand o;
      o.base = out.bytes();
      o.byte_strides.assign(ds.begin(), ds.end());
      for (auto& s : o.byte_strides) s *= out.element_size();
      if (n == 0) o.byte_strides.clear();
      std::array<sdk::Operand, 2> ops{o, sdk::operand(x, shape)};
      sdk::for_each_row(host(), shape, ops, [](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t m) {
        for (int64_t i = 0; i < m; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[1] + i * s[1]);
      });
    });
    return;
  }
  execute(e->prim, e->pd, {{DNNL_ARG_SRC, make_mem(x, xmd)}, {DNNL_ARG_DST, make_mem(out, omd)}});
}

}  // namespace

void check_reduction(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0), out = call.output(0);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_dtype(call, x.dtype(), {out});
  if (!call.is_none(3)) {
    const auto& v = call.arg(3);
    OPENREG_SDK_REQUIRE(v.kind == OPENREG_VALUE_DTYPE && sdk::same_dtype(v.u.dtype, x.dtype()), call.op_name(),
                        ": a dtype argument other than the input's is not served");
  }
  OPENREG_SDK_REQUIRE(!has_zero_stride(x), call.op_name(), ": expanded (stride 0) input");
}

void sum_dim(const sdk::Call& call) { run_reduction(call, false); }
void mean_dim(const sdk::Call& call) { run_reduction(call, true); }

}  // namespace onednn_engine
