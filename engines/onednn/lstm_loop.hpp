// The engine's own LSTM loop (lstm_loop.cpp): one float32 layer in one direction,
// every operand contiguous, time-major; the forward for inference and training,
// and the backward of a training forward.
#pragma once

#include "common.hpp"

namespace onednn_engine {

struct LstmLoopArgs {
  int64_t steps, batch, input_size, hidden;
  bool reverse;  // steps T-1 .. 0
  const float* x;     // [T, B, I]
  const float* w_ih;  // [4H, I], gates i, f, g, o
  const float* w_hh;  // [4H, H]
  const float* bias;  // [4H]: b_ih + b_hh
  const float* hx;    // [B, H]
  const float* cx;    // [B, H]
  float* y;           // [T, B, H]
  float* hy;          // [B, H]
  float* cy;          // [B, H]
};

// What a training forward keeps for its backward (inside the workspace): per step
// the four activated gates [T, B, 4H] (i, f, g, o), the cell state c [T, B, H] and
// tanh(c) [T, B, H].
struct LstmLoopRecord {
  float* gates;
  float* c;
  float* tanh_c;
  static int64_t floats(int64_t T, int64_t B, int64_t H) { return T * B * 6 * H; }
  static LstmLoopRecord at(float* p, int64_t T, int64_t B, int64_t H) {
    return {p, p + T * B * 4 * H, p + T * B * 5 * H};
  }
};

// Whether the loop serves this layer (steps, batch, input and hidden size) on this
// CPU and thread count (else oneDNN's primitives do). Training layers: on any
// thread count (the backward pays per step as much as the forward).
bool lstm_loop_serves(int64_t steps, int64_t batch, int64_t input_size, int64_t hidden, bool train);

// Runs the layer forward; with `record`, keeps what the backward reads. Scratch from `b`.
void lstm_loop_forward(const LstmLoopArgs& args, const LstmLoopRecord* record, Buffers& b);

struct LstmLoopGrads {
  const float* gy;   // [T, B, H] or null (zeros)
  const float* ghy;  // [B, H] or null
  const float* gcy;  // [B, H] or null
  float* dx;         // [T, B, I]
  float* dw_ih;      // [4H, I]
  float* dw_hh;      // [4H, H]
  float* db;         // [4H]: the gradient of either bias
  float* dhx;        // [B, H]
  float* dcx;        // [B, H]
};

// The backward of a training forward of the same arguments (its y in args.y) and `record`.
void lstm_loop_backward(const LstmLoopArgs& args, const LstmLoopRecord& record, const LstmLoopGrads& g, Buffers& b);

}  // namespace onednn_engine
