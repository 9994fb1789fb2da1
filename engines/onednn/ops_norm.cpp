// native_batch_norm(+_backward) and native_layer_norm(+_backward) on oneDNN's
// normalization primitives. Per-channel vectors (weight, bias, statistics, of
// whatever float dtype they arrive in) go through float scratch; ATen's extras
// are done here: save_invstd = 1/sqrt(var + eps), running statistics updated
// with momentum and the unbiased variance. The backward primitives get
// var = 1/invstd^2 with eps = 0, so they use exactly the saved invstd/rstd.
// native_group_norm(+_backward): the SDK's loops (openreg/sdk/group_norm.hpp;
// oneDNN 2.6 has no group normalization primitive).
#include <openreg/sdk/group_norm.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "vec.hpp"

namespace onednn_engine {

namespace {

using Flags = dnnl::normalization_flags;

memory::desc vec_md(int64_t n) { return memory::desc({n}, dt::f32, memory::dims{1}); }

// Batch norm data descriptor: 2-d (N, C) inputs are seen as N x C x 1 x 1
// (oneDNN's 2-d batch norm crashed in testing) and 3-d (N, C, L) ones as
// N x C x 1 x L (oneDNN 2.6 has JIT batch norm kernels for 4-d and 5-d data
// only: 3-d ran its reference kernel).
memory::dims bn_dims(const memory::dims& d) {
  if (d.size() == 2) return {d[0], d[1], 1, 1};
  if (d.size() == 3) return {d[0], d[1], 1, d[2]};
  return d;
}
memory::desc bn_md(const sdk::Tensor& t) {
  if (t.dim() == 2) return md_of(t, {t.size(0), t.size(1), 1, 1}, {t.stride(0), t.stride(1), 1, 1});
  if (t.dim() == 3) return md_of(t, {t.size(0), t.size(1), 1, t.size(2)}, {t.stride(0), t.stride(1), 1, t.stride(2)});
  return md_of(t);
}
// oneDNN 2.6's batch norm is JIT-compiled for channel-blocked layouts only; on
// plain NCHW it runs a C++ kernel ~10x slower (64x16x8x8, one thread: forward
// 93 us vs 9 us, backward 130 us vs 11 us; a reorder in or out costs ~5 us).
// So the primitive works on nC[d][h]w16c copies with AVX-512 and nC[d][h]w8c
// below it: the AVX2 kernel blocks by 8 channels, and on 16c copies oneDNN ran
// its reference kernel (bnorm_ref:any; 64x16x8x8 forward 2.9 ms instead of 50 us
// with ONEDNN_MAX_CPU_ISA=AVX2).
int bn_channel_block() { return cpu_caps().avx512_core ? 16 : 8; }
memory::desc bn_blocked(const memory::desc& plain) {
  const auto dims = plain.dims();
  using tag = memory::format_tag;
  const bool by16 = bn_channel_block() == 16;
  const tag t = dims.size() == 4 ? (by16 ? tag::nChw16c : tag::nChw8c) : (by16 ? tag::nCdhw16c : tag::nCdhw8c);
  return memory::desc(dims, plain.data_type(), t);
}

memory::desc bn_plain(const sdk::Tensor& t) {
  return plain_md(bn_dims(dims_of(t)), dnnl_dt(t.dtype(), "batch_norm"));
}

struct BnFwdEntry {
  dnnl::batch_normalization_forward::primitive_desc pd;
  dnnl::batch_normalization_forward prim;
};
struct BnBwdEntry {
  dnnl::batch_normalization_backward::primitive_desc pd;
  dnnl::batch_normalization_backward prim;
};
struct LnFwdEntry {
  dnnl::layer_normalization_forward::primitive_desc pd;
  dnnl::layer_normalization_forward prim;
};
struct LnBwdEntry {
  dnnl::layer_normalization_backward::primitive_desc pd;
  dnnl::layer_normalization_backward prim;
};

void fill(float* p, int64_t n, float v) { std::fill(p, p + n, v); }

bool out_ok(const sdk::Tensor& t) { return !t.defined() || t.numel() == 0 || t.dim() <= 1 || t.is_contiguous(); }

}  // namespace

// ---------------------------------------------------------------- batch norm

namespace {
void check_batch_norm(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0), y = call.output(0);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {y});
  OPENREG_SDK_REQUIRE(x.dim() >= 2 && x.dim() <= 5, call.op_name(), ": 2-5 dims only");
  OPENREG_SDK_REQUIRE(x.numel() > 0, call.op_name(), ": empty input");
  OPENREG_SDK_REQUIRE(!has_zero_stride(x) && !has_zero_stride(y), call.op_name(), ": expanded tensors");
  OPENREG_SDK_REQUIRE(call.bool_arg(5) || (!call.is_none(3) && !call.is_none(4)), call.op_name(),
                      ": eval mode without running statistics");
  for (int i = 1; i < 3; ++i) OPENREG_SDK_REQUIRE(out_ok(call.output(i)), call.op_name(), ": strided statistics output");
}
}  // namespace

