// The overrideable fused attention ops (aten::_scaled_dot_product_fused_attention_overrideable
// and its _backward), float32, as one engine call each.
//
// oneDNN 2.6 has no attention primitive. When the scores of every head fit in
// kMaxScores floats and key and value have the query's heads, each product is a
// batched 4-d matmul primitive over a run of heads (strided operands, transposes as
// strides), with the mask, softmax and score gradients in the engine's row loops
// between them; each thread takes one run of heads and its whole chain, so a call
// is one parallel region. Otherwise (long sequences, grouped heads) each (batch,
// head) is a few GEMMs through dnnl_sgemm, a block of query rows at a time so the
// scores stay in cache (kRows x S floats). The contract (scale, causal, masks,
// grouped heads, fully masked rows, the logsumexp the backward starts from) is the
// reference engine's: engines/aten_ref/attention_cpu.cpp. Declined, for the next
// engine: dropout_p > 0, other dtypes, operands whose last dim is not unit-stride.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "ops.h"
#include "vec.hpp"
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

// An input with a zero stride (the gradient of x.sum() is expanded) is read from
// a dense copy in `buf`'s scratch.
Mat mat_of(const sdk::Call& call, const sdk::Tensor& t, const char* what, Buffers* buf = nullptr) {
  OPENREG_SDK_REQUIRE(is_f32(t.dtype()), call.op_name(), ": ", what, " is ", t.describe(), ", only float32 is served");
  OPENREG_SDK_REQUIRE(t.dim() == 3 || t.dim() == 4, call.op_name(), ": ", what, " must be 3-d or 4-d");
  if (buf && has_zero_stride(t)) {
    const View v = view_of(*buf, t);
    const int64_t rows = t.size(-2), cols = t.size(-1);
    return Mat{static_cast<const float*>(v.p), t.size(-3) * rows * cols, rows * cols, std::max<int64_t>(cols, 1)};
  }
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

Problem problem_of(const sdk::Call& call, int qi, int bias_i, int dropout_i, int causal_i, int scale_i, Buffers* buf) {
  const sdk::Tensor q = call.tensor(qi), k = call.tensor(qi + 1), v = call.tensor(qi + 2);
  OPENREG_SDK_REQUIRE(call.double_arg(dropout_i) == 0.0, call.op_name(),
                      ": dropout_p > 0 is not served (left to the next engine)");
  Problem p{};
  p.q = mat_of(call, q, "query", buf);
  p.k = mat_of(call, k, "key", buf);
  p.v = mat_of(call, v, "value", buf);
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
    } else if (mk.s[3] == sizeof(float)) {  // unit-stride rows: a loop the compiler vectorises
      const float* m = reinterpret_cast<const float*>(mrow);
      for (int64_t j = 0; j < n; ++j) row[j] += m[j];
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += *reinterpret_cast<const float*>(mrow + j * mk.s[3]);
    }
  }
}

// ---- row kernels. The library is built for baseline x86-64 (SSE2); these are also
// compiled for AVX2 and AVX-512 and picked by the ISA oneDNN reports, as
// loops.hpp's dense loops are, each build with its own register width (vec.hpp).
// Reductions keep one vector of lanes (a strict left-to-right float sum does not
// vectorise).
using vec::V4;
using vec::V8;
using vec::V16;
using vec::kLanes;
// Horizontal sum and maximum of a vector as a tree of halvings (a lane at a time
// was a chain of 15 extracts and scalar ops, a third of a 64-wide softmax row).
OPENREG_ALWAYS_INLINE float lanes_sum(V4 v) {
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2);
  return v[0];
}
OPENREG_ALWAYS_INLINE float lanes_sum(V8 v) {
  return lanes_sum(__builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7));
}
OPENREG_ALWAYS_INLINE float lanes_sum(V16 v) {
  return lanes_sum(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}
template <class V>
OPENREG_ALWAYS_INLINE V vmax(V a, V b) {
  return a > b ? a : b;
}
OPENREG_ALWAYS_INLINE float lanes_max(V4 v) {
  v = vmax(v, __builtin_shufflevector(v, v, 2, 3, 0, 1));
  v = vmax(v, __builtin_shufflevector(v, v, 1, 0, 3, 2));
  return v[0];
}
OPENREG_ALWAYS_INLINE float lanes_max(V8 v) {
  return lanes_max(vmax(__builtin_shufflevector(v, v, 0, 1, 2, 3), __builtin_shufflevector(v, v, 4, 5, 6, 7)));
}
OPENREG_ALWAYS_INLINE float lanes_max(V16 v) {
  return lanes_max(vmax(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                        __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)));
}
template <class V>
OPENREG_ALWAYS_INLINE float row_max(const float* x, int64_t n) {
  V acc;
  for (int64_t l = 0; l < kLanes<V>; ++l) acc[l] = kNegInf;
  int64_t j = 0;
  for (; j + kLanes<V> <= n; j += kLanes<V>) acc = vmax(vec::load<V>(x + j), acc);  // a NaN is passed over, as std::max does
  float m = lanes_max(acc);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}
