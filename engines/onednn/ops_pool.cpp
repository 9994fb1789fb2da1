// max_pool2d_with_indices(+_backward) and avg_pool2d(+_backward).
//
// Max pooling runs in the engine's own loop: ATen's indices are the flat h*W+w
// offset of the maximum in its input plane (oneDNN's workspace is an opaque
// per-window offset, not convertible cheaply), and NaN must win as in ATen.
// Planes are spread over the host pool, small problems stay on the calling
// thread. Average pooling of float32 runs in loops of its own too (ATen's windows
// and divisors); bfloat16 (on AVX-512) uses oneDNN's pooling primitives
// (include/exclude padding), where ceil-mode windows that would count padding
// beyond the declared padding (ATen and oneDNN disagree there) are declined.
// divisor_override is declined.
#include <cmath>
#include <atomic>
#include <limits>
#include <optional>
#include <type_traits>

#include <openreg/sdk/max_pool.hpp>

#include "isa.hpp"
#include "ops.h"

namespace onednn_engine {

namespace {

struct Pool2d {
  int64_t kH, kW, sH, sW, pH, pW, dH = 1, dW = 1;
};

int64_t pick(sdk::Span<int64_t> v, int i, int64_t fallback) {
  if (v.size() == 0) return fallback;
  return v.size() == 1 ? v[0] : v[i];
}

Pool2d pool_args(const sdk::Call& call, int first, bool dilation) {
  Pool2d p;
  auto k = call.int_list(first), s = call.int_list(first + 1), pad = call.int_list(first + 2);
  p.kH = pick(k, 0, 1);
  p.kW = pick(k, 1, 1);
  p.sH = pick(s, 0, p.kH);
  p.sW = pick(s, 1, p.kW);
  p.pH = pick(pad, 0, 0);
  p.pW = pick(pad, 1, 0);
  if (dilation) {
    auto d = call.int_list(first + 3);
    p.dH = pick(d, 0, 1);
    p.dW = pick(d, 1, 1);
  }
  return p;
}

// Plane p of a 3-d (C,H,W) or 4-d (N,C,H,W) tensor: element offset of (p, 0, 0).
// `uniform`: every plane s_inner after the one before (contiguous NCHW among
// others), so that offset() needs no division: an integer division per plane
// took about a third of the max-pool backward of the digits CNN's 1024 8x8 planes.
struct Planes {
  int64_t count, inner, s_outer, s_inner, sH, sW, H, W;
  bool uniform;
  int64_t offset(int64_t p) const { return uniform ? p * s_inner : (p / inner) * s_outer + (p % inner) * s_inner; }
};
Planes planes(const sdk::Tensor& t) {
  Planes q;
  const int64_t n = t.dim();
  q.H = t.size(n - 2);
  q.W = t.size(n - 1);
  q.sH = t.stride(n - 2);
  q.sW = t.stride(n - 1);
  if (n == 3) {
    q.count = t.size(0);
    q.inner = std::max<int64_t>(t.size(0), 1);
    q.s_outer = 0;
    q.s_inner = t.stride(0);
  } else {
    q.count = t.size(0) * t.size(1);
    q.inner = std::max<int64_t>(t.size(1), 1);
    q.s_outer = t.stride(0);
    q.s_inner = t.stride(1);
  }
  q.uniform = q.count <= q.inner || q.s_outer == q.inner * q.s_inner;
  return q;
}

// The max-pool kernel over planes [b, e). Contiguous float32: 2x2 stride 2 in the SDK's
// vector walk, other windows of contiguous rows in the SDK's row loop (sdk/max_pool.hpp,
// shared with the eigen engine; ResNet-18's [8,64,32,32] k3 s2 p1 on an AVX2 EPYC: 5.2 ms
// baseline, 1.6 ms in AVX2 vectors, torch CPU 5.0 ms); the rest here.
struct MaxPoolArgs {
  const void* x;
  void* y;
  int64_t* ind;
  Planes in, out, idx;
  Pool2d p;
  int64_t OH, OW;
  bool dense;  // input, output and indices contiguous
};

// 2x2 windows of stride 2, no padding or dilation, each inside the input: what the
// scalar 2x2 loop below and the SDK's vector walk read. ceil_mode's last window of an odd height or width hangs over
// the edge (2 * OH > H): the general loop clips it.
bool whole_2x2(const MaxPoolArgs& a) {
  const Pool2d& p = a.p;
  return p.kH == 2 && p.kW == 2 && p.sH == 2 && p.sW == 2 && p.pH == 0 && p.pW == 0 && p.dH == 1 && p.dW == 1 &&
         2 * a.OH <= a.in.H && 2 * a.OW <= a.in.W;
}

// The windows the SDK's loops do not serve (sdk/max_pool.hpp: float32 planes with
// contiguous rows): bfloat16, and float32 of other column strides or planes of more
// than 2^31 elements, a window column at a time over all output columns.
template <class T, class Idx = int64_t>
__attribute__((always_inline)) inline void maxpool_planes(const MaxPoolArgs& a, int64_t b, int64_t e) {
      const int64_t H = a.in.H, W = a.in.W, xsH = a.in.sH, xsW = a.in.sW, ysH = a.out.sH, ysW = a.out.sW, isH = a.idx.sH,
                    isW = a.idx.sW;
      const int64_t sH = a.p.sH, sW = a.p.sW, pH = a.p.pH, pW = a.p.pW, dH = a.p.dH, dW = a.p.dW, kH = a.p.kH, kW = a.p.kW;
      std::vector<float> mb(static_cast<size_t>(a.OW));
      std::vector<Idx> ib(static_cast<size_t>(a.OW));
      float* __restrict mbuf = mb.data();
      Idx* __restrict ibuf = ib.data();
      if (whole_2x2(a) && xsW == 1) {
        // The common 2x2/2 case (bfloat16, and float32 layouts the vector loop
        // declines): four loads and three selects per output.
        for (int64_t pl = b; pl < e; ++pl) {
          const T* __restrict xs = static_cast<const T*>(a.x) + a.in.offset(pl);
          T* __restrict ys = static_cast<T*>(a.y) + a.out.offset(pl);
          int64_t* __restrict is = a.ind + a.idx.offset(pl);
          for (int64_t oh = 0; oh < a.OH; ++oh) {
            const T* r0 = xs + 2 * oh * xsH;
            const int64_t base = 2 * oh * W;
            for (int64_t ow = 0; ow < a.OW; ++ow) {
              float m;
              int64_t i;
              sdk::max_pool::window_max(r0 + 2 * ow, xsH, W, m, i);
              ys[oh * ysH + ow * ysW] = static_cast<T>(m);
              is[oh * isH + ow * isW] = base + 2 * ow + i;
            }
          }
        }
        return;
      }
      for (int64_t pl = b; pl < e; ++pl) {
        const T* __restrict xs = static_cast<const T*>(a.x) + a.in.offset(pl);
        T* __restrict ys = static_cast<T*>(a.y) + a.out.offset(pl);
        int64_t* __restrict is = a.ind + a.idx.offset(pl);
        for (int64_t oh = 0; oh < a.OH; ++oh) {
          int64_t h0 = oh * sH - pH;
          const int64_t h1 = std::min(h0 + (kH - 1) * dH + 1, H);
          while (h0 < 0) h0 += dH;
          // One output row at a time, window element by window element, the
          // output columns innermost: independent lanes instead of one long
          // compare/select dependency chain per output. The visiting order per
          // output stays ATen's (rows, then columns; the first maximum wins).
          for (int64_t ow = 0; ow < a.OW; ++ow) {
            int64_t w0 = ow * sW - pW;
            while (w0 < 0) w0 += dW;
            mbuf[ow] = -std::numeric_limits<float>::infinity();
            ibuf[ow] = static_cast<Idx>(h0 * W + w0);
          }
          for (int64_t h = h0; h < h1; h += dH) {
            const T* row = xs + h * xsH;
            for (int64_t kw = 0; kw < kW; ++kw) {
              const int64_t c = kw * dW - pW;  // w = ow * sW + c
              const int64_t ow_a = c >= 0 ? 0 : (-c + sW - 1) / sW;
              const int64_t ow_b = std::min<int64_t>(a.OW, W - c <= 0 ? 0 : (W - c + sW - 1) / sW);
              int64_t ow = ow_a;
              for (; ow < ow_b; ++ow) {
                const int64_t w = ow * sW + c;
                const float v = static_cast<float>(row[w * xsW]);
                const bool take = (v > mbuf[ow]) | (v != v);  // NaN wins, as in ATen
                mbuf[ow] = take ? v : mbuf[ow];
                ibuf[ow] = take ? static_cast<Idx>(h * W + w) : ibuf[ow];
              }
            }
          }
          for (int64_t ow = 0; ow < a.OW; ++ow) {
            ys[oh * ysH + ow * ysW] = static_cast<T>(mbuf[ow]);
            is[oh * isH + ow * isW] = ibuf[ow];
          }
        }
      }
}

void maxpool_planes_f32(const MaxPoolArgs& a, int64_t b, int64_t e) { maxpool_planes<float>(a, b, e); }
void maxpool_planes_bf16(const MaxPoolArgs& a, int64_t b, int64_t e) { maxpool_planes<sdk::bfloat16>(a, b, e); }
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void maxpool_planes_bf16_avx512(const MaxPoolArgs& a,
                                                                                              int64_t b, int64_t e) {
  maxpool_planes<sdk::bfloat16>(a, b, e);
}
__attribute__((target("avx2,fma"))) void maxpool_planes_bf16_avx2(const MaxPoolArgs& a, int64_t b, int64_t e) {
  maxpool_planes<sdk::bfloat16>(a, b, e);
}
// avx512_core includes F/BW/VL/DQ; ONEDNN_MAX_CPU_ISA caps this loop's choice too.
bool avx512() { return cpu_caps().avx512_core; }

void check_pool_input(const sdk::Call& call, const sdk::Tensor& x) {
  dnnl_dt(x.dtype(), call.op_name().data());
  OPENREG_SDK_REQUIRE(x.dim() == 3 || x.dim() == 4, call.op_name(), ": 3-d or 4-d input only");
}


void check_max_pool2d(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0);
  check_pool_input(call, x);
  require_dtype(call, x.dtype(), {call.output(0)});
  OPENREG_SDK_REQUIRE(sdk::same_dtype(call.output(1).dtype(), sdk::dtypes::int64), call.op_name(), ": int64 indices only");
}
}  // namespace

