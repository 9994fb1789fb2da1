// The engine's own LSTM loop (aten::mkldnn_rnn_layer and its backward,
// ops_rnn_layer.cpp) for small hidden sizes, where oneDNN 2.6's LSTM primitives
// pay more per time step than the step computes on a second thread (a 2-layer,
// 128-wide LSTM of batch 8 took 2.4 ms on one thread, 7.5 on two), where its
// training primitives were slower than a step at a time, and, on one thread, for
// inference on batches up to 32 (kInferLoopMaxBatch).
//
// Forward: the input projection of every step is one GEMM (dnnl_sgemm), the
// biases added. Then, step by step, the hidden projection and the cell are one
// pass per block of L hidden units (L = the build's vector width, vec.hpp): the
// four gates' L columns for a few batch rows stay in registers over the hidden
// dimension, and the cell update is applied to them there, so a step writes only
// h and c (and, in training, the activated gates and tanh(c) for the backward).
// W_hh is repacked per call (the weights may change between calls) so that a
// block's weights are contiguous. The threads share the blocks of units and meet
// at a barrier after each step: every block of the next step reads all of h.
//
// Backward, from the last step to the first: each thread turns the gradients of
// its units' h and c into those of the four gates' pre-activations (kept for all
// steps), the threads meet, and each computes its units' share of the previous
// h's gradient, dz @ W_hh, in registers; W_hh's rows are already contiguous over
// units. After the loop the input's and both weights' gradients are one GEMM
// each over all steps, and the bias's a column sum.
#include "lstm_loop.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "loops.hpp"
#include "vec.hpp"
#include "vmath.hpp"