namespace {
// Eval mode on contiguous float32 data: with the running statistics, the op is
// per channel y = x * alpha + beta (alpha = w / sqrt(var + eps), beta = b - mean *
// alpha, as ATen's CPU kernel computes it), one streaming pass over plain NCHW
// planes. The primitive needed a reorder in and out of its blocked layout around
// it: [8, 64, 32, 32] took 368 us against torch CPU's 85.
bool eval_plain_ok(const sdk::Tensor& x, const sdk::Tensor& y) {
  return is_f32(x.dtype()) && x.is_contiguous() && y.is_contiguous();
}

void batch_norm_eval_plain(const sdk::Tensor& x, const sdk::Tensor& y, const float* scale, const float* shift,
                           const float* mean, const float* var, double eps, Buffers& buf) {
  const int64_t N = x.size(0), C = x.size(1), plane = N * C > 0 ? x.numel() / (N * C) : 0;
  float *alpha = buf.floats(C), *beta = buf.floats(C);
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
    alpha[c] = static_cast<float>(invstd * scale[c]);
    beta[c] = static_cast<float>(shift[c] - mean[c] * invstd * scale[c]);
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t planes = N * C;
  const int threads = static_cast<int>(std::min<int64_t>(current_threads(), planes));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float a = alpha[p % C], b = beta[p % C];
    const float* in = xp + p * plane;
    float* out = yp + p * plane;
    for (int64_t i = 0; i < plane; ++i) out[i] = in[i] * a + b;
  }
}
}  // namespace

namespace {
// Training-mode statistics, computed here: oneDNN 2.6's batch norm sums a channel in
// float, and its mean and variance drift from torch CPU's by far more than CPU's own
// rounding (64 channels of [8, 16, 32, 32], 2026-12-03, AVX2: mean error against
// float64 5.4e-8 against CPU's 6.6e-10; with every value offset by 100 the mean's
// error 2.8e-4 against 3.8e-6 and y off CPU's by 2.9e-4; offset by 1e4, 1.7e-2 against
// 4.8e-4 and y off by 1.8e-2, where eigen's two passes in double match CPU's mean).
// One pass over the primitive's channel-blocked copy (nC[d]hw8c or 16c: a block's
// channels innermost, one vector), summing each channel's values and squares shifted
// by its first value (the shifted-data variance: no cancellation for values far from
// 0 as long as they sit near that one), in float over runs of kRun positions and the
// runs in double. The primitive then normalises with them (use_global_stats).
constexpr int64_t kRun = 16;

// sum[l] and sq[l] += the shifted sums of one block row of S positions, float32; a
// position's kBlock channels one vector (vec.hpp's types: the block is the width of
// the clone that runs, 8 with AVX2 and 16 with AVX-512; the baseline clone holds 8 in
// two registers, on CPUs without AVX2 only).
#define OPENREG_ONEDNN_BN_ROW(NAME, ATTR)                                                            \
  template <int kBlock>                                                                               \
  ATTR void NAME(const float* x, int64_t S, const float* shift, double* sum, double* sq) {            \
    using V = std::conditional_t<kBlock == 8, vec::V8, vec::V16>;                                     \
    const V sh = vec::load<V>(shift);                                                                 \
    for (int64_t i0 = 0; i0 < S; i0 += kRun) {                                                        \
      V run = {}, run_sq = {};                                                                        \
      const int64_t i1 = i0 + kRun < S ? i0 + kRun : S;                                               \
      for (int64_t i = i0; i < i1; ++i) {                                                             \
        const V d = vec::load<V>(x + i * kBlock) - sh;                                                \
        run += d;                                                                                     \
        run_sq += d * d;                                                                              \
      }                                                                                               \
      for (int l = 0; l < kBlock; ++l) {                                                              \
        sum[l] += run[l];                                                                             \
        sq[l] += run_sq[l];                                                                           \
      }                                                                                               \
    }                                                                                                 \
  }
OPENREG_ONEDNN_BN_ROW(bn_row_sse, )
OPENREG_ONEDNN_BN_ROW(bn_row_avx2, OPENREG_TARGET_AVX2)
OPENREG_ONEDNN_BN_ROW(bn_row_avx512, OPENREG_TARGET_AVX512)
#undef OPENREG_ONEDNN_BN_ROW

template <int kBlock>
void bn_row(const float* x, int64_t S, const float* shift, double* sum, double* sq) {
  switch (loops::width()) {
    case loops::Width::Avx512: return bn_row_avx512<kBlock>(x, S, shift, sum, sq);
    case loops::Width::Avx2: return bn_row_avx2<kBlock>(x, S, shift, sum, sq);
    case loops::Width::Sse: return bn_row_sse<kBlock>(x, S, shift, sum, sq);
  }
}

// The statistics of C channels of N x S positions in `data`, a float32 blocked copy,
// or a bfloat16 one (with AVX-512 only; its rows widened to float32 first).
template <int kBlock>
void blocked_channel_stats(const char* data, bool bf16, int64_t N, int64_t C, int64_t S, float* mean, float* var) {
  const int64_t blocks = (C + kBlock - 1) / kBlock, count = N * S;
  const int64_t per_block = count * kBlock;
  const size_t elem = bf16 ? 2 : 4;
  host().parallel_for(0, blocks, std::max<int64_t>(1, static_cast<int64_t>(kMemGrain) / std::max<int64_t>(per_block, 1)),
                      [&](int64_t b0, int64_t b1) {
    std::vector<float> widened(bf16 ? static_cast<size_t>(S * kBlock) : 0);
    auto row = [&](int64_t n, int64_t cb) -> const float* {
      const char* r = data + static_cast<size_t>((n * blocks + cb) * S * kBlock) * elem;
      if (!bf16) return reinterpret_cast<const float*>(r);
      const uint16_t* h = reinterpret_cast<const uint16_t*>(r);
      for (size_t i = 0; i < widened.size(); ++i) {
        const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;  // bfloat16: a float's upper half
        std::memcpy(&widened[i], &bits, sizeof(float));
      }
      return widened.data();
    };
    for (int64_t cb = b0; cb < b1; ++cb) {
      double sum[kBlock] = {}, sq[kBlock] = {};
      float shift[kBlock];
      std::copy_n(row(0, cb), kBlock, shift);
      for (int64_t n = 0; n < N; ++n) bn_row<kBlock>(row(n, cb), S, shift, sum, sq);
      for (int l = 0; l < kBlock && cb * kBlock + l < C; ++l) {
        const double m = sum[l] / static_cast<double>(count);
        mean[cb * kBlock + l] = static_cast<float>(shift[l] + m);
        var[cb * kBlock + l] = static_cast<float>(std::max(0.0, sq[l] / static_cast<double>(count) - m * m));
      }
    }
  });
}

// `data`: a copy laid out as bn_blocked gives.
void channel_stats(const memory::desc& blocked, const void* data, float* mean, float* var) {
  const memory::dims d = blocked.dims();
  int64_t S = 1;
  for (size_t i = 2; i < d.size(); ++i) S *= d[i];
  const char* p = static_cast<const char*>(data);
  const bool bf16 = blocked.data_type() == dt::bf16;
  if (bn_channel_block() == 16) return blocked_channel_stats<16>(p, bf16, d[0], d[1], S, mean, var);
  blocked_channel_stats<8>(p, bf16, d[0], d[1], S, mean, var);
}
}  // namespace

