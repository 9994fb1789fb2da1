// The overrideable fused attention ops (aten::_scaled_dot_product_fused_attention_overrideable
// and its _backward), float32, as one engine call each.
//
// oneDNN 2.6 has no attention primitive, so each (batch, head) is a few GEMMs
// through dnnl_sgemm and a softmax of our own, a block of query rows at a time so
// the scores stay in cache (kRows x S floats). The contract (scale, causal,
// masks, grouped heads, the logsumexp the backward starts from) is the reference
// engine's: engines/aten_ref/attention_cpu.cpp. Declined, for the next engine:
// dropout_p > 0, other dtypes, operands whose last dim is not unit-stride.
#include <cmath>
#include <functional>
#include <optional>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "ops.h"
#include "vmath.hpp"

namespace onednn_engine {

namespace {

constexpr int64_t kRows = 64;  // query rows per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A [.., heads, rows, cols] operand (3-d: batch 1) with unit-stride rows.
struct Mat {
  const float* p = nullptr;
  int64_t sb = 0, sh = 0, ld = 0;
  const float* at(int64_t b, int64_t h) const { return p + b * sb + h * sh; }
  float* mut(int64_t b, int64_t h) const { return const_cast<float*>(at(b, h)); }
};

Mat mat_of(const sdk::Call& call, const sdk::Tensor& t, const char* what) {
  OPENREG_SDK_REQUIRE(is_f32(t.dtype()), call.op_name(), ": ", what, " is ", t.describe(), ", only float32 is served");
  OPENREG_SDK_REQUIRE(t.dim() == 3 || t.dim() == 4, call.op_name(), ": ", what, " must be 3-d or 4-d");
  OPENREG_SDK_REQUIRE((t.stride(-1) == 1 || t.size(-1) == 1) && t.stride(-2) >= t.size(-1), call.op_name(), ": ",
                      what, " ", t.describe(), " has no unit-stride rows (left to the next engine)");
  Mat m;
  m.p = t.data<float>();
  m.sb = t.dim() == 4 ? t.stride(0) : 0;
  m.sh = t.stride(-3);
  m.ld = std::max<int64_t>(t.stride(-2), 1);
  return m;
}

// The mask (or its gradient) seen as [B, H, L, S], stride 0 on broadcast dims.
struct Bias {
  char* p = nullptr;
  bool is_bool = false;
  int64_t s[4] = {0, 0, 0, 0};
  bool broadcast = false;  // some dim of size 1 stands for several
  int64_t offset(int64_t b, int64_t h) const { return b * s[0] + h * s[1]; }
};

Bias bias_of(const sdk::Call& call, const sdk::Tensor& t, const int64_t (&full)[4]) {
  const bool is_bool = sdk::same_dtype(t.dtype(), sdk::dtypes::bool_);
  OPENREG_SDK_REQUIRE(is_bool || is_f32(t.dtype()), call.op_name(), ": attn_bias ", t.describe(),
                      " must be bool or float32");
  OPENREG_SDK_CHECK(t.dim() <= 4, call.op_name(), ": attn_bias must have at most 4 dims, got ", t.describe());
  Bias m;
  m.p = t.bytes();
  m.is_bool = is_bool;
  const int64_t lead = 4 - t.dim();
  for (int64_t d = 0; d < 4; ++d) {
    const int64_t n = d < lead ? 1 : t.size(d - lead);
    OPENREG_SDK_CHECK(n == full[d] || n == 1, call.op_name(), ": attn_bias ", t.describe(),
                      " does not broadcast to [", full[0], ", ", full[1], ", ", full[2], ", ", full[3], "]");
    m.s[d] = (d < lead || n == 1) ? 0 : t.stride(d - lead) * t.element_size();
    m.broadcast = m.broadcast || (n == 1 && full[d] > 1);
  }
  return m;
}

struct Problem {
  int64_t B, H, Hk, L, S, E, Ev;
  float scale;
  bool causal;
  Mat q, k, v;
  std::optional<Bias> mask;
};

Problem problem_of(const sdk::Call& call, int qi, int bias_i, int dropout_i, int causal_i, int scale_i) {
  const sdk::Tensor q = call.tensor(qi), k = call.tensor(qi + 1), v = call.tensor(qi + 2);
  OPENREG_SDK_REQUIRE(call.double_arg(dropout_i) == 0.0, call.op_name(),
                      ": dropout_p > 0 is not served (left to the next engine)");
  Problem p{};
  p.q = mat_of(call, q, "query");
  p.k = mat_of(call, k, "key");
  p.v = mat_of(call, v, "value");
  const bool four = q.dim() == 4;
  OPENREG_SDK_CHECK(k.dim() == q.dim() && v.dim() == q.dim(), call.op_name(), ": query, key and value must have the "
                    "same number of dims, got ", q.describe(), ", ", k.describe(), ", ", v.describe());
  p.B = four ? q.size(0) : 1;
  p.H = q.size(-3);
  p.Hk = k.size(-3);
  p.L = q.size(-2);
  p.S = k.size(-2);
  p.E = q.size(-1);
  p.Ev = v.size(-1);
  OPENREG_SDK_CHECK(k.size(-1) == p.E && v.size(-2) == p.S && v.size(-3) == p.Hk && p.Hk > 0 && p.H % p.Hk == 0 &&
                        (!four || (k.size(0) == p.B && v.size(0) == p.B)),
                    call.op_name(), ": shapes do not fit: query ", q.describe(), ", key ", k.describe(), ", value ",
                    v.describe());
  p.causal = call.bool_arg(causal_i);
  const auto scale = call.optional_double(scale_i);
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(p.E)));
  if (auto m = call.optional_tensor(bias_i); m && m->defined()) {
    const int64_t full[4] = {p.B, p.H, p.L, p.S};
    p.mask = bias_of(call, *m, full);
  }
  return p;
}