namespace onednn_engine {

namespace {

using vec::kLanes;
using vec::V16;
using vec::V4;
using vec::V8;

// W_hh [4H, H] (gates i, f, g, o) repacked for blocks of L units: for block u
// and hidden index k, the L weights of gate i, then f, g, o.
void pack_w_hh(const float* w_hh, float* packed, int64_t H, int64_t L) {
  for (int64_t g = 0; g < 4; ++g)
    for (int64_t j = 0; j < H; ++j) {
      const float* row = w_hh + (g * H + j) * H;
      float* out = packed + (j / L) * H * 4 * L + g * L + j % L;
      for (int64_t k = 0; k < H; ++k) out[k * 4 * L] = row[k];
    }
}

// The least work of one step (both projections) worth a second thread: the
// threads meet at a barrier after every step.
constexpr double kMinStepFlops = 2.5e5;

// Where a step reads and writes its cell state (and, in training, what it keeps).
struct Cells {
  const float* c_in;
  float* c_out;
  float* gates;   // [B, 4H] or null
  float* tanh_c;  // [B, H] or null
};

OPENREG_ALWAYS_INLINE float sigmoid(float x) { return 1.0f / (1.0f + vmath::exp(-x)); }

// One backward step's operands for the gate gradients (gate_grads_<isa>): rows of the
// saved activated gates [B, 4H] and tanh(c) [B, H], the previous cell state, the
// output's gradient (or null), the running dh and dc [B, H] (dc updated), and dz
// [B, 4H] written.
struct GateGrads {
  const float* gates;
  const float* tanh_c;
  const float* c_prev;
  const float* gy;
  const float* dh;
  float* dc;
  float* dz;
};

// Per ISA (the kernels are written once, in macros: vector code in a helper
// without the target attribute was lowered for the baseline ISA, each broadcast
// becoming 16 single-lane moves in the AVX-512 build):
//  - cell_block_<isa><RR>: the gates' pre-activations of RR batch rows
//    [m0, m0 + RR) for the L units of block u (gx: this step's input projection
//    [B, 4H]), kept in registers over the hidden dimension, then their cell update
//    (c_in: the previous cell state, c_out: this step's; the same buffer in
//    inference). With `gates`, also this step's activated gates [B, 4H] and tanh(c);
//  - step_<isa>: one time step of the blocks [u0, u1), R rows at a time, the rest
//    one by one. R: as many rows as keep 4R accumulators, 4 weights and a
//    broadcast in the build's registers (16 in AVX2, 32 in AVX-512);
//  - dh_block_<isa><RR> / dh_step_<isa>: the backward's dh[:, block] = dz @
//    W_hh[:, block] for RR rows, over the 4H gate columns;
//  - gate_grads_<isa>: the backward's dz of one step for the units [j0, j1), scalar
//    code the compiler vectorises for the build's target (at the baseline ISA it
//    was 2.4% of an AVX2 machine's LSTM training step).
#define OPENREG_LSTM_STEP(SUFFIX, ATTR, V, R)                                                                 \
  template <int RR>                                                                                          \
  ATTR OPENREG_ALWAYS_INLINE void cell_block_##SUFFIX(const float* h_prev, const float* w_block, const float* gx, \
                                                      const Cells& cs, float* h, int64_t m0, int64_t u,       \
                                                      int64_t H) {                                           \
    constexpr int64_t L = kLanes<V>;                                                                         \
    const V one = V{} + 1.0f;                                                                                \
    V acc[RR][4];                                                                                            \
    for (int r = 0; r < RR; ++r)                                                                             \
      for (int g = 0; g < 4; ++g) acc[r][g] = vec::load<V>(gx + (m0 + r) * 4 * H + g * H + u * L);          \
    for (int64_t k = 0; k < H; ++k) {                                                                        \
      const float* w = w_block + k * 4 * L;                                                                  \
      const V w0 = vec::load<V>(w), w1 = vec::load<V>(w + L), w2 = vec::load<V>(w + 2 * L),                 \
              w3 = vec::load<V>(w + 3 * L);                                                                  \
      for (int r = 0; r < RR; ++r) {                                                                         \
        const V x = h_prev[(m0 + r) * H + k] * one; /* a broadcast: 1 * x is x for every float */           \
        acc[r][0] += x * w0;                                                                                 \
        acc[r][1] += x * w1;                                                                                 \
        acc[r][2] += x * w2;                                                                                 \
        acc[r][3] += x * w3;                                                                                 \
      }                                                                                                      \
    }                                                                                                        \
    for (int r = 0; r < RR; ++r) {                                                                           \
      /* Local arrays first: the activations vectorise only without possible aliasing. And each              \
         loop `omp simd`: GCC vectorised tanh(cn) in some instances and left its clamps as                   \
         branches in others (a scalar division an element, a fifth of the forward's time). */                \
      float z[4][L], cn[L], tc[L], hv[L];                                                                    \
      for (int g = 0; g < 4; ++g) vec::store<V>(z[g], acc[r][g]);                                            \
      _Pragma("omp simd") for (int64_t l = 0; l < L; ++l) {                                                  \
        z[0][l] = sigmoid(z[0][l]);                                                                          \
        z[1][l] = sigmoid(z[1][l]);                                                                          \
        z[2][l] = vmath::tanh(z[2][l]);                                                                      \
        z[3][l] = sigmoid(z[3][l]);                                                                          \
      }                                                                                                      \
      const int64_t at = (m0 + r) * H + u * L;                                                               \
      _Pragma("omp simd") for (int64_t l = 0; l < L; ++l) cn[l] =                                            \
          z[1][l] * cs.c_in[at + l] + z[0][l] * z[2][l];                                                     \
      _Pragma("omp simd") for (int64_t l = 0; l < L; ++l) tc[l] = vmath::tanh(cn[l]);                        \
      _Pragma("omp simd") for (int64_t l = 0; l < L; ++l) hv[l] = z[3][l] * tc[l];                           \
      std::memcpy(cs.c_out + at, cn, sizeof cn);                                                             \
      std::memcpy(h + at, hv, sizeof hv);                                                                    \
      if (cs.gates) {                                                                                        \
        for (int g = 0; g < 4; ++g) std::memcpy(cs.gates + (m0 + r) * 4 * H + g * H + u * L, z[g], sizeof cn); \
        std::memcpy(cs.tanh_c + at, tc, sizeof tc);                                                          \
      }                                                                                                      \
    }                                                                                                        \
  }                                                                                                          \
  ATTR void step_##SUFFIX(const float* h_prev, const float* packed, const float* gx, const Cells& cs, float* h, \
                          int64_t B, int64_t H, int64_t u0, int64_t u1) {                                     \
    for (int64_t u = u0; u < u1; ++u) {                                                                     \
      const float* w_block = packed + u * H * 4 * kLanes<V>;                                                \
      int64_t m = 0;                                                                                         \
      for (; m + R <= B; m += R) cell_block_##SUFFIX<R>(h_prev, w_block, gx, cs, h, m, u, H);                \
      for (; m < B; ++m) cell_block_##SUFFIX<1>(h_prev, w_block, gx, cs, h, m, u, H);                        \
    }                                                                                                        \
  }                                                                                                          \
  template <int RR>                                                                                          \
  ATTR OPENREG_ALWAYS_INLINE void dh_block_##SUFFIX(const float* dz, const float* w_hh, float* dh, int64_t m0,  \
                                                    int64_t j0, int64_t H) {                                 \
    const V one = V{} + 1.0f;                                                                                \
    V acc[RR];                                                                                               \
    for (int r = 0; r < RR; ++r) acc[r] = V{};                                                               \
    for (int64_t k = 0; k < 4 * H; ++k) {                                                                    \
      const V w = vec::load<V>(w_hh + k * H + j0);                                                           \
      for (int r = 0; r < RR; ++r) acc[r] += (dz[(m0 + r) * 4 * H + k] * one) * w;                           \
    }                                                                                                        \
    for (int r = 0; r < RR; ++r) vec::store<V>(dh + (m0 + r) * H + j0, acc[r]);                              \
  }                                                                                                          \
  ATTR void dh_step_##SUFFIX(const float* dz, const float* w_hh, float* dh, int64_t B, int64_t H, int64_t u0,  \
                             int64_t u1) {                                                                   \
    for (int64_t u = u0; u < u1; ++u) {                                                                     \
      int64_t m = 0;                                                                                         \
      for (; m + 2 * R <= B; m += 2 * R) dh_block_##SUFFIX<2 * R>(dz, w_hh, dh, m, u * kLanes<V>, H);         \
      for (; m < B; ++m) dh_block_##SUFFIX<1>(dz, w_hh, dh, m, u * kLanes<V>, H);                            \
    }                                                                                                        \
  }                                                                                                          \
  template <bool kGy>                                                                                        \
  ATTR OPENREG_ALWAYS_INLINE void gate_row_##SUFFIX(const float* __restrict__ gr, const float* __restrict__ tanh_c, \
                                                  const float* __restrict__ c_prev, const float* __restrict__ gy, \
                                                  const float* __restrict__ dh, float* __restrict__ dc,        \
                                                  float* __restrict__ dr, int64_t H, int64_t j0, int64_t j1) {  \
    for (int64_t j = j0; j < j1; ++j) {                                                                     \
      const float i = gr[j], f = gr[H + j], gg = gr[2 * H + j], o = gr[3 * H + j], tc = tanh_c[j];          \
      const float dhj = kGy ? dh[j] + gy[j] : dh[j];                                                        \
      const float dcj = dc[j] + dhj * o * (1.0f - tc * tc);                                                  \
      dr[j] = dcj * gg * i * (1.0f - i);                                                                    \
      dr[H + j] = dcj * c_prev[j] * f * (1.0f - f);                                                         \
      dr[2 * H + j] = dcj * i * (1.0f - gg * gg);                                                           \
      dr[3 * H + j] = dhj * tc * o * (1.0f - o);                                                            \
      dc[j] = dcj * f;                                                                                      \
    }                                                                                                       \
  }                                                                                                         \
  ATTR void gate_grads_##SUFFIX(const GateGrads& a, int64_t B, int64_t H, int64_t j0, int64_t j1) {            \
    for (int64_t m = 0; m < B; ++m) {                                                                       \
      const float* gr = a.gates + m * 4 * H;                                                                \
      if (a.gy)                                                                                             \
        gate_row_##SUFFIX<true>(gr, a.tanh_c + m * H, a.c_prev + m * H, a.gy + m * H, a.dh + m * H,           \
                                a.dc + m * H, a.dz + m * 4 * H, H, j0, j1);                                 \
      else                                                                                                  \
        gate_row_##SUFFIX<false>(gr, a.tanh_c + m * H, a.c_prev + m * H, nullptr, a.dh + m * H, a.dc + m * H, \
                                 a.dz + m * 4 * H, H, j0, j1);                                              \
    }                                                                                                       \
  }