// x[j] = exp(x[j] - shift) for a shift no less than the row's maximum, so every
// argument is <= 0 (or NaN); returns the sum.
template <class V>
OPENREG_ALWAYS_INLINE float exp_shift_sum(float* x, int64_t n, float shift) {
  V acc = {};
  int64_t j = 0;
  for (; j + kLanes<V> <= n; j += kLanes<V>) {  // one pass: the lane loop becomes vector code
    V e;
    for (int64_t l = 0; l < kLanes<V>; ++l) e[l] = vmath::exp_nonpositive(x[j + l] - shift);
    vec::store(x + j, e);
    acc += e;
  }
  float s = lanes_sum(acc);
  for (; j < n; ++j) s += x[j] = vmath::exp_nonpositive(x[j] - shift);
  return s;
}
template <class V>
OPENREG_ALWAYS_INLINE float dot(const float* a, const float* b, int64_t n) {
  V acc = {};
  int64_t j = 0;
  for (; j + kLanes<V> <= n; j += kLanes<V>) acc += vec::load<V>(a + j) * vec::load<V>(b + j);
  float s = lanes_sum(acc);
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

// Per ISA: softmax of one masked score row in place, returning its logsumexp (a
// row with every key masked gives, as the reference, weights 0 and +inf);
// probabilities from a logsumexp; the score gradient p * (dp - rowsum(p * dp)).
#define OPENREG_ATTENTION_ROWS(SUFFIX, ATTR, V)                                     \
  ATTR float softmax_row_##SUFFIX(float* row, int64_t n) {                       \
    const float mx = row_max<V>(row, n);                                            \
    if (mx == kNegInf) {                                                         \
      for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;                             \
      return std::numeric_limits<float>::infinity();                             \
    }                                                                            \
    const float sum = exp_shift_sum<V>(row, n, mx);                                 \
    const float inv = 1.0f / sum;                                                \
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;                               \
    return mx + std::log(sum);                                                   \
  }                                                                              \
  ATTR void probs_row_##SUFFIX(float* row, int64_t n, float lse) {               \
    for (int64_t j = 0; j < n; ++j) row[j] = vmath::exp_nonpositive(row[j] - lse); \
  }                                                                              \
  ATTR void dscore_row_##SUFFIX(const float* p, float* dp, int64_t n) {          \
    const float d = dot<V>(p, dp, n);                                               \
    for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - d);                  \
  }
OPENREG_ATTENTION_ROWS(sse, , V4)
OPENREG_ATTENTION_ROWS(avx2, OPENREG_TARGET_AVX2, V8)
OPENREG_ATTENTION_ROWS(avx512, OPENREG_TARGET_AVX512, V16)
#undef OPENREG_ATTENTION_ROWS

float softmax_row(float* row, int64_t n) {
  switch (loops::width()) {
    case loops::Width::Avx512: return softmax_row_avx512(row, n);
    case loops::Width::Avx2: return softmax_row_avx2(row, n);
    default: return softmax_row_sse(row, n);
  }
}
void probs_row(float* row, int64_t n, float lse) {
  switch (loops::width()) {
    case loops::Width::Avx512: return probs_row_avx512(row, n, lse);
    case loops::Width::Avx2: return probs_row_avx2(row, n, lse);
    default: return probs_row_sse(row, n, lse);
  }
}
void dscore_row(const float* p, float* dp, int64_t n) {
  switch (loops::width()) {
    case loops::Width::Avx512: return dscore_row_avx512(p, dp, n);
    case loops::Width::Avx2: return dscore_row_avx2(p, dp, n);
    default: return dscore_row_sse(p, dp, n);
  }
}