// C = alpha * op(A) @ op(B) + beta * C, row-major (dnnl_sgemm).
void gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, std::max<int64_t>(lda, 1), B,
                                      std::max<int64_t>(ldb, 1), beta, C, std::max<int64_t>(ldc, 1));
  if (st != dnnl_success) sdk::fail(OPENREG_STATUS_INTERNAL, "onednn attention: dnnl_sgemm failed");
}

// Columns a block of rows [r0, r0 + m) can see: all, or up to the last row's
// diagonal when causal (top-left aligned, as ATen's is_causal).
int64_t visible_cols(const Problem& p, int64_t r0, int64_t m) { return p.causal ? std::min(p.S, r0 + m) : p.S; }

// scores[i, j] = scale * q.k (already there) masked in place: causal and attn_bias.
void mask_scores(const Problem& p, int64_t b, int64_t h, int64_t r0, int64_t m, int64_t n, float* s, int64_t lds) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = s + i * lds;
    const int64_t r = r0 + i;
    if (p.causal)
      for (int64_t j = r + 1; j < n; ++j) row[j] = kNegInf;
    if (!p.mask) continue;
    const Bias& mk = *p.mask;
    const char* mrow = mk.p + mk.offset(b, h) + r * mk.s[2];
    if (mk.is_bool) {
      for (int64_t j = 0; j < n; ++j)
        if (!*reinterpret_cast<const bool*>(mrow + j * mk.s[3])) row[j] = kNegInf;
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += *reinterpret_cast<const float*>(mrow + j * mk.s[3]);
    }
  }
}

std::vector<float>& scratch(size_t which, size_t n) {
  thread_local std::vector<float> buf[2];
  if (buf[which].size() < n) buf[which].resize(n);
  return buf[which];
}

Threads threads_of(const Problem& p, double passes) {
  return Threads(threads_for(passes * 2.0 * static_cast<double>(p.B * p.H) * static_cast<double>(p.L * p.S) *
                                 static_cast<double>(p.E + p.Ev),
                             kFlopGrain));
}