OPENREG_LSTM_STEP(sse, , V4, 2)
OPENREG_LSTM_STEP(avx2, OPENREG_TARGET_AVX2, V8, 2)
OPENREG_LSTM_STEP(avx512, OPENREG_TARGET_AVX512, V16, 4)
#undef OPENREG_LSTM_STEP

using StepFn = void (*)(const float*, const float*, const float*, const Cells&, float*, int64_t, int64_t, int64_t,
                        int64_t);
using DhStepFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
using GateGradsFn = void (*)(const GateGrads&, int64_t, int64_t, int64_t, int64_t);

struct Kernel {
  StepFn step;
  DhStepFn dh_step;
  GateGradsFn gate_grads;
  int64_t lanes;
};
Kernel kernel() {
  switch (loops::width()) {
    case loops::Width::Avx512: return {step_avx512, dh_step_avx512, gate_grads_avx512, 16};
    case loops::Width::Avx2: return {step_avx2, dh_step_avx2, gate_grads_avx2, 8};
    default: return {step_sse, dh_step_sse, gate_grads_sse, 4};
  }
}

// The threads the loop would run a layer on: by the layer's work, as oneDNN's
// primitives get them (kFlopGrain), but one while a step is too small to pay for
// its barrier, and no more than the blocks of units.
int loop_threads(int64_t T, int64_t B, int64_t I, int64_t H) {
  const double step_flops = 2.0 * static_cast<double>(B) * static_cast<double>(4 * H * (H + I));
  if (step_flops < kMinStepFlops) return 1;
  return static_cast<int>(
      std::min<int64_t>(H / kernel().lanes, threads_for(static_cast<double>(T) * step_flops, kFlopGrain)));
}