// Per-thread buffers: slots 0 and 1 hold the blocked path's scores, 2 to 8 the
// batched path's staged operands (Staged below).
constexpr size_t kScratchSlots = 9;
std::vector<float>& scratch(size_t which, size_t n) {
  thread_local std::vector<float> buf[kScratchSlots];
  if (buf[which].size() < n) buf[which].resize(n);
  return buf[which];
}

Threads threads_of(const Problem& p, double passes) {
  return Threads(threads_for(passes * 2.0 * static_cast<double>(p.B * p.H) * static_cast<double>(p.L * p.S) *
                                 static_cast<double>(p.E + p.Ev),
                             kFlopGrain));
}

// ---- the batched path: one matmul primitive per product over every head

constexpr int64_t kMaxScores = int64_t(1) << 22;  // 16 MB of float32 scores

// A [B, H, rows, cols] float32 operand: pointer and element strides.
struct Operand {
  const float* p;
  memory::dims dims, strides;
  Operand t() const {  // the transpose of the last two dims: strides swapped
    return {p, {dims[0], dims[1], dims[3], dims[2]}, {strides[0], strides[1], strides[3], strides[2]}};
  }
};
Operand operand(const Mat& m, int64_t B, int64_t H, int64_t rows, int64_t cols) {
  return {m.p, {B, H, rows, cols}, {B == 1 ? H * m.sh : m.sb, m.sh, m.ld, 1}};
}
Operand dense(const float* p, int64_t B, int64_t H, int64_t rows, int64_t cols) {
  return {p, {B, H, rows, cols}, {H * rows * cols, rows * cols, cols, 1}};
}

memory::desc md(const Operand& o) {
  memory::dims st = o.strides;
  for (size_t i = 0; i < st.size(); ++i)
    if (o.dims[i] == 1 || st[i] == 0) st[i] = std::max<memory::dim>(st[i], 1);
  return memory::desc(o.dims, dt::f32, st);
}

struct MatmulEntry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// dst = alpha * a @ b, one primitive over every (batch, head).
void matmul(const Operand& a, const Operand& b, const Operand& dst, float alpha) {
  Key k("attention_matmul");
  k.add(a.dims).add(a.strides).add(b.dims).add(b.strides).add(dst.dims).add(dst.strides).add(static_cast<double>(alpha));
  auto e = cached<MatmulEntry>(k, [&] {
    MatmulEntry m;
    dnnl::primitive_attr attr = base_attr();
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    m.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(md(a), md(b), md(dst)), attr, cpu());
    m.prim = dnnl::matmul(m.pd);
    return m;
  });
  execute(e->prim, e->pd,
          Args{{DNNL_ARG_SRC, make_mem(md(a), const_cast<float*>(a.p))},
               {DNNL_ARG_WEIGHTS, make_mem(md(b), const_cast<float*>(b.p))},
               {DNNL_ARG_DST, make_mem(md(dst), const_cast<float*>(dst.p))}});
}

bool batched_path(const Problem& p) { return p.H == p.Hk && p.B * p.H * p.L * p.S <= kMaxScores; }

// Row r of head (b, h) of a dense [B, H, L, S] buffer.
float* row_of(float* buf, const Problem& p, int64_t row) { return buf + row * p.S; }

