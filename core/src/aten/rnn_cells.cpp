// The fused RNN cells ATen calls for accelerator tensors: routed to the engines,
// with a composite of device ops as the fallback.
//
// ATen's LSTM and GRU layers take a different path on accelerators than on CPU:
// for a CUDA, XPU or PrivateUse1 input each time step calls
// aten::_thnn_fused_lstm_cell / aten::_thnn_fused_gru_cell, and their backward
// aten::_thnn_fused_lstm_cell_backward_impl / aten::_thnn_fused_gru_cell_backward.
// These four ops have CUDA kernels only: no CPU kernel and no composite, so the
// router's reference path (ATen's CPU kernels) cannot run them. They are the only
// ops of that class a torch.nn layer reaches on this device.
//
// route_call offers each call to the engines of the chain (the SDK's kernels,
// engines/common/include/openreg/sdk/rnn.hpp); when none ahead of the reference
// engine serves it, or every one declines, it runs the composite below, written
// with ordinary aten ops that each route to the engines as usual. The composite is
// registered for composite_route.h's kCompositeSlot, which is where route_call's
// run_composite finds it.
//
// The workspace format is a contract between every implementation (a forward and
// its backward may run on different engines, or one on an engine and the other
// here):
//  - LSTM [B, 4H]: the activated gates i, f, g, o;
//  - GRU  [B, 5H]: the activated gates r, z, n, then hx and the hidden part of
//    the new gate (hidden_gates' third chunk plus its bias), as CUDA keeps them.
#include "composite_route.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace openreg {
namespace {

using OptTensor = std::optional<at::Tensor>;

at::Tensor sum_with(const at::Tensor& a, const at::Tensor& b, const OptTensor& bias_a, const OptTensor& bias_b) {
  at::Tensor s = a + b;
  if (bias_a && bias_a->defined()) s.add_(*bias_a);
  if (bias_b && bias_b->defined()) s.add_(*bias_b);
  return s;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const OptTensor& grad_hy, const OptTensor& grad_cy,
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

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
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

// Output shapes for route_call, which sizes outputs with Meta kernels: ATen has
// none for the GRU cells (the LSTM cells have Python ones). The backward's bias
// gradients are undefined without biases, as the composite returns them.
std::tuple<at::Tensor, at::Tensor> gru_cell_meta(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                 const at::Tensor& hx, const OptTensor& input_bias,
                                                 const OptTensor& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() && input_gates.size(1) % 3 == 0,
              "openreg: _thnn_fused_gru_cell expects input_gates and hidden_gates of shape [batch, 3 * hidden], got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  const int64_t batch = input_gates.size(0), hidden = input_gates.size(1) / 3;
  return {at::empty({batch, hidden}, input_gates.options()), at::empty({batch, 5 * hidden}, input_gates.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward_meta(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == 5 * grad_hy.size(1),
              "openreg: _thnn_fused_gru_cell_backward expects grad_hy [batch, hidden] and workspace "
              "[batch, 5 * hidden], got ",
              grad_hy.sizes(), " and ", workspace.sizes());
  const int64_t batch = grad_hy.size(0), hidden = grad_hy.size(1);
  auto gates = [&] { return at::empty({batch, 3 * hidden}, grad_hy.options()); };
  auto bias = [&] { return has_bias ? at::empty({3 * hidden}, grad_hy.options()) : at::Tensor(); };
  return {gates(), gates(), at::empty({batch, hidden}, grad_hy.options()), bias(), bias()};
}

// The composite, where route_call's fallback finds it (no PrivateUse1 kernel: the
// calls reach route_call, which offers them to the engines first).
struct RegisterRnnComposites {
  RegisterRnnComposites() {
    static torch::Library lib(torch::Library::IMPL, "aten", kCompositeSlot, __FILE__, __LINE__);
    lib.impl("_thnn_fused_lstm_cell", lstm_cell);
    lib.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
    lib.impl("_thnn_fused_gru_cell", gru_cell);
    lib.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
  }
} g_register_rnn_composites;

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", gru_cell_meta);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward_meta);
}

}  // namespace openreg