void max_pool2d_with_indices(const sdk::Call& call) {
  check_max_pool2d(call);
  sdk::Tensor x = call.tensor(0), y = call.output(0), ind = call.output(1);
  const Pool2d p = pool_args(call, 1, true);
  const Planes in = planes(x), out = planes(y), idx = planes(ind);
  const int64_t OH = out.H, OW = out.W;
  if (y.numel() == 0) return;
  const int64_t work = std::max<int64_t>(1, OH * OW * p.kH * p.kW);
  dispatch_float(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = reinterpret_cast<const T*>(x.bytes());
    T* yp = reinterpret_cast<T*>(y.bytes());
    int64_t* ip = ind.data<int64_t>();
    const MaxPoolArgs args{xp, yp, ip, in, out, idx, p, OH, OW, x.is_contiguous() && y.is_contiguous() && ind.is_contiguous()};
    // 2x2 stride 2 of contiguous float32: the SDK's vector walk (sdk/max_pool.hpp).
    std::optional<sdk::max_pool::Dense2x2> dense2x2;
    if constexpr (std::is_same_v<T, float>)
      if (args.dense && whole_2x2(args))
        dense2x2 = sdk::max_pool::Dense2x2{xp, yp, ip, in.H, in.W, OH, OW};
    host().parallel_for(0, in.count, std::max<int64_t>(1, static_cast<int64_t>(kMemGrain) / work), [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        if (dense2x2 && sdk::max_pool::max_pool2x2_f32(vector_isa(), *dense2x2, b, e)) return;
        // Other windows of contiguous rows: the SDK's row loop, in vectors (ResNet's 3x3
        // stride 2 stem pool; sdk/max_pool.hpp).
        if (in.sW == 1) {
          const sdk::max_pool::PlaneWindows windows{in.H, in.W, OH,     OW,     p.kH,   p.kW,  p.sH,  p.sW, p.pH,
                                                    p.pW, p.dH, p.dW, in.sH, out.sH, out.sW, idx.sH, idx.sW};
          auto at = [&](int64_t pl) OPENREG_SDK_ROW_LAMBDA {
            return sdk::max_pool::PlaneStart{xp + in.offset(pl), yp + out.offset(pl), ip + idx.offset(pl)};
          };
          if (sdk::max_pool::max_pool_planes_f32(vector_isa(), windows, b, e, at)) return;
        }
        maxpool_planes_f32(args, b, e);
      } else {
        if (avx512()) maxpool_planes_bf16_avx512(args, b, e);
        else if (cpu_caps().avx2) maxpool_planes_bf16_avx2(args, b, e);
        else maxpool_planes_bf16(args, b, e);
      }
    });
  });
}

