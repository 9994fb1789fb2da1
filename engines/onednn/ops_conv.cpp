// aten::convolution and aten::convolution_backward on oneDNN's convolution
// primitives (forward, backward data, backward weights with the bias gradient).
// The primitives are created with format_tag::any so oneDNN picks its blocked
// layouts (the fast kernels); the user's tensors (any strides) are reordered in
// and out through cached reorder primitives, into host scratch buffers.
#include <cstring>

#include "conv_gemm.hpp"
#include "ops.h"

namespace onednn_engine {

namespace {

struct Out {
  memory mem;
  memory::desc user;
  void* p;
  bool staged;
  void finish() const {
    if (staged) reorder(mem.get_desc(), mem.get_data_handle(), user, p);
  }
};
Out stage_out(Buffers& b, const memory::desc& user, void* p, const memory::desc& want) {
  if (user == want) return Out{memory(want, cpu(), p), user, p, false};
  return Out{memory(want, cpu(), b.alloc(want.get_size())), user, p, true};
}

struct ConvParams {
  memory::dims strides, dilates, pad_l, pad_r;
  int64_t groups = 1;
  int nsp = 2;
};

// `input`/`output` are the forward source and destination. For a transposed
// convolution (oneDNN's deconvolution) the size relation is the convolution's
// with source and destination swapped.
ConvParams params(const sdk::Call& call, int first, const sdk::Tensor& input, const sdk::Tensor& output,
                  const sdk::Tensor& weight, bool transposed) {
  ConvParams p;
  p.nsp = static_cast<int>(input.dim()) - 2;
  auto st = call.int_list(first), pad = call.int_list(first + 1), dil = call.int_list(first + 2);
  p.groups = call.int_arg(first + 5);
  auto pick = [](sdk::Span<int64_t> v, int i) { return v.size() == 1 ? v[0] : v[i]; };
  for (int i = 0; i < p.nsp; ++i) {
    const int64_t s = pick(st, i), pl = pick(pad, i), d = pick(dil, i);
    const int64_t k = weight.size(2 + i), in = input.size(2 + i), out = output.size(2 + i);
    p.strides.push_back(s);
    p.dilates.push_back(d - 1);
    p.pad_l.push_back(pl);
    // The right padding that makes the last window end exactly at the input's
    // end; negative when the stride skips the input's last rows (a stride-2
    // 1x1 convolution of an even size, or a transposed one whose
    // output_padding exceeds its padding). oneDNN rejects negative padding
    // but sizes with a floor, like ATen: (in - k + pl + pr) / s + 1 = out
    // still holds with pr = 0, as ATen's sizes put the deficit below s.
    const int64_t pr = transposed ? (in - 1) * s + (k - 1) * d + 1 - out - pl : (out - 1) * s + (k - 1) * d + 1 - in - pl;
    p.pad_r.push_back(pr < 0 && pr > -s ? 0 : pr);
  }
  return p;
}

// ATen weight [O, I/G, k...] as oneDNN's (grouped: [G, O/G, I/G, k...]) with its
// strides. Transposed: ATen [I, O/G, k...] -> oneDNN [O, I, k...] /
// [G, O/G, I/G, k...], i.e. the first two dims swapped, through strides.
memory::desc weight_md(const sdk::Tensor& w, int64_t groups, bool transposed = false) {
  if (transposed) {
    const int64_t ig = w.size(0) / groups, og = w.size(1);
    memory::dims d, s;
    if (groups > 1) {
      d.push_back(groups);
      s.push_back(ig * w.stride(0));
    }
    d.push_back(og);
    s.push_back(w.stride(1));
    d.push_back(ig);
    s.push_back(w.stride(0));
    for (int64_t i = 2; i < w.dim(); ++i) {
      d.push_back(w.size(i));
      s.push_back(w.stride(i));
    }
    return md_of(w, d, s);
  }
  if (groups == 1) return md_of(w);
  memory::dims d{groups, w.size(0) / groups}, s{(w.size(0) / groups) * w.stride(0), w.stride(0)};
  for (int64_t i = 1; i < w.dim(); ++i) {
    d.push_back(w.size(i));
    s.push_back(w.stride(i));
  }
  return md_of(w, d, s);
}

memory::desc any_like(const memory::desc& m) {
  return memory::desc(m.dims(), m.data_type(), memory::format_tag::any);
}

void check_common(const sdk::Call& call, const sdk::Tensor& input, const sdk::Tensor& weight) {
  dnnl_dt(input.dtype(), "convolution");
  require_primitives(call, input.dtype());
  require_dtype(call, input.dtype(), {weight});
  OPENREG_SDK_REQUIRE(input.dim() >= 3 && input.dim() <= 5 && weight.dim() == input.dim(), call.op_name(),
                      ": 1-3 spatial dims with a batch dim only (got input ", input.describe(), ")");
}

// The primitive families of a convolution and of a transposed one.
struct Conv {
  using Fwd = dnnl::convolution_forward;
  using BwdData = dnnl::convolution_backward_data;
  using BwdWeights = dnnl::convolution_backward_weights;
  static constexpr dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
  static constexpr bool transposed = false;
};
struct Deconv {
  using Fwd = dnnl::deconvolution_forward;
  using BwdData = dnnl::deconvolution_backward_data;
  using BwdWeights = dnnl::deconvolution_backward_weights;
  static constexpr dnnl::algorithm alg = dnnl::algorithm::deconvolution_direct;
  static constexpr bool transposed = true;
};

template <class K>
struct FwdEntry {
  typename K::Fwd::primitive_desc pd;
  typename K::Fwd prim;
};

template <class K>
typename K::Fwd::primitive_desc fwd_pd(const memory::desc& src, const memory::desc& wei, const memory::desc* bias,
                                       const memory::desc& dst, const ConvParams& p, dnnl::prop_kind kind,
                                       bool avoid_brg = false) {
  using D = typename K::Fwd::desc;
  D d = bias ? D(kind, K::alg, any_like(src), any_like(wei), *bias, any_like(dst), p.strides, p.dilates, p.pad_l,
                 p.pad_r)
             : D(kind, K::alg, any_like(src), any_like(wei), any_like(dst), p.strides, p.dilates, p.pad_l, p.pad_r);
  typename K::Fwd::primitive_desc pd(d, base_attr(), cpu());
  if (avoid_brg) {
    // oneDNN 2.6's brgconv forward is 5-8x slower than its jit:avx512_core
    // direct kernel on tiny images (64x1x8x8: 65 vs 8 us): take the next
    // implementation that is not brgconv, if there is one.
    typename K::Fwd::primitive_desc first = pd;
    bool found = false;
    do {
      if (std::strncmp(pd.impl_info_str(), "brg", 3) != 0) {
        found = true;
        break;
      }
    } while (pd.next_impl());
    if (!found) pd = first;
  }
  return pd;
}

Key conv_key(const char* what, const ConvParams& p) {
  Key k(what);
  k.add(p.strides).add(p.dilates).add(p.pad_l).add(p.pad_r).add(p.groups);
  return k;
}

template <class T>
void fill_zero(const sdk::Tensor& t) {
  sdk::unary_map<T>(host(), t, t, [](T) { return 0.0f; });
}



// Multiply-adds of a convolution (or transposed one) times 2: the larger
// activation times the weight's per-output-channel size.
double conv_flops(const sdk::Tensor& x, const sdk::Tensor& y, const sdk::Tensor& w) {
  return 2.0 * static_cast<double>(std::max(x.numel(), y.numel())) * static_cast<double>(w.numel() / w.size(0));
}

// params() maps every size ATen accepts to a padding >= 0; anything else has
// no oneDNN equivalent.
void require_padding(const sdk::Call& call, const ConvParams& p) {
  for (auto r : p.pad_r) OPENREG_SDK_REQUIRE(r >= 0, call.op_name(), ": negative right padding");
}

// Output images up to 8x8 (train.py's 8x8 and 4x4) skip brgconv forward.
constexpr int64_t kSmallImage = 64;
int64_t out_spatial(const sdk::Tensor& y) {
  int64_t n = 1;
  for (int64_t i = 2; i < y.dim(); ++i) n *= y.size(i);
  return n;
}

// A strided 1x1 convolution without padding reads every s-th pixel: the same
// as a stride-1 one over the strided view of the input, which oneDNN 2.6 runs
// far faster (ResNet's downsampling, [8,64,56,56] -> 128: 7.9 ms strided, see
// the README) and whose input reorder reads only the pixels used.
bool strided_1x1(const ConvParams& p, const sdk::Tensor& w) {
  bool strided = false;
  for (int i = 0; i < p.nsp; ++i) {
    if (w.size(2 + i) != 1 || p.pad_l[i] != 0 || p.pad_r[i] != 0) return false;
    strided = strided || p.strides[i] != 1;
  }
  return strided;
}

// A 2-D convolution's parameters for conv_gemm.hpp.
Conv2dGeometry geometry(const ConvParams& p) {
  Conv2dGeometry g;
  for (size_t i = 0; i < 2; ++i) {
    g.stride[i] = p.strides[i];
    g.pad[i] = p.pad_l[i];
    g.dilation[i] = p.dilates[i] + 1;
  }
  return g;
}

template <class K>
void convolution_impl(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0), w = call.tensor(1), y = call.output(0);
  std::optional<sdk::Tensor> bias = call.optional_tensor(2);
  if (y.numel() == 0) return;
  ConvParams p = params(call, 3, x, y, w, K::transposed);
  require_padding(call, p);
  Threads threads(threads_for(conv_flops(x, y, w), kFlopGrain));
  if (!K::transposed && conv_gemm_fits(x, w, y, p.groups, false)) {
    conv_forward_gemm(x, w, bias, y, geometry(p));
    return;
  }
  memory::desc xmd = md_of(x);
  if (!K::transposed && strided_1x1(p, w)) {
    memory::dims d{x.size(0), x.size(1)}, st{x.stride(0), x.stride(1)};
    for (int i = 0; i < p.nsp; ++i) {
      d.push_back(y.size(2 + i));
      st.push_back(x.stride(2 + i) * p.strides[static_cast<size_t>(i)]);
    }
    try {
      xmd = md_of(x, d, st);
      for (auto& s : p.strides) s = 1;
    } catch (const dnnl::error&) {
      // oneDNN 2.6 takes no view whose strided extent passes the next
      // dimension's stride (an odd size: the view's last row would end
      // beyond it): the strided convolution then.
    }
  }
  const memory::desc wmd = weight_md(w, p.groups, K::transposed), ymd = md_of(y);
  const memory::desc bmd = bias ? md_of(*bias) : memory::desc();
  Key k = conv_key(K::transposed ? "deconv_fwd" : "conv_fwd", p);
  k.add(x).add(w).add(y).add(bias ? *bias : sdk::Tensor(nullptr));
  auto e = cached<FwdEntry<K>>(k, [&] {
    auto pd = fwd_pd<K>(xmd, wmd, bias ? &bmd : nullptr, ymd, p, dnnl::prop_kind::forward_inference,
                        out_spatial(y) <= kSmallImage);
    return FwdEntry<K>{pd, typename K::Fwd(pd)};
  });
  Buffers b;
  Args args{{DNNL_ARG_SRC, stage_in(b, xmd, x.bytes(), e->pd.src_desc())},
            {DNNL_ARG_WEIGHTS, stage_in(b, wmd, w.bytes(), e->pd.weights_desc())}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bmd, cpu(), bias->bytes()));
  Out out = stage_out(b, ymd, y.bytes(), e->pd.dst_desc());
  args.emplace(DNNL_ARG_DST, out.mem);
  execute(e->prim, e->pd, std::move(args));
  out.finish();
}

