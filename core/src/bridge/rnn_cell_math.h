// The fused RNN cells' formulas (aten::_thnn_fused_lstm_cell and its backward,
// aten::_thnn_fused_gru_cell and its backward) in ordinary aten ops, on tensors of
// any device. Two users: core's composite for the device (core/src/aten/rnn_cells.cpp,
// each op routed to the engines) and the reference engine's CPU kernels for these
// ops (engines/aten_ref/rnn_cells_cpu.cpp; ATen has CUDA kernels only), which the
// conformance suites compare engines against.
//
// The workspace format is a contract between every implementation (a forward and
// its backward may run on different engines):
//  - LSTM [B, 4H]: the activated gates i, f, g, o;
//  - GRU  [B, 5H]: the activated gates r, z, n, then hx and the hidden part of
//    the new gate (hidden_gates' third chunk plus its bias), as CUDA keeps them.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

namespace openreg::rnn_cell {

using OptTensor = std::optional<at::Tensor>;

inline at::Tensor sum_with(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias_a, const OptTensor& bias_b) {
  at::Tensor s = a + b;
  if (bias_a && bias_a->defined()) s.add_(*bias_a);
  if (bias_b && bias_b->defined()) s.add_(*bias_b);
  return s;
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx, const OptTensor& input_bias,
                                                         const OptTensor& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() && input_gates.size(1) % 4 == 0,
              "openreg: _thnn_fused_lstm_cell expects input_gates and hidden_gates of shape [batch, 4 * hidden], got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  at::Tensor gates = sum_with(input_gates, hidden_gates, input_bias, hidden_bias);
  auto chunks = gates.chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const OptTensor& grad_hy, const OptTensor& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  at::Tensor tanh_cy = cy.tanh();
  at::Tensor d_cy = grad_cy && grad_cy->defined() ? grad_cy->clone() : at::zeros_like(cy);
  at::Tensor d_o = at::zeros_like(o);
  if (grad_hy && grad_hy->defined()) {
    d_cy.add_(*grad_hy * o * (1 - tanh_cy * tanh_cy));
    d_o = *grad_hy * tanh_cy * o * (1 - o);
  }
  at::Tensor d_i = d_cy * g * i * (1 - i);
  at::Tensor d_f = d_cy * cx * f * (1 - f);
  at::Tensor d_g = d_cy * i * (1 - g * g);
  at::Tensor grad_gates = at::cat({d_i, d_f, d_g, d_o}, 1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, d_cy * f, grad_bias};
}

inline std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const OptTensor& input_bias,
                                            const OptTensor& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() && input_gates.size(1) % 3 == 0,
              "openreg: _thnn_fused_gru_cell expects input_gates and hidden_gates of shape [batch, 3 * hidden], got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  at::Tensor in_part = input_gates, hid_part = hidden_gates;
  if (input_bias && input_bias->defined()) in_part = in_part + *input_bias;
  if (hidden_bias && hidden_bias->defined()) hid_part = hid_part + *hidden_bias;
  auto ig = in_part.chunk(3, 1);
  auto hg = hid_part.chunk(3, 1);
  at::Tensor r = (ig[0] + hg[0]).sigmoid();
  at::Tensor z = (ig[1] + hg[1]).sigmoid();
  at::Tensor hn = hg[2].contiguous();
  at::Tensor n = (ig[2] + r * hn).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hn}, 1)};
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
                                                                                         const at::Tensor& workspace,
                                                                                         bool has_bias) {
  auto parts = workspace.chunk(5, 1);
  const at::Tensor &r = parts[0], &z = parts[1], &n = parts[2], &hx = parts[3], &hn = parts[4];
  at::Tensor d_z = grad_hy * (hx - n) * z * (1 - z);
  at::Tensor d_n = grad_hy * (1 - z) * (1 - n * n);
  at::Tensor d_r = d_n * hn * r * (1 - r);
  at::Tensor grad_input_gates = at::cat({d_r, d_z, d_n}, 1);
  at::Tensor grad_hidden_gates = at::cat({d_r, d_z, d_n * r}, 1);
  at::Tensor grad_hx = grad_hy * z;
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0);
    grad_hidden_bias = grad_hidden_gates.sum(0);
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace openreg::rnn_cell
