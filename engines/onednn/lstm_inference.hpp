// The engine's own LSTM inference loop (lstm_inference.cpp): one float32 layer in
// one direction, every operand contiguous, time-major.
#pragma once

#include "common.hpp"

namespace onednn_engine {

struct LstmInferenceArgs {
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

// Whether the loop serves this layer (steps, batch, input and hidden size) on this
// CPU and thread count (else oneDNN's primitive does).
bool lstm_inference_loop_serves(int64_t steps, int64_t batch, int64_t input_size, int64_t hidden);

// Runs the layer; scratch from `b`.
void lstm_inference_loop(const LstmInferenceArgs& args, Buffers& b);

}  // namespace onednn_engine