void batch_norm(const sdk::Call& call) {
  check_batch_norm(call);
  sdk::Tensor x = call.tensor(0), y = call.output(0), save_mean = call.output(1), save_invstd = call.output(2);
  auto w = call.optional_tensor(1), b = call.optional_tensor(2), rm = call.optional_tensor(3), rv = call.optional_tensor(4);
  const bool training = call.bool_arg(5);
  const double momentum = call.double_arg(6), eps = call.double_arg(7);
  const int64_t C = x.size(1), count = x.numel() / C;
  Buffers buf;
  float *scale = buf.floats(C), *shift = buf.floats(C), *mean = buf.floats(C), *var = buf.floats(C);
  if (w) to_float_vec(*w, scale); else fill(scale, C, 1.0f);
  if (b) to_float_vec(*b, shift); else fill(shift, C, 0.0f);
  if (!training) {
    to_float_vec(*rm, mean);
    to_float_vec(*rv, var);
    if (eval_plain_ok(x, y)) return batch_norm_eval_plain(x, y, scale, shift, mean, var, eps, buf);
  }
  const memory::desc ymd = bn_md(y), xmd = bn_md(x), bmd = bn_blocked(ymd);
  // The statistics are given to the primitive, the running ones in eval mode and
  // those computed here in training mode (channel_stats): it only normalises.
  const Flags flags = Flags::use_scale | Flags::use_shift | Flags::use_global_stats;
  Key k("bnorm_fwd");
  k.add(y).add(eps);
  auto e = cached<BnFwdEntry>(k, [&] {
    dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, bmd, static_cast<float>(eps), flags);
    dnnl::batch_normalization_forward::primitive_desc pd(d, base_attr(), cpu());
    return BnFwdEntry{pd, dnnl::batch_normalization_forward(pd)};
  });
  const memory src = stage_in(buf, xmd, x.bytes(), bmd);
  if (training) channel_stats(bmd, src.get_data_handle(), mean, var);
  void* yb = buf.alloc(bmd.get_size());
  execute(e->prim, e->pd,
          {{DNNL_ARG_SRC, src},
           {DNNL_ARG_DST, memory(bmd, cpu(), yb)},
           {DNNL_ARG_SCALE, memory(vec_md(C), cpu(), scale)},
           {DNNL_ARG_SHIFT, memory(vec_md(C), cpu(), shift)},
           {DNNL_ARG_MEAN, memory(vec_md(C), cpu(), mean)},
           {DNNL_ARG_VARIANCE, memory(vec_md(C), cpu(), var)}});
  reorder(bmd, yb, ymd, y.bytes());
  if (!training) return;  // saved statistics are empty in eval mode
  float* invstd = buf.floats(C);
  for (int64_t c = 0; c < C; ++c) invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + eps));
  if (save_mean.defined() && save_mean.numel() == C) from_float_vec(mean, save_mean);
  if (save_invstd.defined() && save_invstd.numel() == C) from_float_vec(invstd, save_invstd);
  if (rm && rv) {
    float *old_m = buf.floats(C), *old_v = buf.floats(C);
    to_float_vec(*rm, old_m);
    to_float_vec(*rv, old_v);
    const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : INFINITY;
    for (int64_t c = 0; c < C; ++c) {
      old_m[c] = static_cast<float>((1.0 - momentum) * old_m[c] + momentum * mean[c]);
      old_v[c] = static_cast<float>((1.0 - momentum) * old_v[c] + momentum * var[c] * unbias);
    }
    from_float_vec(old_m, *rm);
    from_float_vec(old_v, *rv);
  }
}