namespace {
void check_max_pool2d_backward(const sdk::Call& call) {
  sdk::Tensor g = call.tensor(0), x = call.tensor(1);
  check_pool_input(call, x);
  require_dtype(call, x.dtype(), {g, call.output(0)});
  OPENREG_SDK_REQUIRE(sdk::same_dtype(call.tensor(7).dtype(), sdk::dtypes::int64), call.op_name(), ": int64 indices only");
}
}  // namespace

void max_pool2d_with_indices_backward(const sdk::Call& call) {
  check_max_pool2d_backward(call);
  sdk::Tensor g = call.tensor(0), ind = call.tensor(7), gi = call.output(0);
  const Planes go = planes(g), idx = planes(ind), gin = planes(gi);
  if (gi.numel() == 0) return;
  const int64_t OH = go.H, OW = go.W, HW = gin.H * gin.W;
  const int64_t* ip = ind.data<int64_t>();
  // Indices are checked while scattering (an out-of-range one is an error, not
  // a decline, so the gradient may be left partly written then).
  std::atomic<bool> bad{false};
  dispatch_float(gi.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = reinterpret_cast<const T*>(g.bytes());
    T* op = reinterpret_cast<T*>(gi.bytes());
    // float planes laid out densely are accumulated in place; others (bf16,
    // strided) through a float plane buffer.
    const bool direct = std::is_same_v<T, float> && gin.sW == 1 && gin.sH == gin.W;
    const bool dense = std::is_same_v<T, float> && gi.is_contiguous() && g.is_contiguous() && ind.is_contiguous();
    host().parallel_for(0, gin.count, std::max<int64_t>(1, static_cast<int64_t>(kMemGrain) / std::max<int64_t>(1, HW)), [&](int64_t b, int64_t e) {
      bool oob = false;
      if (dense) {
        // Dense planes: one fill for the whole range, one pass over its outputs.
        float* acc = reinterpret_cast<float*>(op) + b * HW;
        std::fill(acc, acc + (e - b) * HW, 0.0f);
        const int64_t per_plane = OH * OW;
        const float* gs = reinterpret_cast<const float*>(gp) + b * per_plane;
        const int64_t* is = ip + b * per_plane;
        for (int64_t pl = b; pl < e; ++pl, acc += HW, gs += per_plane, is += per_plane)
          for (int64_t k = 0; k < per_plane; ++k) {
            const int64_t i = is[k];
            if (static_cast<uint64_t>(i) >= static_cast<uint64_t>(HW)) {
              oob = true;
              continue;
            }
            acc[i] += gs[k];
          }
        if (oob) bad = true;
        return;
      }
      std::vector<float> buf(direct ? 0 : static_cast<size_t>(HW));
      for (int64_t pl = b; pl < e; ++pl) {
        float* acc = direct ? reinterpret_cast<float*>(op + gin.offset(pl)) : buf.data();
        std::fill(acc, acc + HW, 0.0f);
        const T* gs = gp + go.offset(pl);
        const int64_t* is = ip + idx.offset(pl);
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t i = is[oh * idx.sH + ow * idx.sW];
            if (i < 0 || i >= HW) {
              oob = true;
              continue;
            }
            acc[i] += static_cast<float>(gs[oh * go.sH + ow * go.sW]);
          }
        if (!direct) {
          T* os = op + gin.offset(pl);
          for (int64_t h = 0; h < gin.H; ++h)
            for (int64_t w = 0; w < gin.W; ++w) os[h * gin.sH + w * gin.sW] = static_cast<T>(acc[h * gin.W + w]);
        }
      }
      if (oob) bad = true;
    });
  });
  OPENREG_SDK_CHECK(!bad, "max_pool2d_backward: an index is out of range for ", gin.H, "x", gin.W, " planes");
}