// Row-major C[M, N] = alpha * op(A) op(B) + beta * C with oneDNN's sgemm, on the
// threads `flops` earn.
void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Threads threads(threads_for(2.0 * static_cast<double>(M * N) * static_cast<double>(K), kFlopGrain));
  // sgemm rejects a leading dimension of 0
  const dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, 1.0f, A, std::max<int64_t>(lda, 1), B,
                                      std::max<int64_t>(ldb, 1), beta, C, std::max<int64_t>(ldc, 1));
  if (st != dnnl_success) sdk::fail(OPENREG_STATUS_INTERNAL, "onednn: a GEMM of the LSTM loop failed");
}

// Step s's time index, and the index of the step before it (whose h and c it reads).
int64_t time_of(const LstmLoopArgs& a, int64_t s) { return a.reverse ? a.steps - 1 - s : s; }
int64_t prev_time(const LstmLoopArgs& a, int64_t t) { return a.reverse ? t + 1 : t - 1; }

}  // namespace

// Inference on one thread: the loop up to this batch, oneDNN's primitive beyond.
// Measured on AVX-512, 1 thread, a 2-layer LSTM over 32 steps (us a layer, best
// of 3 processes, loop / primitive): hidden 128 with batch 4: 115 / 190, batch 8:
// 610 / 667, batch 16: 1148 / 1376, batch 32: 2565 / 2916, batch 64: 6775 / 5652.
// (The loop took 642 us against 607 at batch 8 until its activations were
// vectorised in every instance, see cell_block.)
constexpr int64_t kInferLoopMaxBatch = 32;

bool lstm_loop_serves(int64_t T, int64_t B, int64_t I, int64_t H, bool train) {
  // W_hh of up to 1 MiB (hidden 256): every batch row block re-reads a unit
  // block's weights, which must stay in cache. Larger layers are GEMM-sized
  // steps, oneDNN's primitive's ground.
  return H > 0 && H % kernel().lanes == 0 && 16 * H * H <= (int64_t{1} << 20) &&
         (train || B <= kInferLoopMaxBatch || loop_threads(T, B, I, H) > 1);
}

void lstm_loop_forward(const LstmLoopArgs& a, const LstmLoopRecord* record, Buffers& b) {
  const int64_t T = a.steps, B = a.batch, I = a.input_size, H = a.hidden;
  const Kernel k = kernel();
  // The input projection of every step: gx [T, B, 4H] = x @ w_ih^T + bias.
  float* gx = b.floats(T * B * 4 * H);
  for (int64_t row = 0; row < T * B; ++row) std::memcpy(gx + row * 4 * H, a.bias, static_cast<size_t>(4 * H) * 4);
  sgemm('N', 'T', T * B, 4 * H, I, a.x, I, a.w_ih, I, 1.0f, gx, 4 * H);
  float* packed = b.floats(4 * H * H);
  pack_w_hh(a.w_hh, packed, H, k.lanes);
  if (!record) std::memcpy(a.cy, a.cx, static_cast<size_t>(B * H) * 4);  // updated in place
  const int64_t blocks = H / k.lanes;
  const int n = loop_threads(T, B, I, H);
#pragma omp parallel num_threads(n)
  {
    const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t u0 = blocks * id / nt, u1 = blocks * (id + 1) / nt;
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = time_of(a, s), tp = prev_time(a, t);
      const float* h_prev = s == 0 ? a.hx : a.y + tp * B * H;
      Cells cs{a.cy, a.cy, nullptr, nullptr};
      if (record)
        cs = Cells{s == 0 ? a.cx : record->c + tp * B * H, record->c + t * B * H, record->gates + t * B * 4 * H,
                   record->tanh_c + t * B * H};
      k.step(h_prev, packed, gx + t * B * 4 * H, cs, a.y + t * B * H, B, H, u0, u1);
#pragma omp barrier
    }
  }
  const int64_t last = time_of(a, T - 1);
  std::memcpy(a.hy, T > 0 ? a.y + last * B * H : a.hx, static_cast<size_t>(B * H) * 4);
  if (record) std::memcpy(a.cy, T > 0 ? record->c + last * B * H : a.cx, static_cast<size_t>(B * H) * 4);
}

