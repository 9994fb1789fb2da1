// 2-d convolution (forward and backward, groups, stride, padding, dilation) as
// im2col + Eigen GEMM (the float32 forward: im2col panels and the ISA
// micro-kernel, conv_forward_panels), and max_pool2d_with_indices forward/backward.
// float32 and float64. Strided tensors are packed to contiguous scratch first. Work is split
// over images of the batch through the host's parallel_for; each GEMM is
// single-threaded (or split by columns when the batch is smaller than the pool).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <openreg/sdk/max_pool.hpp>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

// Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, through the col-major core.
template <class T>
void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
             T beta, T* C, int64_t ldc) {
  gemm<T>(tb, ta, N, M, K, T(1), B, ldb, A, lda, beta, C, ldc);
}

struct ConvGeom {
  int64_t N, C, H, W, O, kh, kw, Ho, Wo, sh, sw, ph, pw, dh, dw, groups;
  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t P() const { return Ho * Wo; }
  int64_t CKK() const { return Cg() * kh * kw; }
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

int64_t pair_at(sdk::Span<int64_t> v, int64_t i, int64_t def) {
  if (v.empty()) return def;
  return v.size() == 1 ? v[0] : v[i];
}

ConvGeom geometry(const Call& call, const Tensor& in, const Tensor& w, int first) {
  ConvGeom g{};
  g.N = in.size(0);
  g.C = in.size(1);
  g.H = in.size(2);
  g.W = in.size(3);
  g.O = w.size(0);
  g.kh = w.size(2);
  g.kw = w.size(3);
  sdk::Span<int64_t> st = call.int_list(first), pd = call.int_list(first + 1), dl = call.int_list(first + 2);
  g.sh = pair_at(st, 0, 1);
  g.sw = pair_at(st, 1, 1);
  g.ph = pair_at(pd, 0, 0);
  g.pw = pair_at(pd, 1, 0);
  g.dh = pair_at(dl, 0, 1);
  g.dw = pair_at(dl, 1, 1);
  g.groups = call.int_arg(first + 5);
  OPENREG_SDK_CHECK(g.groups > 0 && g.C % g.groups == 0 && g.O % g.groups == 0 && w.size(1) == g.C / g.groups,
                    call.op_name(), ": weight ", w.describe(), " does not match input ", in.describe(), " with groups ",
                    g.groups);
  OPENREG_SDK_CHECK(g.sh > 0 && g.sw > 0 && g.dh > 0 && g.dw > 0, call.op_name(), ": bad stride or dilation");
  g.Ho = (g.H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

// col[(c*kh + i)*kw + j][oh*Wo + ow] = x[c][oh*sh - ph + i*dh][ow*sw - pw + j*dw]
template <class T>
void im2col(const ConvGeom& g, const T* x, T* col, int64_t ld) {
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const T* plane = x + c * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          T* r = row + oh * g.Wo;
          if (ih < 0 || ih >= g.H) {
            for (int64_t ow = 0; ow < g.Wo; ++ow) r[ow] = T(0);
            continue;
          }
          const T* src = plane + ih * g.W;
          const int64_t off = j * g.dw - g.pw;
          if (g.sw == 1) {
            // ow valid where 0 <= ow + off < W; plain loops (rows are short on small images)
            const int64_t lo = std::clamp<int64_t>(-off, 0, g.Wo), hi = std::clamp<int64_t>(g.W - off, lo, g.Wo);
            int64_t ow = 0;
            for (; ow < lo; ++ow) r[ow] = T(0);
            const T* sp = src + off;
            for (; ow < hi; ++ow) r[ow] = sp[ow];
            for (; ow < g.Wo; ++ow) r[ow] = T(0);
          } else {
            // ow valid where 0 <= ow*sw + off < W: zeros, a strided copy, zeros
            // (no bounds test per element: the 7x7 stride-2 stem spent more here than in its GEMM).
            const int64_t lo = std::clamp<int64_t>(off < 0 ? (-off + g.sw - 1) / g.sw : 0, 0, g.Wo);
            const int64_t hi = std::clamp<int64_t>(g.W - off > 0 ? (g.W - off + g.sw - 1) / g.sw : 0, lo, g.Wo);
            int64_t ow = 0;
            for (; ow < lo; ++ow) r[ow] = T(0);
            const T* sp = src + off;
            for (; ow < hi; ++ow) r[ow] = sp[ow * g.sw];
            for (; ow < g.Wo; ++ow) r[ow] = T(0);
          }
        }
      }
}

// x[c][ih][iw] += col[...] (the adjoint of im2col); x is zeroed by the caller.
template <class T>
void col2im(const ConvGeom& g, const T* col, int64_t ld, T* x) {
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        T* plane = x + c * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T* r = row + oh * g.Wo;
          T* dst = plane + ih * g.W;
          const int64_t off = j * g.dw - g.pw;
          if (g.sw == 1) {
            const int64_t lo = std::clamp<int64_t>(-off, 0, g.Wo), hi = std::clamp<int64_t>(g.W - off, lo, g.Wo);
            T* dp = dst + off;
            for (int64_t ow = lo; ow < hi; ++ow) dp[ow] += r[ow];
          } else {
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const int64_t iw = ow * g.sw + off;
              if (iw >= 0 && iw < g.W) dst[iw] += r[ow];
            }
          }
        }
      }
}

// Below this many multiply-adds per thread a convolution runs on the calling
// thread: waking the pool costs 10-50 us, more than a small convolution.
constexpr int64_t kConvWorkPerThread = int64_t(1) << 20;

// Splits [0, n) into at most host.num_threads() chunks and runs body(chunk, begin, end).
template <class Body>
void chunks(const sdk::Host& host, int64_t n, int64_t work_per_item, Body body) {
  const int64_t nt = std::max<int64_t>(1, host.num_threads());
  const int64_t want = std::min<int64_t>(nt, std::max<int64_t>(1, n * work_per_item / kConvWorkPerThread));
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(want, n));
  const int64_t per = (n + k - 1) / k;
  if (k == 1) {
    body(0, 0, n);
    return;
  }
  host.parallel_for(0, k, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = c * per, e = std::min(n, b + per);
      if (b < e) body(c, b, e);
    }
  });
}