// ------------------------------------------------------------- avg pool

namespace {

struct AvgEntry {
  bool ok = false;
  dnnl::pooling_forward::primitive_desc fpd;
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward::primitive_desc bpd;
  dnnl::pooling_backward bwd;
};

memory::desc pool_md(const sdk::Tensor& t) {
  if (t.dim() == 4) return md_of(t);
  return md_of(t, {1, t.size(0), t.size(1), t.size(2)}, {t.size(0) * t.stride(0), t.stride(0), t.stride(1), t.stride(2)});
}

struct AvgGeom {
  memory::dims strides, kernel, pl, pr;
  bool ok = true;
};

AvgGeom avg_geom(const Pool2d& p, int64_t H, int64_t W, int64_t OH, int64_t OW, bool include_pad) {
  AvgGeom g;
  g.strides = {p.sH, p.sW};
  g.kernel = {p.kH, p.kW};
  g.pl = {p.pH, p.pW};
  const int64_t in[2] = {H, W}, out[2] = {OH, OW}, k[2] = {p.kH, p.kW}, s[2] = {p.sH, p.sW}, pad[2] = {p.pH, p.pW};
  for (int i = 0; i < 2; ++i) {
    int64_t r = (out[i] - 1) * s[i] + k[i] - in[i] - pad[i];
    // A negative right padding only means the last rows are not covered; any
    // value in [r, r + s - 1] gives the same windows.
    if (r < 0 && r + s[i] - 1 >= 0) r = 0;
    if (r < 0 || (include_pad && r > pad[i])) g.ok = false;  // ATen counts padding up to `pad` only
    g.pr.push_back(r);
  }
  return g;
}

std::shared_ptr<AvgEntry> avg_entry(const sdk::Call& call, const sdk::Tensor& x, const sdk::Tensor& y, const Pool2d& p,
                                    bool include_pad, bool backward) {
  const int64_t n = x.dim();
  const AvgGeom g = avg_geom(p, x.size(n - 2), x.size(n - 1), y.size(n - 2), y.size(n - 1), include_pad);
  OPENREG_SDK_REQUIRE(g.ok, call.op_name(), ": ceil_mode windows reach past the padding with count_include_pad "
                                            "(ATen's divisor differs from oneDNN's there)");
  const memory::desc xmd = pool_md(x), ymd = pool_md(y);
  Key k(backward ? "avgpool_bwd" : "avgpool_fwd");
  k.add(x).add(y).add(g.strides).add(g.kernel).add(g.pl).add(g.pr).add(static_cast<int64_t>(include_pad));
  auto e = cached<AvgEntry>(k, [&] {
    AvgEntry r;
    const auto alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
    try {
      dnnl::pooling_forward::desc fd(backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, alg,
                                     xmd, ymd, g.strides, g.kernel, g.pl, g.pr);
      r.fpd = dnnl::pooling_forward::primitive_desc(fd, base_attr(), cpu());
      if (backward) {
        dnnl::pooling_backward::desc bd(alg, xmd, ymd, g.strides, g.kernel, g.pl, g.pr);
        r.bpd = dnnl::pooling_backward::primitive_desc(bd, base_attr(), cpu(), r.fpd);
        r.bwd = dnnl::pooling_backward(r.bpd);
      } else {
        r.fwd = dnnl::pooling_forward(r.fpd);
      }
      r.ok = true;
    } catch (const dnnl::error&) {
    }
    return r;
  });
  OPENREG_SDK_REQUIRE(e->ok, call.op_name(), ": oneDNN has no pooling for this geometry");
  return e;
}


// float32 average pooling as plain loops over planes (any strides), ATen's windows
// and divisors: oneDNN 2.6's pooling on plain NCHW took 2-3.5x torch CPU's time
// (8x32x32x32, k2 s2, one AVX2 thread: 1331-2366 us, torch CPU 627-677).
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  float divisor;  // 0: an empty window (its output is 0)
};
AvgWindow avg_window(const Pool2d& p, int64_t H, int64_t W, int64_t oh, int64_t ow, bool include_pad) {
  int64_t h0 = oh * p.sH - p.pH, w0 = ow * p.sW - p.pW;
  int64_t h1 = std::min(h0 + p.kH, H + p.pH), w1 = std::min(w0 + p.kW, W + p.pW);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  if (h0 >= h1 || w0 >= w1) return {h0, h1, w0, w1, 0.0f};
  return {h0, h1, w0, w1, static_cast<float>(include_pad ? padded : (h1 - h0) * (w1 - w0))};
}