void fused_attention(const sdk::Call& call) {
  const Problem p = problem_of(call, 0, 3, 4, 5, 7);
  const sdk::Tensor out = call.output(0), lse = call.output(1);
  const Mat o = mat_of(call, out, "output");
  OPENREG_SDK_REQUIRE(is_f32(lse.dtype()) && lse.dim() == 3, call.op_name(), ": logsumexp ", lse.describe(),
                      " must be float32 [B, H, L]");
  for (int i : {6, 7})  // philox_seed, philox_offset: no dropout, so 0
    if (call.num_outputs() > i && call.output(i).defined() && call.output(i).numel() == 1)
      std::memset(call.output(i).bytes(), 0, static_cast<size_t>(call.output(i).element_size()));
  const int64_t blocks = (p.L + kRows - 1) / kRows, group = p.H / p.Hk;
  float* lse_p = lse.data<float>();
  const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1), ls2 = lse.stride(2);
  Threads threads(threads_of(p, 1.0));
  host().parallel_for(0, p.B * p.H * blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t blk = t % blocks, bh = t / blocks, b = bh / p.H, h = bh % p.H, hk = h / group;
      const int64_t r0 = blk * kRows, m = std::min(kRows, p.L - r0), n = visible_cols(p, r0, m);
      std::vector<float>& sbuf = scratch(0, static_cast<size_t>(m * std::max<int64_t>(n, 1)));
      float* s = sbuf.data();
      gemm('N', 'T', m, n, p.E, p.scale, p.q.at(b, h) + r0 * p.q.ld, p.q.ld, p.k.at(b, hk), p.k.ld, 0.0f, s, n);
      mask_scores(p, b, h, r0, m, n, s, n);
      for (int64_t i = 0; i < m; ++i) {
        float* row = s + i * n;
        float mx = kNegInf;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
        float* l = lse_p + b * ls0 + h * ls1 + (r0 + i) * ls2;
        if (mx == kNegInf) {  // every key masked: as the reference, lse -inf and NaN weights
          *l = kNegInf;
          for (int64_t j = 0; j < n; ++j) row[j] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          row[j] = vmath::exp(row[j] - mx);
          sum += row[j];
        }
        *l = mx + std::log(sum);
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
      }
      gemm('N', 'N', m, p.Ev, n, 1.0f, s, n, p.v.at(b, hk), p.v.ld, 0.0f, o.mut(b, h) + r0 * o.ld, o.ld);
    }
  });
}

// Adds a block of score gradients into the bias gradient (under `lock` when
// broadcast dims make several blocks meet on one element).
void add_bias_grad(const Bias& g, int64_t b, int64_t h, int64_t r0, int64_t m, int64_t n, const float* ds,
                   std::mutex* lock) {
  std::unique_lock<std::mutex> guard;
  if (g.broadcast) guard = std::unique_lock<std::mutex>(*lock);
  for (int64_t i = 0; i < m; ++i) {
    char* row = g.p + g.offset(b, h) + (r0 + i) * g.s[2];
    for (int64_t j = 0; j < n; ++j) *reinterpret_cast<float*>(row + j * g.s[3]) += ds[i * n + j];
  }
}

void zero_rows(const Mat& t, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::memset(t.mut(b, h) + r * t.ld, 0, static_cast<size_t>(cols) * sizeof(float));
}