// Images per GEMM: all images of a thread's chunk share one GEMM (im2col
// columns side by side), up to about 2M elements of im2col scratch.
int64_t images_per_gemm(const ConvGeom& g, int64_t n) {
  const int64_t per = std::max<int64_t>(1, g.CKK() * g.P());
  return std::max<int64_t>(1, std::min<int64_t>(n, (int64_t(1) << 21) / per));
}

// Stride 1, dilation 1, small padding: the "padded-width" layout. Each image's
// channels are copied into a zero-padded plane of Hp x Wp, and the output is
// computed on a grid of Ho x Wp (the last Wp - Wo columns of each row are junk and
// dropped), so every im2col row of an image is ONE contiguous span of the padded
// plane (a memcpy of Ho*Wp elements) instead of Ho short rows with bounds checks.
// The GEMM grows by Wp/Wo (limited to 1.5x here); on small images (8x8, 4x4) the
// short-row im2col cost several times the GEMM.
struct Padded {
  int64_t Hp, Wp, plane, Pp, buf;  // buf: elements of one image's padded group (+ slack)
};
bool padded_layout(const ConvGeom& g, Padded& pd) {
  if (g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 || g.ph < 0 || g.pw < 0) return false;
  pd.Hp = g.H + 2 * g.ph;
  pd.Wp = g.W + 2 * g.pw;
  if (g.Ho != pd.Hp - g.kh + 1 || g.Wo != pd.Wp - g.kw + 1 || g.Wo <= 0 || g.Ho <= 0) return false;
  if (2 * pd.Wp > 3 * g.Wo) return false;  // too much junk
  pd.plane = pd.Hp * pd.Wp;
  pd.Pp = g.Ho * pd.Wp;
  pd.buf = g.Cg() * pd.plane + g.kw;
  return true;
}

// xp[c][ph + h][pw + w] = x[c][h][w], zero elsewhere (xp holds pd.buf elements).
template <class T>
void pad_image(const ConvGeom& g, const Padded& pd, const T* x, T* xp) {
  std::fill(xp, xp + pd.buf, T(0));
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t h = 0; h < g.H; ++h)
      std::memcpy(xp + c * pd.plane + (h + g.ph) * pd.Wp + g.pw, x + (c * g.H + h) * g.W, sizeof(T) * static_cast<size_t>(g.W));
}

// col[(c*kh + i)*kw + j][t] = xp[c][i*Wp + j + t], t < Ho*Wp
template <class T>
void im2col_padded(const ConvGeom& g, const Padded& pd, const T* xp, T* col, int64_t ld) {
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j)
        std::memcpy(col + ((c * g.kh + i) * g.kw + j) * ld, xp + c * pd.plane + i * pd.Wp + j,
                    sizeof(T) * static_cast<size_t>(pd.Pp));
}

template <class T>
bool all_finite(const T* p, int64_t n) {
  return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, n).allFinite();
}

// float32 forward through the ISA micro-kernel (IsaKernels::panel_gemm_f32): the
// output columns (image, oh, ow) of a thread's chunk in panels of panel_cols. Each
// panel's im2col block is packed straight from a zero-padded copy of the input
// (per kernel tap, one copy per output-row segment of the panel, no bounds test),
// multiplied by the weight rows in place, and written to the output with the bias.
// One pass over the data instead of im2col, GEMM packing and an output copy: on
// ResNet-18's 16x16 .. 2x2 images that overhead (and the padded-width layout's
// junk columns) made the Eigen GEMM path 1.5-2x oneDNN's direct convolution.
struct PanelSeg {
  int64_t col, src, dst, len;  // panel column; offset in the padded chunk; offset in the output; columns
};

// d[0, len) = s[0, len): the lengths of output rows get unrolled copies (short
// rows, called once per kernel tap and panel: a loop with a run-time count cost
// as much as a tenth of the micro-kernel).
template <int L>
inline void copy_fixed(float* d, const float* s) {
  std::memcpy(d, s, sizeof(float) * L);  // a constant size: inline vector moves
}
inline void copy_run(float* d, const float* s, int64_t len) {
  switch (len) {
    case 1: d[0] = s[0]; return;
    case 2: return copy_fixed<2>(d, s);
    case 4: return copy_fixed<4>(d, s);
    case 7: return copy_fixed<7>(d, s);
    case 8: return copy_fixed<8>(d, s);
    case 14: return copy_fixed<14>(d, s);
    case 16: return copy_fixed<16>(d, s);
    case 28: return copy_fixed<28>(d, s);
    case 32: return copy_fixed<32>(d, s);
    default:
      for (int64_t t = 0; t < len; ++t) d[t] = s[t];
  }
}