void avg_pool_loops(const sdk::Tensor& x, const sdk::Tensor& y, const Pool2d& p, bool include_pad) {
  const Planes px = planes(x), py = planes(y);
  const float* xd = x.data<float>();
  float* yd = y.data<float>();
  const int64_t grain = std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(px.H * px.W, 1));
  host().parallel_for(0, px.count, grain, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const float* xs = xd + px.offset(pl);
      float* ys = yd + py.offset(pl);
      for (int64_t oh = 0; oh < py.H; ++oh)
        for (int64_t ow = 0; ow < py.W; ++ow) {
          const AvgWindow w = avg_window(p, px.H, px.W, oh, ow, include_pad);
          float sum = 0.0f;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) sum += xs[h * px.sH + c * px.sW];
          ys[oh * py.sH + ow * py.sW] = w.divisor == 0.0f ? 0.0f : sum / w.divisor;
        }
    }
  });
}

// gi (zeroed here) gets each output gradient divided by its window's divisor, added
// over the window.
void avg_pool_backward_loops(const sdk::Tensor& g, const sdk::Tensor& gi, const Pool2d& p, bool include_pad) {
  const Planes pg = planes(g), pi = planes(gi);
  const float* gd = g.data<float>();
  float* id = gi.data<float>();
  const int64_t grain = std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(pi.H * pi.W, 1));
  host().parallel_for(0, pi.count, grain, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const float* gs = gd + pg.offset(pl);
      float* is = id + pi.offset(pl);
      for (int64_t h = 0; h < pi.H; ++h)
        for (int64_t c = 0; c < pi.W; ++c) is[h * pi.sH + c * pi.sW] = 0.0f;
      for (int64_t oh = 0; oh < pg.H; ++oh)
        for (int64_t ow = 0; ow < pg.W; ++ow) {
          const AvgWindow w = avg_window(p, pi.H, pi.W, oh, ow, include_pad);
          if (w.divisor == 0.0f) continue;
          const float v = gs[oh * pg.sH + ow * pg.sW] / w.divisor;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) is[h * pi.sH + c * pi.sW] += v;
        }
    }
  });
}