namespace {
// Small float32 NCHW training-mode backward: one pass for the per-channel sums
// and one for the input gradient, directly on the user's memory. oneDNN's
// kernel needs three reorders to and from its blocked layout around an 11 us
// kernel (64x16x8x8: 58-72 us in all; this loop: see README).
bool small_plain_bn(const sdk::Tensor& x, const sdk::Tensor& g, const sdk::Tensor& gi) {
  if (!is_f32(x.dtype()) || x.numel() > kMemGrain || !x.is_contiguous() || !g.is_contiguous()) return false;
  if (!is_f32(g.dtype()) || has_zero_stride(g)) return false;
  return !gi.defined() || (gi.is_contiguous() && is_f32(gi.dtype()));
}

// var holds 1/invstd^2 (eps 0): invstd = 1/sqrt(var) recovers the saved invstd.
void bn_backward_plain(const sdk::Tensor& x, const sdk::Tensor& g, const sdk::Tensor& gi, int64_t C, const float* scale,
                       const float* mean, const float* var, const sdk::Tensor& gw, const sdk::Tensor& gb) {
  const int64_t N = x.size(0);
  const int64_t HW = C ? x.numel() / (N * C) : 0;
  const float* xp = x.data<float>();
  const float* gp = g.data<float>();
  float* gip = gi.defined() ? gi.data<float>() : nullptr;
  Buffers buf;
  float* dw = buf.floats(C);
  float* db = buf.floats(C);
  const double M = static_cast<double>(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    const float m = mean[c];
    double sg = 0.0, sgx = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = xp + (n * C + c) * HW;
      const float* gr = gp + (n * C + c) * HW;
      float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
      for (int64_t i = 0; i < HW; ++i) {
        a += gr[i];
        b += gr[i] * (xr[i] - m);
      }
      sg += a;
      sgx += b;
    }
    const double invstd = 1.0 / std::sqrt(static_cast<double>(var[c]));
    db[c] = static_cast<float>(sg);
    dw[c] = static_cast<float>(sgx * invstd);
    if (!gip) continue;
    const float k = static_cast<float>(scale[c] * invstd);
    const float gmean = static_cast<float>(sg / M);
    const float proj = static_cast<float>(sgx * invstd * invstd / M);
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = xp + (n * C + c) * HW;
      const float* gr = gp + (n * C + c) * HW;
      float* o = gip + (n * C + c) * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) o[i] = k * (gr[i] - gmean - (xr[i] - m) * proj);
    }
  }
  if (gw.defined() && gw.numel() == C) from_float_vec(dw, gw);
  if (gb.defined() && gb.numel() == C) from_float_vec(db, gb);
}

void check_batch_norm_backward(const sdk::Call& call) {
  sdk::Tensor g = call.tensor(0), x = call.tensor(1);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {g, call.output(0)});
  OPENREG_SDK_REQUIRE(x.dim() >= 2 && x.dim() <= 5, call.op_name(), ": 2-5 dims only");
  OPENREG_SDK_REQUIRE(x.numel() > 0, call.op_name(), ": empty input");
  OPENREG_SDK_REQUIRE(!has_zero_stride(x), call.op_name(), ": expanded input");
  const bool train = call.bool_arg(7);
  OPENREG_SDK_REQUIRE(train ? (!call.is_none(5) && !call.is_none(6)) : (!call.is_none(3) && !call.is_none(4)),
                      call.op_name(), ": missing statistics");
}
}  // namespace