template <class K>
struct BwdDataEntry {
  typename K::BwdData::primitive_desc pd;
  typename K::BwdData prim;
};
template <class K>
struct BwdWeightsEntry {
  typename K::BwdWeights::primitive_desc pd;
  typename K::BwdWeights prim;
};

template <class K>
void convolution_backward_impl(const sdk::Call& call) {
  sdk::Tensor gy = call.tensor(0), x = call.tensor(1), w = call.tensor(2);
  sdk::Tensor gx = call.output(0), gw = call.output(1), gb = call.output(2);
  const bool want_gx = gx.defined() && gx.numel() > 0, want_gw = gw.defined(), want_gb = gb.defined();
  if (x.size(0) == 0 || gy.numel() == 0) {  // no batch or no outputs: every gradient is zero
    dispatch_float(x.dtype(), "convolution_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (want_gx) fill_zero<T>(gx);
      if (want_gw) fill_zero<T>(gw);
      if (want_gb) fill_zero<T>(gb);
    });
    return;
  }
  const ConvParams p = params(call, 4, x, gy, w, K::transposed);
  require_padding(call, p);
  Threads threads(threads_for(conv_flops(x, gy, w), kFlopGrain));
  if (!K::transposed && conv_gemm_fits(x, w, gy, p.groups, true, want_gw ? &gw : nullptr)) {
    conv_backward_gemm(gy, x, w, want_gx ? &gx : nullptr, want_gw ? &gw : nullptr, want_gb ? &gb : nullptr,
                       geometry(p));
    return;
  }
  const memory::desc xmd = md_of(x), wmd = weight_md(w, p.groups, K::transposed), gymd = md_of(gy);
  Key base = conv_key(K::transposed ? "deconv_bwd" : "conv_bwd", p);
  base.add(x).add(w).add(gy);
  // Both primitives are created before anything is written, so a decline
  // (no implementation) leaves the outputs untouched. The forward primitive
  // descriptor is the hint both backward ones need.
  std::shared_ptr<BwdDataEntry<K>> data_e;
  std::shared_ptr<BwdWeightsEntry<K>> weights_e;
  const memory::desc gwmd = want_gw ? weight_md(gw, p.groups, K::transposed) : wmd;
  memory::desc gbmd(memory::dims{gy.size(1)}, dnnl_dt(x.dtype(), "convolution_backward"), memory::dims{1});
  if (want_gb) gbmd = md_of(gb);
  if (want_gx) {
    Key k = base;
    k.add("data").add(gx);
    data_e = cached<BwdDataEntry<K>>(k, [&] {
      auto hint = fwd_pd<K>(xmd, wmd, nullptr, gymd, p, dnnl::prop_kind::forward_training);
      typename K::BwdData::desc d(K::alg, any_like(xmd), any_like(wmd), any_like(gymd), p.strides, p.dilates, p.pad_l,
                                  p.pad_r);
      typename K::BwdData::primitive_desc pd(d, base_attr(), cpu(), hint);
      return BwdDataEntry<K>{pd, typename K::BwdData(pd)};
    });
  }
  if (want_gw || want_gb) {
    // The bias gradient comes with the weights gradient: both are computed,
    // into scratch when one of them was not asked for.
    Key k = base;
    k.add("weights").add(want_gw ? gw : sdk::Tensor(nullptr)).add(want_gb ? gb : sdk::Tensor(nullptr));
    k.add(static_cast<int64_t>(want_gb));
    weights_e = cached<BwdWeightsEntry<K>>(k, [&] {
      auto hint = fwd_pd<K>(xmd, wmd, want_gb ? &gbmd : nullptr, gymd, p, dnnl::prop_kind::forward_training);
      using D = typename K::BwdWeights::desc;
      D d = want_gb ? D(K::alg, any_like(xmd), any_like(gwmd), gbmd, any_like(gymd), p.strides, p.dilates, p.pad_l,
                        p.pad_r)
                    : D(K::alg, any_like(xmd), any_like(gwmd), any_like(gymd), p.strides, p.dilates, p.pad_l, p.pad_r);
      typename K::BwdWeights::primitive_desc pd(d, base_attr(), cpu(), hint);
      return BwdWeightsEntry<K>{pd, typename K::BwdWeights(pd)};
    });
  }
  Buffers b;
  // diff_dst staged for backward-data, reused by backward-weights when both
  // primitives want the same layout (one reorder instead of two).
  std::optional<memory> gy_staged;
  if (data_e) {
    const auto& e = data_e;
    Out out = stage_out(b, md_of(gx), gx.bytes(), e->pd.diff_src_desc());
    gy_staged = stage_in(b, gymd, gy.bytes(), e->pd.diff_dst_desc());
    execute(e->prim, e->pd,
            {{DNNL_ARG_DIFF_DST, *gy_staged},
             {DNNL_ARG_WEIGHTS, stage_in(b, wmd, w.bytes(), e->pd.weights_desc())},
             {DNNL_ARG_DIFF_SRC, out.mem}});
    out.finish();
  }
  if (weights_e) {
    const auto& e = weights_e;
    void* gw_ptr = want_gw ? static_cast<void*>(gw.bytes()) : b.alloc(gwmd.get_size());
    Out out = stage_out(b, gwmd, gw_ptr, e->pd.diff_weights_desc());
    Args args{{DNNL_ARG_SRC, stage_in(b, xmd, x.bytes(), e->pd.src_desc())},
              {DNNL_ARG_DIFF_DST,
               gy_staged && gy_staged->get_desc() == e->pd.diff_dst_desc()
                   ? *gy_staged
                   : stage_in(b, gymd, gy.bytes(), e->pd.diff_dst_desc())},
              {DNNL_ARG_DIFF_WEIGHTS, out.mem}};
    if (want_gb) args.emplace(DNNL_ARG_DIFF_BIAS, memory(gbmd, cpu(), gb.bytes()));
    execute(e->prim, e->pd, std::move(args));
    if (want_gw) out.finish();
  }
}

void check_convolution(const sdk::Call& call) {
  check_common(call, call.tensor(0), call.tensor(1));
  if (auto b = call.optional_tensor(2)) require_dtype(call, call.tensor(0).dtype(), {*b});
}

void check_convolution_backward(const sdk::Call& call) {
  check_common(call, call.tensor(1), call.tensor(2));
  require_dtype(call, call.tensor(1).dtype(), {call.tensor(0)});
}

}  // namespace

void convolution(const sdk::Call& call) {
  check_convolution(call);
  if (call.bool_arg(6)) convolution_impl<Deconv>(call);
  else convolution_impl<Conv>(call);
}

void convolution_backward(const sdk::Call& call) {
  check_convolution_backward(call);
  if (call.bool_arg(7)) convolution_backward_impl<Deconv>(call);
  else convolution_backward_impl<Conv>(call);
}

}  // namespace onednn_engine