// y = conv(x, w) + b on contiguous NCHW / OIHW buffers (b may be null).
void conv_panels(const sdk::Host& host, const ConvGeom& g, const float* x, const float* wp, const float* bp, float* y) {
  const IsaKernels& kern = isa();
  const int64_t NR = kern.panel_cols, P = g.P(), CKK = g.CKK(), Og = g.Og(), Cg = g.Cg();
  const bool pad = g.ph > 0 || g.pw > 0;
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, plane = Hp * Wp;
  // offset of tap (c, i, j) in a padded image
  std::vector<int64_t> delta(static_cast<size_t>(CKK));
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) delta[static_cast<size_t>((c * g.kh + i) * g.kw + j)] = c * plane + i * g.dh * Wp + j * g.dw;
  // images padded at a time: up to about 2M elements of padded copy
  const int64_t per_pad = pad ? std::max<int64_t>(1, (int64_t(1) << 21) / std::max<int64_t>(1, g.C * plane)) : g.N;
  chunks(host, g.N, g.O * P * CKK, [&](int64_t, int64_t b, int64_t e) {
    auto xs = host.scratch(pad ? sizeof(float) * std::min(per_pad, e - b) * g.C * plane : 0);
    auto bs = host.scratch(sizeof(float) * CKK * NR);
    auto cs = host.scratch(sizeof(float) * Og * NR);
    float* panel = bs.template as<float>();
    float* cb = cs.template as<float>();
    std::vector<PanelSeg> segs;
    for (int64_t n0 = b; n0 < e; n0 += per_pad) {
      const int64_t nimg = std::min(per_pad, e - n0), cols = nimg * P;
      const float* xp = x + n0 * g.C * g.H * g.W;
      if (pad) {
        float* d = xs.template as<float>();
        std::fill(d, d + nimg * g.C * plane, 0.0f);
        for (int64_t c = 0; c < nimg * g.C; ++c)
          for (int64_t h = 0; h < g.H; ++h)
            std::memcpy(d + c * plane + (h + g.ph) * Wp + g.pw, xp + (c * g.H + h) * g.W, sizeof(float) * static_cast<size_t>(g.W));
        xp = d;
      }
      for (int64_t c0 = 0; c0 < cols; c0 += NR) {
        const int64_t nc = std::min(NR, cols - c0);
        segs.clear();
        for (int64_t t = c0; t < c0 + nc;) {  // runs of columns within one output row
          const int64_t n = t / P, q = t % P, oh = q / g.Wo, ow = q % g.Wo;
          const int64_t len = std::min(g.Wo - ow, c0 + nc - t);
          segs.push_back({t - c0, n * g.C * plane + oh * g.sh * Wp + ow * g.sw, (n0 + n) * g.O * P + q, len});
          t += len;
        }
        if (nc < NR) std::fill(panel, panel + CKK * NR, 0.0f);
        for (int64_t gi = 0; gi < g.groups; ++gi) {
          const float* xg = xp + gi * Cg * plane;
          for (const PanelSeg& sg : segs) {
            const float* src = xg + sg.src;
            float* d = panel + sg.col;
            if (g.sw == 1)
              for (int64_t k = 0; k < CKK; ++k) copy_run(d + k * NR, src + delta[static_cast<size_t>(k)], sg.len);
            else
              for (int64_t k = 0; k < CKK; ++k) {
                const float* s = src + delta[static_cast<size_t>(k)];
                float* dd = d + k * NR;
                for (int64_t t = 0; t < sg.len; ++t) dd[t] = s[t * g.sw];
              }
          }
          kern.panel_gemm_f32(Og, CKK, wp + gi * Og * CKK, CKK, panel, cb);
          if (bp)
            for (int64_t o = 0; o < Og; ++o) {
              float* s = cb + o * NR;
              const float bv = bp[gi * Og + o];
              for (int64_t t = 0; t < nc; ++t) s[t] += bv;
            }
          for (const PanelSeg& sg : segs) {
            float* d = y + sg.dst + gi * Og * P;
            const float* s = cb + sg.col;
            for (int64_t o = 0; o < Og; ++o) copy_run(d + o * P, s + o * NR, sg.len);
          }
        }
      }
    }
  });
}

// A forward convolution's operands as dense arrays: each tensor itself when it is
// contiguous, else a copy in scratch; y is the output's memory, or scratch that
// finish() copies back into the output.
template <class T>
class DenseForward {
 public:
  explicit DenseForward(const Call& call)
      : host_(call.host()),
        in_(call.tensor(0)),
        w_(call.tensor(1)),
        out_(call.output(0)),
        bias_(call.optional_tensor(2)),
        si_(host_.scratch(contiguous_bytes(in_))),
        sw_(host_.scratch(contiguous_bytes(w_))),
        sb_(host_.scratch(bias_ ? contiguous_bytes(*bias_) : 0)),
        so_(host_.scratch(contiguous_bytes(out_))),
        x(as_contiguous<T>(host_, in_, si_)),
        w(as_contiguous<T>(host_, w_, sw_)),
        b(bias_ ? as_contiguous<T>(host_, *bias_, sb_) : nullptr),
        y(out_.is_contiguous() ? out_.data<T>() : so_.template as<T>()) {}
  void finish() const { copy_back<T>(host_, out_, y); }

 private:
  const sdk::Host& host_;
  Tensor in_, w_, out_;
  std::optional<Tensor> bias_;
  sdk::Host::Scratch si_, sw_, sb_, so_;

 public:
  const T* const x;  // input
  const T* const w;  // weight
  const T* const b;  // bias, or null
  T* const y;        // output
};

void conv_forward_panels(const Call& call, const ConvGeom& g) {
  const DenseForward<float> ops(call);
  conv_panels(call.host(), g, ops.x, ops.w, ops.b, ops.y);
  ops.finish();
}

// The input gradient of a stride-1, dilation-1, ungrouped float32 convolution
// with padding below the kernel size is itself such a convolution: gY padded by
// k-1-p, weights flipped and transposed (gX[c] = sum_o W[o][c] flipped * gY[o]).
// Used only with finite weights: the padded zeros meet every weight (0 * inf).
// Measured (1 thread, gX alone): ResNet-18's 16x16, 8x8, 4x4 stages 2.1-2.6 ->
// 1.6-2.4 ms; but with 512 channels on 2x2 images (32 columns per weight) the
// weight transpose doubled the time, and one input channel leaves the kernel one
// row: those keep im2col + GEMM.
bool grad_input_as_conv(const ConvGeom& g) {
  return g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.groups == 1 && g.ph >= 0 && g.pw >= 0 &&
         g.ph < g.kh && g.pw < g.kw && g.C >= 16 && g.N * g.Ho * g.Wo >= 64;
}
void grad_input_panels(const sdk::Host& host, const ConvGeom& g, const float* gy, const float* wp, float* gx) {
  ConvGeom t = g;
  t.C = g.O;
  t.H = g.Ho;
  t.W = g.Wo;
  t.O = g.C;
  t.ph = g.kh - 1 - g.ph;
  t.pw = g.kw - 1 - g.pw;
  t.Ho = g.H;
  t.Wo = g.W;
  auto ws = host.scratch(sizeof(float) * g.O * g.C * g.kh * g.kw);
  float* wt = ws.template as<float>();  // wt[c][o][i][j] = w[o][c][kh-1-i][kw-1-j]
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          wt[((c * g.O + o) * g.kh + i) * g.kw + j] = wp[((o * g.C + c) * g.kh + (g.kh - 1 - i)) * g.kw + (g.kw - 1 - j)];
  conv_panels(host, t, gy, wt, nullptr, gx);
}