void batch_norm_backward(const sdk::Call& call) {
  check_batch_norm_backward(call);
  sdk::Tensor g = call.tensor(0), x = call.tensor(1), gi = call.output(0), gw = call.output(1), gb = call.output(2);
  auto w = call.optional_tensor(2);
  const bool train = call.bool_arg(7);
  const double eps = call.double_arg(8);
  const int64_t C = x.size(1);
  Buffers buf;
  float *scale = buf.floats(C), *mean = buf.floats(C), *var = buf.floats(C);
  float *dscale = buf.floats(C), *dshift = buf.floats(C);
  if (w) to_float_vec(*w, scale); else fill(scale, C, 1.0f);
  float used_eps = static_cast<float>(eps);
  if (train) {
    to_float_vec(call.tensor(5), mean);
    to_float_vec(call.tensor(6), var);
    for (int64_t c = 0; c < C; ++c) var[c] = 1.0f / (var[c] * var[c]);  // invstd -> var with eps 0
    used_eps = 0.0f;
  } else {
    to_float_vec(call.tensor(3), mean);
    to_float_vec(call.tensor(4), var);
  }
  const bool want_gi = gi.defined();
  if (train && small_plain_bn(x, g, gi)) {
    bn_backward_plain(x, g, gi, C, scale, mean, var, gw, gb);
    return;
  }
  const memory::desc gimd = want_gi ? bn_md(gi) : bn_plain(x), dmd = bn_blocked(gimd);
  Flags flags = Flags::use_scale | Flags::use_shift;
  if (!train) flags = flags | Flags::use_global_stats;
  Key k("bnorm_bwd");
  k.add(dmd.dims()).add(want_gi ? gi : sdk::Tensor(nullptr)).add(static_cast<int64_t>(train)).add(static_cast<double>(used_eps));
  k.add(static_cast<int64_t>(dmd.data_type()));
  auto e = cached<BnBwdEntry>(k, [&] {
    dnnl::batch_normalization_forward::desc fd(dnnl::prop_kind::forward_training, dmd, used_eps, flags);
    dnnl::batch_normalization_forward::primitive_desc hint(fd, base_attr(), cpu());
    dnnl::batch_normalization_backward::desc d(dnnl::prop_kind::backward, dmd, dmd, used_eps, flags);
    dnnl::batch_normalization_backward::primitive_desc pd(d, base_attr(), cpu(), hint);
    return BnBwdEntry{pd, dnnl::batch_normalization_backward(pd)};
  });
  void* gi_blocked = buf.alloc(dmd.get_size());
  View gv{nullptr, memory::desc()};
  if (has_zero_stride(g)) {  // e.g. the gradient of y.sum(): a dense copy, seen like bn_md
    gv = view_of(buf, g);
    if (g.dim() < 4) gv.md = gv.md.reshape(bn_dims(gv.md.dims()));
  }
  execute(e->prim, e->pd,
          {{DNNL_ARG_SRC, stage_in(buf, bn_md(x), x.bytes(), dmd)},
           {DNNL_ARG_DIFF_DST, has_zero_stride(g) ? stage_in(buf, gv.md, gv.p, dmd) : stage_in(buf, bn_md(g), g.bytes(), dmd)},
           {DNNL_ARG_MEAN, memory(vec_md(C), cpu(), mean)},
           {DNNL_ARG_VARIANCE, memory(vec_md(C), cpu(), var)},
           {DNNL_ARG_SCALE, memory(vec_md(C), cpu(), scale)},
           {DNNL_ARG_SHIFT, memory(vec_md(C), cpu(), dshift)},  // oneDNN 2.6 insists on it (unused)
           {DNNL_ARG_DIFF_SRC, memory(dmd, cpu(), gi_blocked)},
           {DNNL_ARG_DIFF_SCALE, memory(vec_md(C), cpu(), dscale)},
           {DNNL_ARG_DIFF_SHIFT, memory(vec_md(C), cpu(), dshift)}});
  if (want_gi) reorder(dmd, gi_blocked, gimd, gi.bytes());
  if (gw.defined() && gw.numel() == C) from_float_vec(dscale, gw);
  if (gb.defined() && gb.numel() == C) from_float_vec(dshift, gb);
}

// ---------------------------------------------------------------- layer norm

namespace {
struct LnShape {
  int64_t M, N;
};
LnShape ln_shape(const sdk::Call& call, const sdk::Tensor& x, int ns_arg) {
  auto ns = call.int_list(ns_arg);
  OPENREG_SDK_CHECK(ns.size() <= x.dim(), call.op_name(), ": normalized_shape longer than the input");
  int64_t N = 1;
  for (int64_t v : ns) N *= v;
  return {N ? x.numel() / N : 0, N};
}

void check_layer_norm(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0), y = call.output(0);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {y});
  OPENREG_SDK_REQUIRE(y.is_contiguous(), call.op_name(), ": strided output");
  OPENREG_SDK_REQUIRE(!has_zero_stride(x), call.op_name(), ": expanded input");
  OPENREG_SDK_REQUIRE(ln_shape(call, x, 1).N > 0, call.op_name(), ": empty normalized shape");
  for (int i = 1; i < 3; ++i) OPENREG_SDK_REQUIRE(out_ok(call.output(i)), call.op_name(), ": strided statistics output");
  for (int i = 2; i < 4; ++i)
    if (auto t = call.optional_tensor(i)) OPENREG_SDK_REQUIRE(t->dim() <= 1 || t->is_contiguous(), call.op_name(), ": strided weight");
}
}  // namespace

namespace {
// Contiguous float32 layer norm as row loops: the forward of small inputs (at
// 32x128 the primitive's fixed cost, descriptors and six memory objects, exceeded
// the whole computation), the backward where it beat the primitive (on AVX-512 at
// every size; layer_norm_backward).
// The library is built for baseline x86-64 (SSE2); the bodies are inlined
// into AVX2 and AVX-512 copies picked from the ISA oneDNN reports (as
// loops.hpp does). The sums keep 32 independent partial sums, so every width
// adds in the same order: the result does not depend on the ISA.
constexpr int kLanes = 32;
constexpr int64_t kLayerNormLoopMax = 8192;  // the primitive above, but where the loops are faster

// Forward: per row the mean, then the centred variance, then the affine map.
[[gnu::always_inline]] inline void ln_fwd_body(const float* x, float* y, int64_t M, int64_t N, const float* scale,
                                               const float* shift, double eps, float* mean, float* rstd) {
  const float inv_n = 1.0f / static_cast<float>(N);
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = x + r * N;
    float* yr = y + r * N;
    float lanes[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= N; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += xr[j + l];
    float sum = 0.0f;
    for (; j < N; ++j) sum += xr[j];
    for (int l = 0; l < kLanes; ++l) sum += lanes[l];
    const float m = sum / static_cast<float>(N);
    float sq[kLanes] = {};
    for (j = 0; j + kLanes <= N; j += kLanes)
      for (int l = 0; l < kLanes; ++l) sq[l] += (xr[j + l] - m) * (xr[j + l] - m);
    float ss = 0.0f;
    for (; j < N; ++j) ss += (xr[j] - m) * (xr[j] - m);
    for (int l = 0; l < kLanes; ++l) ss += sq[l];
    const float rs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ss * inv_n) + eps));
    for (j = 0; j < N; ++j) yr[j] = (xr[j] - m) * rs * scale[j] + shift[j];
    mean[r] = m;
    rstd[r] = rs;
  }
}