void lstm_loop_backward(const LstmLoopArgs& a, const LstmLoopRecord& rec, const LstmLoopGrads& g, Buffers& b) {
  const int64_t T = a.steps, B = a.batch, I = a.input_size, H = a.hidden;
  const Kernel k = kernel();
  // dz [T, B, 4H]: the gradients of the gates' pre-activations (i, f, g, o).
  float* dz = b.floats(T * B * 4 * H);
  // The running gradients of h and c, each thread writing its own units' columns.
  float* dh = b.floats(B * H);
  float* dc = b.floats(B * H);
  const size_t state_bytes = static_cast<size_t>(B * H) * 4;
  if (g.ghy)
    std::memcpy(dh, g.ghy, state_bytes);
  else
    std::memset(dh, 0, state_bytes);
  if (g.gcy)
    std::memcpy(dc, g.gcy, state_bytes);
  else
    std::memset(dc, 0, state_bytes);
  const int64_t blocks = H / k.lanes;
  const int n = loop_threads(T, B, I, H);
#pragma omp parallel num_threads(n)
  {
    const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t u0 = blocks * id / nt, u1 = blocks * (id + 1) / nt;
    const int64_t j0 = u0 * k.lanes, j1 = u1 * k.lanes;
    for (int64_t s = T - 1; s >= 0; --s) {
      const int64_t t = time_of(a, s);
      float* dzt = dz + t * B * 4 * H;
      const GateGrads step{rec.gates + t * B * 4 * H,
                           rec.tanh_c + t * B * H,
                           s == 0 ? a.cx : rec.c + prev_time(a, t) * B * H,
                           g.gy ? g.gy + t * B * H : nullptr,
                           dh,
                           dc,
                           dzt};
      k.gate_grads(step, B, H, j0, j1);
#pragma omp barrier
      // The previous step's h gradient for this thread's units: every gate column of dz.
      k.dh_step(dzt, a.w_hh, dh, B, H, u0, u1);
    }
  }
  std::memcpy(g.dhx, dh, state_bytes);
  std::memcpy(g.dcx, dc, state_bytes);
  // Over all steps: dx = dz @ W_ih, dW_ih = dz^T x, dW_hh = sum over steps of
  // dz[t]^T h_prev[t] (the steps after the first read y of the step before, the
  // first reads hx), db = dz's column sums.
  sgemm('N', 'N', T * B, I, 4 * H, dz, 4 * H, a.w_ih, I, 0.0f, g.dx, I);
  sgemm('T', 'N', 4 * H, I, T * B, dz, 4 * H, a.x, I, 0.0f, g.dw_ih, I);
  const int64_t first = time_of(a, 0);
  sgemm('T', 'N', 4 * H, H, B, dz + first * B * 4 * H, 4 * H, a.hx, H, 0.0f, g.dw_hh, H);
  if (T > 1) {
    // Forward: steps 1..T-1 read y[0..T-2]; reverse: steps 0..T-2 read y[1..T-1].
    const float* dz_rest = a.reverse ? dz : dz + B * 4 * H;
    const float* y_prev = a.reverse ? a.y + B * H : a.y;
    sgemm('T', 'N', 4 * H, H, (T - 1) * B, dz_rest, 4 * H, y_prev, H, 1.0f, g.dw_hh, H);
  }
  std::memset(g.db, 0, static_cast<size_t>(4 * H) * 4);
  for (int64_t row = 0; row < T * B; ++row)
    for (int64_t c = 0; c < 4 * H; ++c) g.db[c] += dz[row * 4 * H + c];
}

}  // namespace onednn_engine