template <class T>
void conv_forward_t(const Call& call, const ConvGeom& g) {
  const sdk::Host& host = call.host();
  const DenseForward<T> ops(call);
  const T *x = ops.x, *wp = ops.w, *bp = ops.b;
  T* y = ops.y;
  const int64_t P = g.P(), CKK = g.CKK(), Og = g.Og(), Cg = g.Cg();
  Padded pd{};
  if (padded_layout(g, pd)) {
    chunks(host, g.N, g.O * P * CKK, [&](int64_t, int64_t b, int64_t e) {
      const int64_t sbn = std::max<int64_t>(1, std::min<int64_t>(e - b, (int64_t(1) << 21) / std::max<int64_t>(1, CKK * pd.Pp)));
      auto col = host.scratch(sizeof(T) * CKK * pd.Pp * sbn);
      auto yb = host.scratch(sizeof(T) * Og * pd.Pp * sbn);
      auto xps = host.scratch(sizeof(T) * pd.buf);
      T* xp = xps.template as<T>();
      for (int64_t n0 = b; n0 < e; n0 += sbn) {
        const int64_t nb = std::min(sbn, e - n0), ld = nb * pd.Pp;
        for (int64_t gi = 0; gi < g.groups; ++gi) {
          for (int64_t j = 0; j < nb; ++j) {
            pad_image(g, pd, x + ((n0 + j) * g.C + gi * Cg) * g.H * g.W, xp);
            im2col_padded(g, pd, xp, col.template as<T>() + j * pd.Pp, ld);
          }
          gemm_rm<T>(false, false, Og, ld, CKK, wp + gi * Og * CKK, CKK, col.template as<T>(), ld, T(0),
                     yb.template as<T>(), ld);
          for (int64_t j = 0; j < nb; ++j)
            for (int64_t o = 0; o < Og; ++o) {
              const T* src = yb.template as<T>() + o * ld + j * pd.Pp;
              T* dst = y + ((n0 + j) * g.O + gi * Og + o) * P;
              const T bv = bp ? bp[gi * Og + o] : T(0);
              for (int64_t oh = 0; oh < g.Ho; ++oh) {
                const T* s = src + oh * pd.Wp;
                T* d = dst + oh * g.Wo;
                if (bp)
                  for (int64_t ow = 0; ow < g.Wo; ++ow) d[ow] = s[ow] + bv;
                else
                  for (int64_t ow = 0; ow < g.Wo; ++ow) d[ow] = s[ow];
              }
            }
        }
      }
    });
    ops.finish();
    return;
  }
  chunks(host, g.N, g.O * P * CKK, [&](int64_t, int64_t b, int64_t e) {
    const int64_t sbn = images_per_gemm(g, e - b);
    auto col = host.scratch(sizeof(T) * CKK * P * sbn);
    auto yb = host.scratch(sizeof(T) * Og * P * sbn);
    for (int64_t n0 = b; n0 < e; n0 += sbn) {
      const int64_t nb = std::min(sbn, e - n0), ld = nb * P;
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        for (int64_t j = 0; j < nb; ++j)
          im2col(g, x + ((n0 + j) * g.C + gi * Cg) * g.H * g.W, col.template as<T>() + j * P, ld);
        gemm_rm<T>(false, false, Og, ld, CKK, wp + gi * Og * CKK, CKK, col.template as<T>(), ld, T(0),
                   yb.template as<T>(), ld);
        for (int64_t j = 0; j < nb; ++j)
          for (int64_t o = 0; o < Og; ++o) {
            const T* src = yb.template as<T>() + o * ld + j * P;
            T* dst = y + ((n0 + j) * g.O + gi * Og + o) * P;
            if (bp) {
              const T bv = bp[gi * Og + o];
              for (int64_t q = 0; q < P; ++q) dst[q] = src[q] + bv;
            } else {
              std::memcpy(dst, src, sizeof(T) * static_cast<size_t>(P));
            }
          }
      }
    }
  });
  ops.finish();
}