// Backward with the saved mean and rstd: xhat = (x - mean) * rstd, gw = g * w,
// grad_input = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)); the parameter
// gradients sum g * xhat and g over the rows into dscale and dshift (zeroed
// by the caller). gi may be null (no input gradient wanted).
[[gnu::always_inline]] inline void ln_bwd_body(const float* g, const float* x, float* gi, int64_t M, int64_t N,
                                               const float* scale, const float* mean, const float* rstd,
                                               float* dscale, float* dshift) {
  const float inv_n = 1.0f / static_cast<float>(N);
  for (int64_t r = 0; r < M; ++r) {
    const float* xr = x + r * N;
    const float* gr = g + r * N;
    const float m = mean[r], rs = rstd[r];
    float la[kLanes] = {}, lb[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= N; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float gw = gr[j + l] * scale[j + l];
        la[l] += gw;
        lb[l] += gw * (xr[j + l] - m);
      }
    float a = 0.0f, b = 0.0f;
    for (; j < N; ++j) {
      const float gw = gr[j] * scale[j];
      a += gw;
      b += gw * (xr[j] - m);
    }
    for (int l = 0; l < kLanes; ++l) {
      a += la[l];
      b += lb[l];
    }
    const float mg = a * inv_n, mgx = b * rs * inv_n;
    for (j = 0; j < N; ++j) {
      const float xh = (xr[j] - m) * rs;
      dscale[j] += gr[j] * xh;
      dshift[j] += gr[j];
    }
    if (!gi) continue;
    float* o = gi + r * N;
    for (j = 0; j < N; ++j) o[j] = rs * (gr[j] * scale[j] - mg - (xr[j] - m) * rs * mgx);
  }
}

#define OPENREG_ONEDNN_LN(SUFFIX, ATTR)                                                                              \
  ATTR void ln_fwd_##SUFFIX(const float* x, float* y, int64_t M, int64_t N, const float* scale, const float* shift, \
                            double eps, float* mean, float* rstd) {                                                  \
    ln_fwd_body(x, y, M, N, scale, shift, eps, mean, rstd);                                                          \
  }                                                                                                                  \
  ATTR void ln_bwd_##SUFFIX(const float* g, const float* x, float* gi, int64_t M, int64_t N, const float* scale,     \
                            const float* mean, const float* rstd, float* dscale, float* dshift) {                    \
    ln_bwd_body(g, x, gi, M, N, scale, mean, rstd, dscale, dshift);                                                  \
  }
OPENREG_ONEDNN_LN(sse, )
OPENREG_ONEDNN_LN(avx2, __attribute__((target("avx2"))))
OPENREG_ONEDNN_LN(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))))
#undef OPENREG_ONEDNN_LN

void layer_norm_rows(const float* x, float* y, int64_t M, int64_t N, const float* scale, const float* shift,
                     double eps, float* mean, float* rstd) {
  switch (loops::width()) {
    case loops::Width::Avx512: return ln_fwd_avx512(x, y, M, N, scale, shift, eps, mean, rstd);
    case loops::Width::Avx2: return ln_fwd_avx2(x, y, M, N, scale, shift, eps, mean, rstd);
    case loops::Width::Sse: return ln_fwd_sse(x, y, M, N, scale, shift, eps, mean, rstd);
  }
}

void layer_norm_backward_rows(const float* g, const float* x, float* gi, int64_t M, int64_t N, const float* scale,
                              const float* mean, const float* rstd, float* dscale, float* dshift) {
  switch (loops::width()) {
    case loops::Width::Avx512: return ln_bwd_avx512(g, x, gi, M, N, scale, mean, rstd, dscale, dshift);
    case loops::Width::Avx2: return ln_bwd_avx2(g, x, gi, M, N, scale, mean, rstd, dscale, dshift);
    case loops::Width::Sse: return ln_bwd_sse(g, x, gi, M, N, scale, mean, rstd, dscale, dshift);
  }
}
}  // namespace