// body(t) for t in [0, n) on the engine's own OpenMP team (as oneDNN's primitives
// use it; the host's parallel_for stayed on one thread from the queue's worker),
// each task on one thread; the first exception is rethrown here.
template <class Body>
void run_tasks(int64_t n, Body&& body) {
  const int threads = static_cast<int>(std::min<int64_t>(current_threads(), n));
  if (threads <= 1) {
    for (int64_t t = 0; t < n; ++t) body(t);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    try {
      Threads one(1);
      body(t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// A rectangle of heads: batches [b0, b0 + nb) x heads [h0, h0 + nh).
struct Piece {
  int64_t b0, nb, h0, nh;
};
Operand sub(const Operand& o, const Piece& pc) {
  return {o.p + pc.b0 * o.strides[0] + pc.h0 * o.strides[1], {pc.nb, pc.nh, o.dims[2], o.dims[3]}, o.strides};
}

// oneDNN 2.6 runs a batched matmul whose operand has its rows outermost in memory
// (nn.MultiheadAttention's q, k and v: [L, B*H, E] viewed as [B, H, L, E]) on its
// plain gemm path instead of brgemm: forward and backward took 1.5x the time they
// take on dense heads (8x4x64x32). Such an operand's piece is copied to dense heads
// in a thread-local buffer first; a copy of the piece costs a few percent of that.
bool rows_outermost(const Operand& o) {
  const memory::dim outer = o.dims[0] > 1 ? o.strides[0] : o.strides[1];
  return o.dims[2] > 1 && o.strides[2] > outer;
}

// Copies rows between a [nb, nh, rows, cols] operand and a dense one (unit-stride rows).
void copy_rows(const Operand& from, const Operand& to) {
  const size_t bytes = static_cast<size_t>(from.dims[3]) * sizeof(float);
  for (memory::dim b = 0; b < from.dims[0]; ++b)
    for (memory::dim h = 0; h < from.dims[1]; ++h)
      for (memory::dim r = 0; r < from.dims[2]; ++r)
        std::memcpy(const_cast<float*>(to.p) + b * to.strides[0] + h * to.strides[1] + r * to.strides[2],
                    from.p + b * from.strides[0] + h * from.strides[1] + r * from.strides[2], bytes);
}

// A piece of an operand as the products read or write it: the operand itself, or a
// dense copy in scratch slot `slot`. Inputs are copied in at construction; an
// output staged here is copied out by flush().
class Staged {
 public:
  Staged(const Operand& whole, const Piece& pc, size_t slot, bool input) : target_(sub(whole, pc)), view_(target_) {
    if (!rows_outermost(whole)) return;
    const auto& d = target_.dims;
    view_ = dense(scratch(slot, static_cast<size_t>(d[0] * d[1] * d[2] * d[3])).data(), d[0], d[1], d[2], d[3]);
    staged_ = true;
    if (input) copy_rows(target_, view_);
  }
  const Operand& operator*() const { return view_; }
  void flush() const {
    if (staged_) copy_rows(view_, target_);
  }

 private:
  Operand target_, view_;
  bool staged_ = false;
};

// Runs `body` on every head. With several threads, the heads are cut into one run
// of consecutive (batch, head) pairs per thread (each at most three rectangles),
// and each thread runs the whole chain of products and row loops on its own heads
// on one thread: one parallel region per call rather than one per product.
template <class Body>
void for_heads(const Problem& p, Body&& body) {
  const int64_t n = p.B * p.H, threads = std::min<int64_t>(current_threads(), n);
  if (threads <= 1) return body(Piece{0, p.B, 0, p.H});
  run_tasks(threads, [&](int64_t t) {
    int64_t first = n * t / threads, last = n * (t + 1) / threads;  // pairs [first, last)
    while (first < last) {
      const int64_t b = first / p.H, h = first % p.H;
      if (h == 0 && last - first >= p.H) {  // whole batches
        const int64_t nb = (last - first) / p.H;
        body(Piece{b, nb, 0, p.H});
        first += nb * p.H;
      } else {  // part of one batch
        const int64_t nh = std::min(p.H - h, last - first);
        body(Piece{b, 1, h, nh});
        first += nh;
      }
    }
  });
}

// Calls row(b, h, i, r) for every query row of a piece (r: its index in [B, H, L]).
template <class Row>
void piece_rows(const Problem& p, const Piece& pc, Row&& row) {
  for (int64_t b = pc.b0; b < pc.b0 + pc.nb; ++b)
    for (int64_t h = pc.h0; h < pc.h0 + pc.nh; ++h)
      for (int64_t i = 0; i < p.L; ++i) row(b, h, i, (b * p.H + h) * p.L + i);
}

void forward_batched(const Problem& p, const Mat& o, float* lse_p, const int64_t (&ls)[3]) {
  Buffers buf;
  float* s = buf.floats(p.B * p.H * p.L * p.S);
  const Operand scores = dense(s, p.B, p.H, p.L, p.S);
  const Operand q = operand(p.q, p.B, p.H, p.L, p.E), k = operand(p.k, p.B, p.H, p.S, p.E),
                v = operand(p.v, p.B, p.H, p.S, p.Ev), out = operand(o, p.B, p.H, p.L, p.Ev);
  for_heads(p, [&](const Piece& pc) {
    const Staged sq(q, pc, 2, true), sk(k, pc, 3, true), sv(v, pc, 4, true), so(out, pc, 5, false);
    matmul(*sq, (*sk).t(), sub(scores, pc), p.scale);
    piece_rows(p, pc, [&](int64_t b, int64_t h, int64_t i, int64_t r) {
      float* row = row_of(s, p, r);
      const int64_t n = visible_cols(p, i, 1);  // causal: the keys after row i get weight 0
      mask_scores(p, b, h, i, 1, n, row, p.S);
      lse_p[b * ls[0] + h * ls[1] + i * ls[2]] = softmax_row(row, n);
      std::fill(row + n, row + p.S, 0.0f);
    });
    matmul(sub(scores, pc), *sv, *so, 1.0f);
    so.flush();
  });
}

void fused_attention(const sdk::Call& call) {
  Buffers copies;
  const Problem p = problem_of(call, 0, 3, 4, 5, 7, &copies);
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
  if (batched_path(p)) return forward_batched(p, o, lse_p, {ls0, ls1, ls2});
  run_tasks(p.B * p.H * blocks, [&](int64_t t) {
    const int64_t blk = t % blocks, bh = t / blocks, b = bh / p.H, h = bh % p.H, hk = h / group;
    const int64_t r0 = blk * kRows, m = std::min(kRows, p.L - r0), n = visible_cols(p, r0, m);
    std::vector<float>& sbuf = scratch(0, static_cast<size_t>(m * std::max<int64_t>(n, 1)));
    float* s = sbuf.data();
    gemm('N', 'T', m, n, p.E, p.scale, p.q.at(b, h) + r0 * p.q.ld, p.q.ld, p.k.at(b, hk), p.k.ld, 0.0f, s, n);
    mask_scores(p, b, h, r0, m, n, s, n);
    for (int64_t i = 0; i < m; ++i) lse_p[b * ls0 + h * ls1 + (r0 + i) * ls2] = softmax_row(s + i * n, n);
    gemm('N', 'N', m, p.Ev, n, 1.0f, s, n, p.v.at(b, hk), p.v.ld, 0.0f, o.mut(b, h) + r0 * o.ld, o.ld);
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

void backward_batched(const Problem& p, const Mat& go, const float* lse_p, const int64_t (&ls)[3], const Mat& dq,
                      const Mat& dk, const Mat& dv, const std::optional<Bias>& dbias) {
  Buffers buf;
  const int64_t rows = p.B * p.H * p.L;
  float* s = buf.floats(rows * p.S);
  float* dp = buf.floats(rows * p.S);
  const Operand P = dense(s, p.B, p.H, p.L, p.S), dS = dense(dp, p.B, p.H, p.L, p.S);
  const Operand q = operand(p.q, p.B, p.H, p.L, p.E), k = operand(p.k, p.B, p.H, p.S, p.E),
                v = operand(p.v, p.B, p.H, p.S, p.Ev), g = operand(go, p.B, p.H, p.L, p.Ev),
                gq = operand(dq, p.B, p.H, p.L, p.E), gk = operand(dk, p.B, p.H, p.S, p.E),
                gv = operand(dv, p.B, p.H, p.S, p.Ev);
  for_heads(p, [&](const Piece& pc) {
    const Staged sq(q, pc, 2, true), sk(k, pc, 3, true), sv(v, pc, 4, true), sg(g, pc, 5, true),
        sgq(gq, pc, 6, false), sgk(gk, pc, 7, false), sgv(gv, pc, 8, false);
    // P = exp(scale q.k + mask - lse)
    matmul(*sq, (*sk).t(), sub(P, pc), p.scale);
    piece_rows(p, pc, [&](int64_t b, int64_t h, int64_t i, int64_t r) {
      float* row = row_of(s, p, r);
      const int64_t n = visible_cols(p, i, 1);
      mask_scores(p, b, h, i, 1, n, row, p.S);
      probs_row(row, n, lse_p[b * ls[0] + h * ls[1] + i * ls[2]]);
      std::fill(row + n, row + p.S, 0.0f);
    });
    // dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(P * dP))
    matmul(sub(P, pc).t(), *sg, *sgv, 1.0f);
    matmul(*sg, (*sv).t(), sub(dS, pc), 1.0f);
    piece_rows(p, pc, [&](int64_t, int64_t, int64_t, int64_t r) { dscore_row(row_of(s, p, r), row_of(dp, p, r), p.S); });
    // dQ = scale dS K;  dK = scale dS^T Q
    matmul(sub(dS, pc), *sk, *sgq, p.scale);
    matmul(sub(dS, pc).t(), *sq, *sgk, p.scale);
    for (const Staged* o : {&sgq, &sgk, &sgv}) o->flush();
  });
  if (dbias) {  // rare (a float mask that needs a gradient): one thread, rows in order
    std::mutex unused;
    for (int64_t r = 0; r < rows; ++r)
      add_bias_grad(*dbias, r / (p.H * p.L), r / p.L % p.H, r % p.L, 1, p.S, row_of(dp, p, r), &unused);
  }
}

void fused_attention_backward(const sdk::Call& call) {
  Buffers copies;
  const Problem p = problem_of(call, 1, 4, 12, 13, 16, &copies);
  const sdk::Tensor go_t = call.tensor(0), lse = call.tensor(7);
  const Mat go = mat_of(call, go_t, "grad_out", &copies);
  OPENREG_SDK_REQUIRE(is_f32(lse.dtype()) && lse.dim() == 3, call.op_name(), ": logsumexp ", lse.describe(),
                      " must be float32 [B, H, L]");
  const Mat dq = mat_of(call, call.output(0), "grad_query"), dk = mat_of(call, call.output(1), "grad_key"),
            dv = mat_of(call, call.output(2), "grad_value");
  std::optional<Bias> dbias;
  // Autograd asks for grad_attn_bias (grad_input_mask[3]) only when the mask needs a
  // gradient; else it stays zero (with BERT's float padding mask, 8x4x64x32, summing
  // it anyway was 85 of the backward's ~620 us).
  const sdk::Span<int64_t> wanted = call.bool_list(5);
  const bool bias_grad_wanted = wanted.size() < 4 || wanted[3] != 0;
  if (call.num_outputs() > 3 && call.output(3).defined() && call.output(3).numel() > 0) {
    const sdk::Tensor g = call.output(3);
    const int64_t full[4] = {p.B, p.H, p.L, p.S};
    dbias = bias_of(call, g, full);
    // Zeroed whole (a bool mask's gradient stays zero); dense, as the Meta kernel makes it.
    OPENREG_SDK_REQUIRE(g.is_contiguous(), call.op_name(), ": a strided grad_attn_bias is left to the next engine");
    std::memset(g.bytes(), 0, static_cast<size_t>(g.numel() * g.element_size()));
    if (dbias->is_bool || !bias_grad_wanted) dbias.reset();
  }
  const float* lse_p = lse.data<float>();
  const int64_t ls0 = lse.stride(0), ls1 = lse.stride(1), ls2 = lse.stride(2), group = p.H / p.Hk;
  std::mutex bias_lock;
  Threads threads(threads_of(p, 2.5));
  if (batched_path(p)) return backward_batched(p, go, lse_p, {ls0, ls1, ls2}, dq, dk, dv, dbias);
  // One task per (batch, key head): it owns that head's grad_key and grad_value.
  run_tasks(p.B * p.Hk, [&](int64_t t) {
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
          probs_row(row, n, l);
        }
        // dV += P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(P * dP))
        gemm('T', 'N', n, p.Ev, m, 1.0f, s, n, gob, go.ld, 1.0f, dv.mut(b, hk), dv.ld);
        gemm('N', 'T', m, n, p.Ev, 1.0f, gob, go.ld, p.v.at(b, hk), p.v.ld, 0.0f, dp, n);
        for (int64_t i = 0; i < m; ++i) {
          const float* pr = s + i * n;
          float* dr = dp + i * n;
          dscore_row(pr, dr, n);
        }
        if (dbias) add_bias_grad(*dbias, b, h, r0, m, n, dp, &bias_lock);
        // dQ = scale dS K;  dK += scale dS^T Q
        gemm('N', 'N', m, p.E, n, p.scale, dp, n, p.k.at(b, hk), p.k.ld, 0.0f, dq.mut(b, h) + r0 * dq.ld, dq.ld);
        gemm('T', 'N', n, p.E, m, p.scale, dp, n, qb, p.q.ld, 1.0f, dk.mut(b, hk), dk.ld);
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