template <class T>
void conv_backward_t(const Call& call, const ConvGeom& g, const std::vector<bool>& mask) {
  const sdk::Host& host = call.host();
  Tensor go = call.tensor(0), in = call.tensor(1), w = call.tensor(2);
  Tensor gi_t = call.output(0), gw_t = call.output(1), gb_t = call.output(2);
  const bool want_i = mask[0] && gi_t.defined(), want_w = mask[1] && gw_t.defined(), want_b = mask[2] && gb_t.defined();
  auto sgo = host.scratch(contiguous_bytes(go));
  auto si = host.scratch(want_w ? contiguous_bytes(in) : 0);
  auto sw = host.scratch(want_i ? contiguous_bytes(w) : 0);
  const T* gy = as_contiguous<T>(host, go, sgo);
  const T* x = want_w ? as_contiguous<T>(host, in, si) : nullptr;
  const T* wp = want_i ? as_contiguous<T>(host, w, sw) : nullptr;
  const int64_t P = g.P(), CKK = g.CKK(), Og = g.Og(), Cg = g.Cg();

  if (want_b) {
    auto s = host.scratch(sizeof(T) * g.O);
    T* gb = s.template as<T>();
    for (int64_t o = 0; o < g.O; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < g.N; ++n)
        acc += Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(gy + (n * g.O + o) * P, P).template cast<double>().sum();
      gb[o] = static_cast<T>(acc);
    }
    copy_back<T>(host, gb_t, gb);
  }
  if (!want_i && !want_w) return;

  auto so = host.scratch(want_i ? contiguous_bytes(gi_t) : 0);
  T* gx = want_i ? (gi_t.is_contiguous() ? gi_t.data<T>() : so.template as<T>()) : nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (gx && grad_input_as_conv(g) && all_finite(wp, g.O * CKK)) {
      grad_input_panels(host, g, gy, wp, gx);
      copy_back<T>(host, gi_t, gx);
      gx = nullptr;
      if (!want_w) return;
    }
  }
  const int64_t wsz = g.O * CKK;
  const int64_t nt = std::max<int64_t>(1, host.num_threads());
  auto parts = host.scratch(want_w ? sizeof(T) * wsz * nt : 0);
  T* part = want_w ? parts.template as<T>() : nullptr;
  if (part) std::fill(part, part + wsz * nt, T(0));
  std::vector<char> used(static_cast<size_t>(nt), 0);
  // Padded-width path: junk columns of gY are zero, so they add nothing to gW or
  // gX as long as the other factor is finite there (0 * inf would be NaN).
  Padded pd{};
  if (padded_layout(g, pd) && (!want_w || all_finite(x, g.N * g.C * g.H * g.W)) &&
      (!gx || all_finite(wp, g.O * CKK))) {
    chunks(host, g.N, g.O * P * CKK, [&](int64_t chunk, int64_t b, int64_t e) {
      used[static_cast<size_t>(chunk)] = 1;
      const int64_t sbn = std::max<int64_t>(1, std::min<int64_t>(e - b, (int64_t(1) << 21) / std::max<int64_t>(1, CKK * pd.Pp)));
      auto col = host.scratch(sizeof(T) * CKK * pd.Pp * sbn);
      auto gyb = host.scratch(sizeof(T) * Og * pd.Pp * sbn);
      auto xps = host.scratch(sizeof(T) * pd.buf);
      T* xp = xps.template as<T>();
      T* cb = col.template as<T>();
      T* gb = gyb.template as<T>();
      T* acc = part ? part + chunk * wsz : nullptr;
      for (int64_t n0 = b; n0 < e; n0 += sbn) {
        const int64_t nb = std::min(sbn, e - n0), ld = nb * pd.Pp;
        for (int64_t gr = 0; gr < g.groups; ++gr) {
          // gY of this group as [Og, nb * Ho * Wp], junk columns zero
          for (int64_t o = 0; o < Og; ++o)
            for (int64_t j = 0; j < nb; ++j) {
              const T* src = gy + ((n0 + j) * g.O + gr * Og + o) * P;
              T* dst = gb + o * ld + j * pd.Pp;
              for (int64_t oh = 0; oh < g.Ho; ++oh) {
                T* d = dst + oh * pd.Wp;
                const T* sp = src + oh * g.Wo;
                for (int64_t ow = 0; ow < g.Wo; ++ow) d[ow] = sp[ow];
                for (int64_t ow = g.Wo; ow < pd.Wp; ++ow) d[ow] = T(0);
              }
            }
          if (acc) {  // gW[Og, CKK] += gY[Og, ld] @ col^T[ld, CKK]
            for (int64_t j = 0; j < nb; ++j) {
              pad_image(g, pd, x + ((n0 + j) * g.C + gr * Cg) * g.H * g.W, xp);
              im2col_padded(g, pd, xp, cb + j * pd.Pp, ld);
            }
            gemm_rm<T>(false, true, Og, CKK, ld, gb, ld, cb, ld, T(1), acc + gr * Og * CKK, CKK);
          }
          if (gx) {  // col[CKK, ld] = W^T[CKK, Og] @ gY[Og, ld], then scatter-add per image
            gemm_rm<T>(true, false, CKK, ld, Og, wp + gr * Og * CKK, CKK, gb, ld, T(0), cb, ld);
            for (int64_t j = 0; j < nb; ++j) {
              std::fill(xp, xp + pd.buf, T(0));
              for (int64_t c = 0; c < Cg; ++c)
                for (int64_t i = 0; i < g.kh; ++i)
                  for (int64_t q = 0; q < g.kw; ++q) {
                    const T* r = cb + ((c * g.kh + i) * g.kw + q) * ld + j * pd.Pp;
                    T* d = xp + c * pd.plane + i * pd.Wp + q;
                    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(d, pd.Pp) +=
                        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(r, pd.Pp);
                  }
              T* xg = gx + ((n0 + j) * g.C + gr * Cg) * g.H * g.W;
              for (int64_t c = 0; c < Cg; ++c)
                for (int64_t h = 0; h < g.H; ++h)
                  std::memcpy(xg + (c * g.H + h) * g.W, xp + c * pd.plane + (h + g.ph) * pd.Wp + g.pw,
                              sizeof(T) * static_cast<size_t>(g.W));
            }
          }
        }
      }
    });
  } else
  chunks(host, g.N, g.O * P * CKK, [&](int64_t chunk, int64_t b, int64_t e) {
    used[static_cast<size_t>(chunk)] = 1;
    const int64_t sbn = images_per_gemm(g, e - b);
    auto col = host.scratch(sizeof(T) * CKK * P * sbn);
    auto gyb = host.scratch(sizeof(T) * Og * P * sbn);
    T* acc = part ? part + chunk * wsz : nullptr;
    for (int64_t n0 = b; n0 < e; n0 += sbn) {
      const int64_t nb = std::min(sbn, e - n0), ld = nb * P;
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        // gY of this group as [Og, nb * P]
        for (int64_t j = 0; j < nb; ++j)
          for (int64_t o = 0; o < Og; ++o)
            std::memcpy(gyb.template as<T>() + o * ld + j * P, gy + ((n0 + j) * g.O + gr * Og + o) * P,
                        sizeof(T) * static_cast<size_t>(P));
        if (acc) {  // gW[Og, CKK] += gY[Og, ld] @ col^T[ld, CKK]
          for (int64_t j = 0; j < nb; ++j)
            im2col(g, x + ((n0 + j) * g.C + gr * Cg) * g.H * g.W, col.template as<T>() + j * P, ld);
          gemm_rm<T>(false, true, Og, CKK, ld, gyb.template as<T>(), ld, col.template as<T>(), ld, T(1),
                     acc + gr * Og * CKK, CKK);
        }
        if (gx) {  // col[CKK, ld] = W^T[CKK, Og] @ gY[Og, ld], then col2im per image
          gemm_rm<T>(true, false, CKK, ld, Og, wp + gr * Og * CKK, CKK, gyb.template as<T>(), ld, T(0),
                     col.template as<T>(), ld);
          for (int64_t j = 0; j < nb; ++j) {
            T* xg = gx + ((n0 + j) * g.C + gr * Cg) * g.H * g.W;
            std::fill(xg, xg + Cg * g.H * g.W, T(0));
            col2im(g, col.template as<T>() + j * P, ld, xg);
          }
        }
      }
    }
  });
  if (gx) copy_back<T>(host, gi_t, gx);
  if (part) {
    for (int64_t c = 1; c < nt; ++c)
      if (used[static_cast<size_t>(c)])
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(part, wsz) +=
            Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(part + c * wsz, wsz);
    copy_back<T>(host, gw_t, part);
  }
}