void layer_norm(const sdk::Call& call) {
  check_layer_norm(call);
  sdk::Tensor x = call.tensor(0), y = call.output(0), mean_out = call.output(1), rstd_out = call.output(2);
  auto w = call.optional_tensor(2), b = call.optional_tensor(3);
  const double eps = call.double_arg(4);
  const LnShape s = ln_shape(call, x, 1);
  if (s.M == 0) return;
  const dt type = dnnl_dt(x.dtype(), "layer_norm");
  const memory::desc dmd = plain_md({s.M, s.N}, type);
  const bool affine = w || b;
  Buffers buf;
  float *scale = buf.floats(s.N), *shift = buf.floats(s.N), *mean = buf.floats(s.M), *var = buf.floats(s.M);
  if (w) to_float_vec(*w, scale); else fill(scale, s.N, 1.0f);
  if (b) to_float_vec(*b, shift); else fill(shift, s.N, 0.0f);
  // The row loops only for small inputs: above 8K elements oneDNN's primitive was
  // the faster (512x128, one thread: the primitive 20 us, the loops 40, torch CPU
  // 40; 64x128: the primitive 5.8 us, the loops 4.8).
  if (is_f32(x.dtype()) && x.is_contiguous() && x.numel() <= kLayerNormLoopMax) {
    layer_norm_rows(reinterpret_cast<const float*>(x.bytes()), reinterpret_cast<float*>(y.bytes()), s.M, s.N, scale,
                    shift, eps, mean, var);
    if (mean_out.defined() && mean_out.numel() == s.M) from_float_vec(mean, mean_out);
    if (rstd_out.defined() && rstd_out.numel() == s.M) from_float_vec(var, rstd_out);
    return;
  }
  const Flags flags = affine ? Flags::use_scale | Flags::use_shift : Flags::none;
  Key k("lnorm_fwd");
  k.add(dmd.dims()).add(static_cast<int64_t>(type)).add(eps).add(static_cast<int64_t>(affine));
  auto e = cached<LnFwdEntry>(k, [&] {
    dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_training, dmd, vec_md(s.M),
                                              static_cast<float>(eps), flags);
    dnnl::layer_normalization_forward::primitive_desc pd(d, base_attr(), cpu());
    return LnFwdEntry{pd, dnnl::layer_normalization_forward(pd)};
  });
  void* src = x.bytes();
  if (!x.is_contiguous()) src = stage_in(buf, md_of(x), x.bytes(), plain_md(dims_of(x), type)).get_data_handle();
  Args args{{DNNL_ARG_SRC, memory(dmd, cpu(), src)},
            {DNNL_ARG_DST, memory(dmd, cpu(), y.bytes())},
            {DNNL_ARG_MEAN, memory(vec_md(s.M), cpu(), mean)},
            {DNNL_ARG_VARIANCE, memory(vec_md(s.M), cpu(), var)}};
  if (affine) {
    args.emplace(DNNL_ARG_SCALE, memory(vec_md(s.N), cpu(), scale));
    args.emplace(DNNL_ARG_SHIFT, memory(vec_md(s.N), cpu(), shift));
  }
  execute(e->prim, e->pd, std::move(args));
  for (int64_t i = 0; i < s.M; ++i) var[i] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[i]) + eps));
  if (mean_out.defined() && mean_out.numel() == s.M) from_float_vec(mean, mean_out);
  if (rstd_out.defined() && rstd_out.numel() == s.M) from_float_vec(var, rstd_out);
}

namespace {
void check_layer_norm_backward(const sdk::Call& call) {
  sdk::Tensor g = call.tensor(0), x = call.tensor(1), gi = call.output(0);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_primitives(call, x.dtype());
  require_dtype(call, x.dtype(), {g, gi});
  OPENREG_SDK_REQUIRE(!gi.defined() || gi.is_contiguous(), call.op_name(), ": strided grad_input");
  OPENREG_SDK_REQUIRE(!has_zero_stride(x), call.op_name(), ": expanded input");
  OPENREG_SDK_REQUIRE(ln_shape(call, x, 2).N > 0, call.op_name(), ": empty normalized shape");
  for (int i = 3; i < 7; ++i)
    if (auto t = call.optional_tensor(i)) OPENREG_SDK_REQUIRE(t->dim() <= 1 || t->is_contiguous(), call.op_name(), ": strided parameter");
  for (int i = 1; i < 3; ++i) OPENREG_SDK_REQUIRE(out_ok(call.output(i)), call.op_name(), ": strided gradient output");
}
}  // namespace