void check_avg_pool2d(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0);
  check_pool_input(call, x);
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {call.output(0)});
  OPENREG_SDK_REQUIRE(call.is_none(6), call.op_name(), ": divisor_override is not served");
  OPENREG_SDK_REQUIRE(is_f32(x.dtype()) || !has_zero_stride(x), call.op_name(), ": expanded input");
}
}  // namespace

void avg_pool2d(const sdk::Call& call) {
  check_avg_pool2d(call);
  sdk::Tensor x = call.tensor(0), y = call.output(0);
  if (y.numel() == 0) return;
  const Pool2d p = pool_args(call, 1, false);
  if (is_f32(x.dtype())) return avg_pool_loops(x, y, p, call.bool_arg(5));
  auto e = avg_entry(call, x, y, p, call.bool_arg(5), false);
  execute(e->fwd, e->fpd, {{DNNL_ARG_SRC, make_mem(x, pool_md(x))}, {DNNL_ARG_DST, make_mem(y, pool_md(y))}});
}

namespace {
void check_avg_pool2d_backward(const sdk::Call& call) {
  sdk::Tensor g = call.tensor(0), x = call.tensor(1);
  check_pool_input(call, x);
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {g, call.output(0)});
  OPENREG_SDK_REQUIRE(call.is_none(7), call.op_name(), ": divisor_override is not served");
  // The loops read any strides (a gradient of .sum() is expanded); the primitive not.
  OPENREG_SDK_REQUIRE(is_f32(x.dtype()) || !has_zero_stride(g), call.op_name(), ": expanded gradient");
}
}  // namespace

void avg_pool2d_backward(const sdk::Call& call) {
  check_avg_pool2d_backward(call);
  sdk::Tensor g = call.tensor(0), gi = call.output(0);
  if (gi.numel() == 0) return;
  const Pool2d p = pool_args(call, 2, false);
  if (g.numel() == 0) {
    dispatch_float(gi.dtype(), "avg_pool2d_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sdk::unary_map<T>(host(), gi, gi, [](T) { return 0.0f; });
    });
    return;
  }
  if (is_f32(gi.dtype())) return avg_pool_backward_loops(g, gi, p, call.bool_arg(6));
  auto e = avg_entry(call, gi, g, p, call.bool_arg(6), true);
  execute(e->bwd, e->bpd, {{DNNL_ARG_DIFF_DST, make_mem(g, pool_md(g))}, {DNNL_ARG_DIFF_SRC, make_mem(gi, pool_md(gi))}});
}

}  // namespace onednn_engine