void check_conv_common(const Call& call, const Tensor& in, const Tensor& w, int transposed_idx) {
  OPENREG_SDK_REQUIRE(!call.bool_arg(transposed_idx), call.op_name(), ": transposed convolution");
  OPENREG_SDK_REQUIRE(in.dim() == 4 && w.dim() == 4, call.op_name(), ": only 2-d convolution (4-d input and weight), got ",
                      in.dim(), "-d input");
  require_dtype(call, in, w, "weight");
  // No input channels (the output is the bias alone): the geometry below assumes some.
  OPENREG_SDK_REQUIRE(in.size(1) > 0 && w.size(1) > 0, call.op_name(), ": no input channels, input ", in.describe(),
                      " (left to the next engine)");
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
void check_convolution(const Call& call) {
  Tensor in = call.tensor(0), w = call.tensor(1);
  check_conv_common(call, in, w, 6);
  require_dtype(call, in, call.output(0), "output");
  if (auto b = call.optional_tensor(2)) require_dtype(call, in, *b, "bias");
}

}  // namespace

void convolution(const Call& call) {
  check_convolution(call);
  Tensor in = call.tensor(0), w = call.tensor(1), out = call.output(0);
  ConvGeom g = geometry(call, in, w, 3);
  OPENREG_SDK_CHECK(out.dim() == 4 && out.size(0) == g.N && out.size(1) == g.O && out.size(2) == g.Ho &&
                        out.size(3) == g.Wo,
                    call.op_name(), ": output ", out.describe(), " does not match the convolution");
  if (out.numel() == 0) return;
  sdk::dispatch<float, double>(in.dtype(), "convolution", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      if (g.ph >= 0 && g.pw >= 0) return conv_forward_panels(call, g);
    }
    conv_forward_t<T>(call, g);
  });
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
//                      transposed, output_padding, groups, output_mask)
void convolution_backward(const Call& call) {
  Tensor go = call.tensor(0), in = call.tensor(1), w = call.tensor(2);
  check_conv_common(call, in, w, 7);
  require_dtype(call, in, go, "grad_output");
  for (int i = 0; i < 3; ++i)
    if (call.output(i).defined()) require_dtype(call, in, call.output(i), "output");
  std::vector<bool> mask = bool_list(call, 10);
  mask.resize(3, false);
  ConvGeom g = geometry(call, in, w, 4);
  OPENREG_SDK_CHECK(go.dim() == 4 && go.size(0) == g.N && go.size(1) == g.O && go.size(2) == g.Ho &&
                        go.size(3) == g.Wo,
                    call.op_name(), ": grad_output ", go.describe(), " does not match the convolution");
  sdk::dispatch<float, double>(in.dtype(), "convolution_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_backward_t<T>(call, g, mask);
  });
}

// ------------------------------------------------------------ max pooling
namespace {
struct PoolGeom {
  int64_t planes, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw;
};

PoolGeom pool_geometry(const Call& call, const Tensor& in, const Tensor& out, int first, bool has_dilation = true) {
  OPENREG_SDK_REQUIRE(in.dim() == 3 || in.dim() == 4, call.op_name(), ": input of ", in.dim(), " dims");
  PoolGeom p{};
  p.H = in.size(-2);
  p.W = in.size(-1);
  p.planes = in.numel() / std::max<int64_t>(1, p.H * p.W);
  if (p.H * p.W == 0) p.planes = 0;
  sdk::Span<int64_t> k = call.int_list(first), s = call.int_list(first + 1), pd = call.int_list(first + 2),
                     dl = has_dilation ? call.int_list(first + 3) : sdk::Span<int64_t>{};
  p.kh = pair_at(k, 0, 1);
  p.kw = pair_at(k, 1, 1);
  p.sh = s.empty() ? p.kh : pair_at(s, 0, 1);
  p.sw = s.empty() ? p.kw : pair_at(s, 1, 1);
  p.ph = pair_at(pd, 0, 0);
  p.pw = pair_at(pd, 1, 0);
  p.dh = pair_at(dl, 0, 1);
  p.dw = pair_at(dl, 1, 1);
  p.Ho = out.size(-2);
  p.Wo = out.size(-1);
  return p;
}

template <class T>
inline T select_bits(bool take, T a, T b) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U ua, ub;
  std::memcpy(&ua, &a, sizeof(T));
  std::memcpy(&ub, &b, sizeof(T));
  const U m = static_cast<U>(0) - static_cast<U>(take);
  const U r = (ua & m) | (ub & ~m);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}