void fused_attention_backward(const sdk::Call& call) {
  const Problem p = problem_of(call, 1, 4, 12, 13, 16);
  const sdk::Tensor go_t = call.tensor(0), lse = call.tensor(7);
  const Mat go = mat_of(call, go_t, "grad_out");
  OPENREG_SDK_REQUIRE(is_f32(lse.dtype()) && lse.dim() == 3, call.op_name(), ": logsumexp ", lse.describe(),
                      " must be float32 [B, H, L]");
  const Mat dq = mat_of(call, call.output(0), "grad_query"), dk = mat_of(call, call.output(1), "grad_key"),
            dv = mat_of(call, call.output(2), "grad_value");
  std::optional<Bias> dbias;
  if (call.num_outputs() > 3 && call.output(3).defined() && call.output(3).numel() > 0) {
    const sdk::Tensor g = call.output(3);
    const int64_t full[4] = {p.B, p.H, p.L, p.S};
    dbias = bias_of(call, g, full);
    // Zeroed whole (a bool mask's gradient stays zero); dense, as the Meta kernel makes it.
    OPENREG_SDK_REQUIRE(g.is_contiguous(), call.op_name(), ": a strided grad_attn_bias is left to the next engine");
    std::memset(g.bytes(), 0, static_cast<size_t>(g.numel() * g.element_size()));
    if (dbias->is_bool) dbias.reset();
  }
  const float* lse_p = lse.data<float>();
  const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1), ls2 = lse.stride(2), group = p.H / p.Hk;
  std::mutex bias_lock;
  Threads threads(threads_of(p, 2.5));
  // One task per (batch, key head): it owns that head's grad_key and grad_value.
  host().parallel_for(0, p.B * p.Hk, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t b = t / p.Hk, hk = t % p.Hk;
      zero_rows(dk, b, hk, p.S, p.E);
      zero_rows(dv, b, hk, p.S, p.Ev);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t r0 = 0; r0 < p.L; r0 += kRows) {
          const int64_t m = std::min(kRows, p.L - r0), n = visible_cols(p, r0, m);
          const size_t cells = static_cast<size_t>(m * std::max<int64_t>(n, 1));
          float* s = scratch(0, cells).data();
          float* dp = scratch(1, cells).data();
          const float* qb = p.q.at(b, h) + r0 * p.q.ld;
          const float* gob = go.at(b, h) + r0 * go.ld;
          // P = exp(scale q.k + mask - lse)
          gemm('N', 'T', m, n, p.E, p.scale, qb, p.q.ld, p.k.at(b, hk), p.k.ld, 0.0f, s, n);
          mask_scores(p, b, h, r0, m, n, s, n);
          for (int64_t i = 0; i < m; ++i) {
            const float l = lse_p[b * ls0 + h * ls1 + (r0 + i) * ls2];
            float* row = s + i * n;
            for (int64_t j = 0; j < n; ++j) row[j] = vmath::exp(row[j] - l);
          }
          // dV += P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(P * dP))
          gemm('T', 'N', n, p.Ev, m, 1.0f, s, n, gob, go.ld, 1.0f, dv.mut(b, hk), dv.ld);
          gemm('N', 'T', m, n, p.Ev, 1.0f, gob, go.ld, p.v.at(b, hk), p.v.ld, 0.0f, dp, n);
          for (int64_t i = 0; i < m; ++i) {
            const float* pr = s + i * n;
            float* dr = dp + i * n;
            float d = 0.0f;
            for (int64_t j = 0; j < n; ++j) d += pr[j] * dr[j];
            for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - d);
          }
          if (dbias) add_bias_grad(*dbias, b, h, r0, m, n, dp, &bias_lock);
          // dQ = scale dS K;  dK += scale dS^T Q
          gemm('N', 'N', m, p.E, n, p.scale, dp, n, p.k.at(b, hk), p.k.ld, 0.0f, dq.mut(b, h) + r0 * dq.ld, dq.ld);
          gemm('T', 'N', n, p.E, m, p.scale, dp, n, qb, p.q.ld, 1.0f, dk.mut(b, hk), dk.ld);
        }
      }
    }
  });
}

}  // namespace

void register_attention_ops(sdk::EngineDef& e, const std::function<sdk::Kernel(sdk::Kernel)>& guard) {
  const auto f32 = sdk::dtypes::float32;
  e.op("aten::_scaled_dot_product_fused_attention_overrideable", {f32}, guard(fused_attention));
  e.op("aten::_scaled_dot_product_fused_attention_overrideable_backward", {f32}, guard(fused_attention_backward));
}

}  // namespace onednn_engine
