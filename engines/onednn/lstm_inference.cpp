// The engine's own LSTM inference loop (aten::mkldnn_rnn_layer with train=False,
// ops_rnn_layer.cpp) for small hidden sizes on two threads or more, where oneDNN
// 2.6's LSTM primitive pays more per time step than the step computes on a second
// thread (a 2-layer, 128-wide LSTM of batch 8 took 2.4 ms on one thread, 7.5 on
// two), so the engine kept it on one. On one thread the primitive is the faster.
//
// The input projection of every step is one GEMM (dnnl_sgemm), the biases added.
// Then, step by step, the hidden projection and the cell are one pass per block
// of L hidden units (L = the build's vector width, vec.hpp): the four gates' L
// columns for a few batch rows stay in registers over the hidden dimension, and
// the cell update is applied to them there, so a step writes only h and c. W_hh
// is repacked per call (the weights may change between calls) so that a block's
// weights are contiguous. The threads share the blocks of units and meet at a
// barrier after each step: every block of the next step reads all of h.
#include "lstm_inference.hpp"

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

OPENREG_ALWAYS_INLINE float sigmoid(float x) { return 1.0f / (1.0f + vmath::exp(-x)); }

// Per ISA (the kernel is written once, in a macro: vector code in a helper
// without the target attribute was lowered for the baseline ISA, each broadcast
// becoming 16 single-lane moves in the AVX-512 build):
//  - cell_block_<isa><RR>: the gates' pre-activations of RR batch rows
//    [m0, m0 + RR) for the L units of block u (gx: this step's input projection
//    [B, 4H]), kept in registers over the hidden dimension, then their cell update;
//  - step_<isa>: one time step of the blocks [u0, u1), R rows at a time, the rest
//    one by one. R: as many rows as keep 4R accumulators, 4 weights and a
//    broadcast in the build's registers (16 in AVX2, 32 in AVX-512).
#define OPENREG_LSTM_STEP(SUFFIX, ATTR, V, R)                                                                 \
  template <int RR>                                                                                          \
  ATTR OPENREG_ALWAYS_INLINE void cell_block_##SUFFIX(const float* h_prev, const float* w_block, const float* gx, \
                                                      float* c, float* h, int64_t m0, int64_t u, int64_t H) {  \
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
      float z[4][L];                                                                                         \
      for (int g = 0; g < 4; ++g) vec::store<V>(z[g], acc[r][g]);                                            \
      float* cr = c + (m0 + r) * H + u * L;                                                                  \
      float* hr = h + (m0 + r) * H + u * L;                                                                  \
      for (int64_t l = 0; l < L; ++l) {                                                                      \
        const float cn = sigmoid(z[1][l]) * cr[l] + sigmoid(z[0][l]) * vmath::tanh(z[2][l]);                 \
        cr[l] = cn;                                                                                          \
        hr[l] = sigmoid(z[3][l]) * vmath::tanh(cn);                                                          \
      }                                                                                                      \
    }                                                                                                        \
  }                                                                                                          \
  ATTR void step_##SUFFIX(const float* h_prev, const float* packed, const float* gx, float* c, float* h,        \
                          int64_t B, int64_t H, int64_t u0, int64_t u1) {                                     \
    for (int64_t u = u0; u < u1; ++u) {                                                                     \
      const float* w_block = packed + u * H * 4 * kLanes<V>;                                                \
      int64_t m = 0;                                                                                         \
      for (; m + R <= B; m += R) cell_block_##SUFFIX<R>(h_prev, w_block, gx, c, h, m, u, H);                 \
      for (; m < B; ++m) cell_block_##SUFFIX<1>(h_prev, w_block, gx, c, h, m, u, H);                         \
    }                                                                                                        \
  }
OPENREG_LSTM_STEP(sse, , V4, 2)
OPENREG_LSTM_STEP(avx2, OPENREG_TARGET_AVX2, V8, 2)
OPENREG_LSTM_STEP(avx512, OPENREG_TARGET_AVX512, V16, 4)
#undef OPENREG_LSTM_STEP

using StepFn = void (*)(const float*, const float*, const float*, float*, float*, int64_t, int64_t, int64_t, int64_t);

struct Kernel {
  StepFn step;
  int64_t lanes;
};
Kernel kernel() {
  switch (loops::width()) {
    case loops::Width::Avx512: return {step_avx512, 16};
    case loops::Width::Avx2: return {step_avx2, 8};
    default: return {step_sse, 4};
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

}  // namespace

bool lstm_inference_loop_serves(int64_t T, int64_t B, int64_t I, int64_t H) {
  // W_hh of up to 1 MiB (hidden 256): every batch row block re-reads a unit
  // block's weights, which must stay in cache. Larger layers are GEMM-sized
  // steps, oneDNN's primitive's ground. On one thread the primitive is the faster
  // (a 64-to-128 layer of batch 8 over 32 steps: 607 us against the loop's 642).
  return H > 0 && H % kernel().lanes == 0 && 16 * H * H <= (int64_t{1} << 20) && loop_threads(T, B, I, H) > 1;
}

void lstm_inference_loop(const LstmInferenceArgs& a, Buffers& b) {
  const int64_t T = a.steps, B = a.batch, I = a.input_size, H = a.hidden;
  const Kernel k = kernel();
  // The input projection of every step: gx [T, B, 4H] = x @ w_ih^T + bias.
  float* gx = b.floats(T * B * 4 * H);
  for (int64_t row = 0; row < T * B; ++row) std::memcpy(gx + row * 4 * H, a.bias, static_cast<size_t>(4 * H) * 4);
  {
    Threads threads(threads_for(2.0 * static_cast<double>(T * B) * static_cast<double>(4 * H * I), kFlopGrain));
    const int64_t ld = std::max<int64_t>(I, 1);  // sgemm rejects a leading dimension of 0
    const dnnl_status_t st = dnnl_sgemm('N', 'T', T * B, 4 * H, I, 1.0f, a.x, ld, a.w_ih, ld, 1.0f, gx, 4 * H);
    if (st != dnnl_success) sdk::fail(OPENREG_STATUS_INTERNAL, "onednn: the LSTM input projection failed");
  }
  float* packed = b.floats(4 * H * H);
  pack_w_hh(a.w_hh, packed, H, k.lanes);
  std::memcpy(a.cy, a.cx, static_cast<size_t>(B * H) * 4);  // the cell state, updated in place
  const int64_t blocks = H / k.lanes;
  const int n = loop_threads(T, B, I, H);
  // n > 1 (lstm_inference_loop_serves): the threads split the blocks of units.
#pragma omp parallel num_threads(n)
  {
    const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t u0 = blocks * id / nt, u1 = blocks * (id + 1) / nt;
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = a.reverse ? T - 1 - s : s;
      const float* h_prev = s == 0 ? a.hx : a.y + (a.reverse ? t + 1 : t - 1) * B * H;
      k.step(h_prev, packed, gx + t * B * 4 * H, a.cy, a.y + t * B * H, B, H, u0, u1);
#pragma omp barrier
    }
  }
  const int64_t last = a.reverse ? 0 : T - 1;
  std::memcpy(a.hy, T > 0 ? a.y + last * B * H : a.hx, static_cast<size_t>(B * H) * 4);
}

}  // namespace onednn_engine