template <class T>
void max_pool_t(const Call& call, const PoolGeom& p) {
  const sdk::Host& host = call.host();
  Tensor in = call.tensor(0), out = call.output(0), idx = call.output(1);
  auto si = host.scratch(contiguous_bytes(in));
  auto so = host.scratch(contiguous_bytes(out));
  auto sx = host.scratch(contiguous_bytes(idx));
  const T* x = as_contiguous<T>(host, in, si);
  T* y = out.is_contiguous() ? out.data<T>() : so.template as<T>();
  int64_t* ix = idx.is_contiguous() ? idx.data<int64_t>() : sx.template as<int64_t>();
  const int64_t HW = p.H * p.W, HoWo = p.Ho * p.Wo;
  // One thread below ~128K window reads: a pool wake-up costs more than the work.
  const int64_t grain = std::max<int64_t>(1, 4 * sdk::kParallelGrain / std::max<int64_t>(1, HoWo * p.kh * p.kw));
  const bool k2s2 = p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0 && p.dh == 1 &&
                    p.dw == 1 && 2 * p.Ho <= p.H && 2 * p.Wo <= p.W;
  if (k2s2) {
    // 2x2 windows, stride 2 (the usual max_pool2d(2)), the same order and NaN rule as
    // the generic loop (scan h then w; a greater value or a NaN takes over): float32
    // in the SDK's vector walk (sdk/max_pool.hpp), else (double, an odd output width)
    // a window at a time.
    host.parallel_for(0, p.planes, grain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        if (sdk::max_pool::max_pool2x2_f32(sdk_vector_isa(), {x, y, ix, p.H, p.W, p.Ho, p.Wo}, b, e)) return;
      }
      for (int64_t pl = b; pl < e; ++pl) {
        const T* src = x + pl * HW;
        T* dst = y + pl * HoWo;
        int64_t* id = ix + pl * HoWo;
        for (int64_t oh = 0; oh < p.Ho; ++oh) {
          const T* r0 = src + 2 * oh * p.W;
          const int64_t base = 2 * oh * p.W;
          for (int64_t ow = 0; ow < p.Wo; ++ow) {
            sdk::max_pool::WindowValue<T> best;
            int64_t k;
            sdk::max_pool::window_max(r0 + 2 * ow, p.W, p.W, best, k);
            dst[oh * p.Wo + ow] = best;
            id[oh * p.Wo + ow] = base + 2 * ow + k;
          }
        }
      }
    });
    copy_back<T>(host, out, y);
    copy_back<int64_t>(host, idx, ix);
    return;
  }
  const bool k3 = p.kh == 3 && p.kw == 3 && p.dh == 1 && p.dw == 1;
  const sdk::max_pool::PlaneWindows windows{p.H,  p.W,  p.Ho, p.Wo, p.kh, p.kw, p.sh, p.sw, p.ph,
                                            p.pw, p.dh, p.dw, p.W,  p.Wo, 1,    p.Wo, 1};
  host.parallel_for(0, p.planes, grain,
                    [&](int64_t b, int64_t e) {
                      // float32: the SDK's row loop, in vectors (sdk/max_pool.hpp); else (double,
                      // or a plane too large for int32 indices) a window at a time below
                      if constexpr (std::is_same_v<T, float>) {
                        auto at = [&](int64_t pl) OPENREG_SDK_ROW_LAMBDA {
                          return sdk::max_pool::PlaneStart{x + pl * HW, y + pl * HoWo, ix + pl * HoWo};
                        };
                        if (sdk::max_pool::max_pool_planes_f32(sdk_vector_isa(), windows, b, e, at)) return;
                      }
                      for (int64_t pl = b; pl < e; ++pl) {
                        const T* src = x + pl * HW;
                        T* dst = y + pl * HoWo;
                        int64_t* id = ix + pl * HoWo;
                        for (int64_t oh = 0; oh < p.Ho; ++oh) {
                          int64_t h0 = oh * p.sh - p.ph;
                          int64_t hend = std::min(h0 + (p.kh - 1) * p.dh + 1, p.H);
                          while (h0 < 0) h0 += p.dh;
                          const bool rows_in = k3 && h0 + 3 == hend;  // not clipped at the top or bottom
                          for (int64_t ow = 0; ow < p.Wo; ++ow) {
                            int64_t w0 = ow * p.sw - p.pw;
                            if (rows_in && w0 >= 0 && w0 + 3 <= p.W) {
                              // a 3x3 window inside the image (ResNet's stem pool): unrolled,
                              // the same scan order and NaN rule as below
                              const T* r = src + h0 * p.W + w0;
                              T best = r[0];
                              int64_t k = 0;
                              for (int i = 0; i < 3; ++i)
                                for (int j = (i == 0 ? 1 : 0); j < 3; ++j) {
                                  const T v = r[i * p.W + j];
                                  const bool t = (v > best) | (v != v);
                                  best = t ? v : best;  // branches here measured faster than bit masks
                                  k = t ? i * p.W + j : k;
                                }
                              dst[oh * p.Wo + ow] = best;
                              id[oh * p.Wo + ow] = h0 * p.W + w0 + k;
                              continue;
                            }
                            int64_t wend = std::min(w0 + (p.kw - 1) * p.dw + 1, p.W);
                            while (w0 < 0) w0 += p.dw;
                            int64_t best_i = h0 * p.W + w0;
                            T best = -std::numeric_limits<T>::infinity();
                            for (int64_t h = h0; h < hend; h += p.dh)
                              for (int64_t w = w0; w < wend; w += p.dw) {
                                const T v = src[h * p.W + w];
                                // as ATen: NaN wins, the last NaN's index. Bit masks keep it
                                // branch-free (random data makes a branch mispredict often).
                                const bool take = (v > best) | (v != v);
                                best = select_bits(take, v, best);
                                const int64_t m = -static_cast<int64_t>(take);
                                best_i = ((h * p.W + w) & m) | (best_i & ~m);
                              }
                            dst[oh * p.Wo + ow] = best;
                            id[oh * p.Wo + ow] = best_i;
                          }
                        }
                      }
                    });
  copy_back<T>(host, out, y);
  copy_back<int64_t>(host, idx, ix);
}