void layer_norm_backward(const sdk::Call& call) {
  check_layer_norm_backward(call);
  sdk::Tensor g = call.tensor(0), x = call.tensor(1), mean_t = call.tensor(3), rstd_t = call.tensor(4);
  sdk::Tensor gi = call.output(0), gw = call.output(1), gb = call.output(2);
  auto w = call.optional_tensor(5);
  const LnShape s = ln_shape(call, x, 2);
  const dt type = dnnl_dt(x.dtype(), "layer_norm_backward");
  if (s.M == 0) {  // parameter gradients of an empty batch are zero
    std::vector<float> z(static_cast<size_t>(s.N), 0.0f);
    if (gw.defined() && gw.numel() == s.N) from_float_vec(z.data(), gw);
    if (gb.defined() && gb.numel() == s.N) from_float_vec(z.data(), gb);
    return;
  }
  const memory::desc dmd = plain_md({s.M, s.N}, type);
  const bool affine = w.has_value();
  Buffers buf;
  float *scale = buf.floats(s.N), *mean = buf.floats(s.M), *var = buf.floats(s.M);
  float *dscale = buf.floats(s.N), *dshift = buf.floats(s.N);
  if (w) to_float_vec(*w, scale); else fill(scale, s.N, 1.0f);
  to_float_vec(mean_t, mean);
  to_float_vec(rstd_t, var);
  // The row loops on AVX-512 at every size: faster than oneDNN's backward primitive
  // at every size measured (one thread: 512x128 29 us against 44, 520x768 121
  // against 166, 4096x512 0.73 ms against 0.95; two threads: 22, 83 and 387 us
  // against 34, 97 and 497; torch CPU 31, 160, 1.04 ms and 20, 99, 654 us). On
  // narrower vectors only for small inputs or wide rows: AVX2, one thread, 512x128
  // took 42 us in the loops against 34 (torch CPU 31), 520x768 136 against 164.
  const bool loops_faster = loops::width() == loops::Width::Avx512 || x.numel() <= kLayerNormLoopMax || s.N >= 512;
  if (is_f32(x.dtype()) && x.is_contiguous() && g.is_contiguous() && loops_faster) {
    // Blocks of rows of at least kSmall elements (at most 64 blocks) on the host
    // pool, each summing its parameter gradients into partials of its own, added
    // in block order after: the result does not depend on the thread count.
    const int64_t rows = std::max({int64_t{1}, kSmall / s.N, (s.M + 63) / 64}), blocks = (s.M + rows - 1) / rows;
    float* partial = blocks > 1 ? buf.floats(2 * blocks * s.N) : dscale;
    fill(partial, (blocks > 1 ? 2 * blocks : 1) * s.N, 0.0f);
    if (blocks == 1) fill(dshift, s.N, 0.0f);
    const float *gp = g.data<float>(), *xp = x.data<float>();
    float* gip = gi.defined() ? gi.data<float>() : nullptr;
    Threads wide(threads_for(static_cast<double>(x.numel()), kSmall));
    host().parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t r0 = blk * rows, n = std::min(rows, s.M - r0);
        float* ds = blocks > 1 ? partial + 2 * blk * s.N : dscale;
        float* dh = blocks > 1 ? ds + s.N : dshift;
        layer_norm_backward_rows(gp + r0 * s.N, xp + r0 * s.N, gip ? gip + r0 * s.N : nullptr, n, s.N, scale,
                                 mean + r0, var + r0, ds, dh);
      }
    });
    if (blocks > 1) {
      fill(dscale, s.N, 0.0f);
      fill(dshift, s.N, 0.0f);
      for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t j = 0; j < s.N; ++j) {
          dscale[j] += partial[2 * blk * s.N + j];
          dshift[j] += partial[(2 * blk + 1) * s.N + j];
        }
    }
    if (affine && gw.defined() && gw.numel() == s.N) from_float_vec(dscale, gw);
    if (affine && gb.defined() && gb.numel() == s.N) from_float_vec(dshift, gb);
    return;
  }
  for (int64_t i = 0; i < s.M; ++i) var[i] = 1.0f / (var[i] * var[i]);
  const Flags flags = affine ? Flags::use_scale | Flags::use_shift : Flags::none;
  Key k("lnorm_bwd");
  k.add(dmd.dims()).add(static_cast<int64_t>(type)).add(static_cast<int64_t>(affine));
  auto e = cached<LnBwdEntry>(k, [&] {
    dnnl::layer_normalization_forward::desc fd(dnnl::prop_kind::forward_training, dmd, vec_md(s.M), 0.0f, flags);
    dnnl::layer_normalization_forward::primitive_desc hint(fd, base_attr(), cpu());
    dnnl::layer_normalization_backward::desc d(affine ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data, dmd,
                                               dmd, vec_md(s.M), 0.0f, flags);
    dnnl::layer_normalization_backward::primitive_desc pd(d, base_attr(), cpu(), hint);
    return LnBwdEntry{pd, dnnl::layer_normalization_backward(pd)};
  });
  const memory::desc plain = plain_md(dims_of(x), type);
  void* xs = x.is_contiguous() ? x.bytes() : stage_in(buf, md_of(x), x.bytes(), plain).get_data_handle();
  void* gs = g.is_contiguous()     ? g.bytes()
             : has_zero_stride(g) ? view_of(buf, g).p
                                  : stage_in(buf, md_of(g), g.bytes(), plain).get_data_handle();
  void* gip = gi.defined() ? static_cast<void*>(gi.bytes()) : buf.alloc(dmd.get_size());
  Args args{{DNNL_ARG_SRC, memory(dmd, cpu(), xs)},
            {DNNL_ARG_DIFF_DST, memory(dmd, cpu(), gs)},
            {DNNL_ARG_MEAN, memory(vec_md(s.M), cpu(), mean)},
            {DNNL_ARG_VARIANCE, memory(vec_md(s.M), cpu(), var)},
            {DNNL_ARG_DIFF_SRC, memory(dmd, cpu(), gip)}};
  if (affine) {
    args.emplace(DNNL_ARG_SCALE, memory(vec_md(s.N), cpu(), scale));
    args.emplace(DNNL_ARG_SHIFT, memory(vec_md(s.N), cpu(), dshift));  // oneDNN 2.6 insists on it (unused)
    args.emplace(DNNL_ARG_DIFF_SCALE, memory(vec_md(s.N), cpu(), dscale));
    args.emplace(DNNL_ARG_DIFF_SHIFT, memory(vec_md(s.N), cpu(), dshift));
  }
  execute(e->prim, e->pd, std::move(args));
  if (affine && gw.defined() && gw.numel() == s.N) from_float_vec(dscale, gw);
  if (affine && gb.defined() && gb.numel() == s.N) from_float_vec(dshift, gb);
}

void register_group_norm_ops(sdk::EngineDef& e) { sdk::group_norm::register_ops(e, vector_isa()); }

}  // namespace onednn_engine