template <class T>
void max_pool_backward_t(const Call& call, const PoolGeom& p) {
  const sdk::Host& host = call.host();
  Tensor go = call.tensor(0), idx = call.tensor(7), gi = call.output(0);
  auto sg = host.scratch(contiguous_bytes(go));
  auto sx = host.scratch(contiguous_bytes(idx));
  auto so = host.scratch(contiguous_bytes(gi));
  const T* g = as_contiguous<T>(host, go, sg);
  const int64_t* ix = as_contiguous<int64_t>(host, idx, sx);
  T* out = gi.is_contiguous() ? gi.data<T>() : so.template as<T>();
  const int64_t HW = p.H * p.W, HoWo = p.Ho * p.Wo;
  host.parallel_for(0, p.planes, std::max<int64_t>(1, 4 * sdk::kParallelGrain / std::max<int64_t>(1, HW + HoWo)),
                    [&](int64_t b, int64_t e) {
                      for (int64_t pl = b; pl < e; ++pl) {
                        T* dst = out + pl * HW;
                        std::fill(dst, dst + HW, T(0));
                        const T* src = g + pl * HoWo;
                        const int64_t* id = ix + pl * HoWo;
                        for (int64_t i = 0; i < HoWo; ++i) {
                          const int64_t k = id[i];
                          if (k >= 0 && k < HW) dst[k] += src[i];
                        }
                      }
                    });
  copy_back<T>(host, gi, out);
}
// avg_pool2d window of output (oh, ow): clipped bounds and divisor, as ATen.
struct AvgWin {
  int64_t h0, h1, w0, w1;
  double div;
};
AvgWin avg_window(const PoolGeom& p, int64_t oh, int64_t ow, bool include_pad, int64_t divisor) {
  int64_t h0 = oh * p.sh - p.ph, w0 = ow * p.sw - p.pw;
  int64_t h1 = std::min(h0 + p.kh, p.H + p.ph), w1 = std::min(w0 + p.kw, p.W + p.pw);
  const int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, p.H);
  w1 = std::min(w1, p.W);
  double div = divisor ? static_cast<double>(divisor) : include_pad ? static_cast<double>(pool)
                                                                     : static_cast<double>((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, div};
}

template <class T>
void avg_pool_t(const Call& call, const PoolGeom& p, bool backward) {
  const sdk::Host& host = call.host();
  const int base = backward ? 1 : 0;
  const bool include_pad = call.bool_arg(base + 5);
  const int64_t divisor = call.is_none(base + 6) ? 0 : call.int_arg(base + 6);
  Tensor src_t = backward ? call.tensor(0) : call.tensor(0), dst_t = call.output(0);
  auto ss = host.scratch(contiguous_bytes(src_t));
  auto sd = host.scratch(contiguous_bytes(dst_t));
  const T* src = as_contiguous<T>(host, src_t, ss);
  T* dst = dst_t.is_contiguous() ? dst_t.data<T>() : sd.template as<T>();
  const int64_t HW = p.H * p.W, HoWo = p.Ho * p.Wo;
  host.parallel_for(0, p.planes, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(1, HW + HoWo)),
                    [&](int64_t b, int64_t e) {
                      for (int64_t pl = b; pl < e; ++pl) {
                        if (backward) std::fill(dst + pl * HW, dst + (pl + 1) * HW, T(0));
                        for (int64_t oh = 0; oh < p.Ho; ++oh)
                          for (int64_t ow = 0; ow < p.Wo; ++ow) {
                            const AvgWin w = avg_window(p, oh, ow, include_pad, divisor);
                            if (!backward) {
                              T acc = 0;
                              for (int64_t h = w.h0; h < w.h1; ++h)
                                for (int64_t x = w.w0; x < w.w1; ++x) acc += src[pl * HW + h * p.W + x];
                              dst[pl * HoWo + oh * p.Wo + ow] =
                                  (w.h0 >= w.h1 || w.w0 >= w.w1) ? T(0) : static_cast<T>(acc / static_cast<T>(w.div));
                            } else {
                              const T g = src[pl * HoWo + oh * p.Wo + ow] / static_cast<T>(w.div);
                              for (int64_t h = w.h0; h < w.h1; ++h)
                                for (int64_t x = w.w0; x < w.w1; ++x) dst[pl * HW + h * p.W + x] += g;
                            }
                          }
                      }
                    });
  copy_back<T>(host, dst_t, dst);
}
}  // namespace

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
void avg_pool2d(const Call& call) {
  Tensor in = call.tensor(0), out = call.output(0);
  require_dtype(call, in, out, "output");
  PoolGeom p = pool_geometry(call, in, out, 1, false);
  if (out.numel() == 0) return;
  sdk::dispatch<float, double>(in.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_t<T>(call, p, false);
  });
}

// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
//                     count_include_pad, divisor_override)
void avg_pool2d_backward(const Call& call) {
  Tensor go = call.tensor(0), in = call.tensor(1), gi = call.output(0);
  require_dtype(call, in, go, "grad_output");
  require_dtype(call, in, gi, "grad_input");
  PoolGeom p = pool_geometry(call, in, go, 2, false);
  if (gi.numel() == 0) return;
  sdk::dispatch<float, double>(in.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_t<T>(call, p, true);
  });
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
void max_pool2d(const Call& call) {
  Tensor in = call.tensor(0), out = call.output(0), idx = call.output(1);
  require_dtype(call, in, out, "output");
  OPENREG_SDK_REQUIRE(sdk::same_dtype(idx.dtype(), sdk::dtypes::int64), call.op_name(), ": indices not int64");
  PoolGeom p = pool_geometry(call, in, out, 1);
  if (out.numel() == 0) return;
  sdk::dispatch<float, double>(in.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_t<T>(call, p);
  });
}

// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
//                                  ceil_mode, indices)
void max_pool2d_backward(const Call& call) {
  Tensor go = call.tensor(0), in = call.tensor(1), idx = call.tensor(7), gi = call.output(0);
  require_dtype(call, in, go, "grad_output");
  require_dtype(call, in, gi, "grad_input");
  OPENREG_SDK_REQUIRE(sdk::same_dtype(idx.dtype(), sdk::dtypes::int64), call.op_name(), ": indices not int64");
  PoolGeom p = pool_geometry(call, in, go, 2);
  if (gi.numel() == 0) return;
  sdk::dispatch<float, double>(in.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_backward_t<T>(call, p);
  });
}

}  // namespace eigen_engine
