// nn.LSTM on the device a whole layer at a time, with a backward of its own.
//
// ATen's composite aten::lstm runs an accelerator's LSTM one time step at a
// time and leaves the backward to autograd, step by step too: per step and
// layer, the input projection (a GEMM on one step's rows), the hidden
// projection, the fused cell, and in the backward the two weight-gradient
// GEMMs of that step and their accumulation. On CPU, ATen hands the layer to
// oneDNN's RNN primitive instead. This file is the device's counterpart: each
// (layer, direction) is one autograd node that
//  - forward: projects every step's input in one GEMM, then per step one
//    hidden GEMM and one fused cell (aten::_thnn_fused_lstm_cell);
//  - backward: per step (last first) one fused cell backward and one GEMM for
//    the hidden state's gradient; then the weight gradients, the bias gradient
//    and the input's gradient, each one GEMM or sum over all steps.
// Every op here routes to the engines like any other (rnn_cells.cpp says how
// the fused cells do).
//
// Configurations this does not cover (projections, packed sequences, or a
// call that doesn't look like nn.LSTM's) run ATen's composite as before.
// With create_graph=True the backward runs the layer again under autograd,
// step by step, so that the gradient is differentiable as on CPU.
#include "../runtime/runtime.h"

#include <ATen/ATen.h>
#include <ATen/ops/lstm_native.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace openreg {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Inputs x [T, B, I], h0 and c0 [B, H], w_ih [4H, I], w_hh [4H, H], biases [4H]
// or undefined. Outputs y [T, B, H] in time order, h_n and c_n [B, H].
// reverse: the backward direction of a bidirectional layer (steps T-1 .. 0).
// keep_for_backward: false when autograd won't call backward (no input needs a
// gradient, or grad mode is off), so the forward keeps nothing.
struct LayerRun {
  Tensor y, h_n, c_n;
  std::vector<Tensor> c, gates;  // per step, in time order: cell state, activated gates
};

// One layer, step by step, with whatever autograd mode the caller is in.
LayerRun run_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                   const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh, bool reverse) {
  const int64_t steps = x.size(0);
  // Both biases go to the cell, as ATen's own cells pass them: the cell's
  // double-backward formula is wrong for hidden_bias when input_bias is None
  // (PyTorch 2.13), so the projection takes no bias.
  const Tensor x_gates = at::linear(x, w_ih);
  const Tensor w_hh_t = w_hh.t();
  LayerRun r;
  std::vector<Tensor> h(steps);
  r.c.resize(steps), r.gates.resize(steps);
  Tensor h_prev = h0, c_prev = c0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    auto [hy, cy, ws] = at::_thnn_fused_lstm_cell(x_gates[t], at::mm(h_prev, w_hh_t), c_prev, b_ih, b_hh);
    h[t] = hy, r.c[t] = cy, r.gates[t] = ws;
    h_prev = hy, c_prev = cy;
  }
  r.y = at::stack(h), r.h_n = h_prev, r.c_n = c_prev;
  return r;
}

std::optional<Tensor> defined_or_none(const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; }

struct LstmLayer : public torch::autograd::Function<LstmLayer> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& h0, const Tensor& c0,
                               const Tensor& w_ih, const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                               const std::optional<Tensor>& b_hh, bool reverse, bool keep_for_backward) {
    LayerRun r = run_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse);
    if (keep_for_backward) {
      ctx->saved_data["reverse"] = reverse;
      ctx->save_for_backward({x, h0, c0, w_ih, w_hh, b_ih.value_or(Tensor()), b_hh.value_or(Tensor()), r.y,
                              at::stack(r.c), at::stack(r.gates)});
    }
    return {r.y, r.h_n, r.c_n};
  }

  // create_graph=True: the gradient must itself be differentiable, so the layer
  // runs again step by step under autograd (the fused cell's derivative is
  // differentiable) and autograd differentiates that.
  static variable_list differentiable_backward(const variable_list& saved, const variable_list& grads,
                                               bool reverse) {
    const Tensor &b_ih = saved[5], &b_hh = saved[6];
    LayerRun r = run_layer(saved[0], saved[1], saved[2], saved[3], saved[4], defined_or_none(b_ih),
                           defined_or_none(b_hh), reverse);
    variable_list outputs, grad_outputs, inputs;
    const Tensor produced[3] = {r.y, r.h_n, r.c_n};
    for (int k = 0; k < 3; ++k)
      if (grads[k].defined()) outputs.push_back(produced[k]), grad_outputs.push_back(grads[k]);
    std::vector<int> wanted;
    for (int k = 0; k < 7; ++k)
      if (saved[k].defined() && saved[k].requires_grad()) wanted.push_back(k), inputs.push_back(saved[k]);
    variable_list result(9);
    if (outputs.empty() || inputs.empty()) return result;
    variable_list got = torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/true,
                                              /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < wanted.size(); ++k) result[wanted[k]] = got[k];
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto saved = ctx->get_saved_variables();
    if (at::GradMode::is_enabled()) return differentiable_backward(saved, grads, reverse);
    const Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4];
    const bool has_bias = saved[5].defined();
    const Tensor &y = saved[7], &c = saved[8], &gates = saved[9];
    const Tensor &grad_y = grads[0], &grad_hn = grads[1], &grad_cn = grads[2];
    const int64_t steps = x.size(0);

    // Walk the steps in the opposite order of the forward. dh, dc: the
    // gradients reaching the step's outputs from the later steps (undefined: none).
    Tensor dh = grad_hn, dc = grad_cn;
    std::vector<Tensor> d_gates(steps);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      const int64_t t_prev = reverse ? t + 1 : t - 1;  // the step processed before t
      const Tensor c_prev = s == 0 ? c0 : c[t_prev];
      Tensor dh_total = dh;
      if (grad_y.defined()) dh_total = dh.defined() ? grad_y[t] + dh : grad_y[t];
      auto [dg, dc_prev, unused] =
          at::_thnn_fused_lstm_cell_backward_impl(dh_total, dc, c_prev, c[t], gates[t], /*has_bias=*/false);
      d_gates[t] = dg;
      dh = at::mm(dg, w_hh);
      dc = dc_prev;
    }
    const int64_t batch = x.size(1), hidden = w_hh.size(1);
    const Tensor dg_rows = at::stack(d_gates).view({steps * batch, 4 * hidden});
    // The hidden state each step started from, in time order.
    const Tensor h_first = h0.unsqueeze(0);
    const Tensor h_prev = steps == 1 ? h_first
                          : reverse  ? at::cat({y.narrow(0, 1, steps - 1), h_first})
                                     : at::cat({h_first, y.narrow(0, 0, steps - 1)});
    const Tensor dg_cols = dg_rows.t();
    Tensor d_x, d_w_ih, d_w_hh, d_b;
    if (ctx->needs_input_grad(0)) d_x = at::mm(dg_rows, w_ih).view({steps, batch, x.size(2)});
    if (ctx->needs_input_grad(3)) d_w_ih = at::mm(dg_cols, x.reshape({steps * batch, x.size(2)}));
    if (ctx->needs_input_grad(4)) d_w_hh = at::mm(dg_cols, h_prev.reshape({steps * batch, hidden}));
    if (has_bias && (ctx->needs_input_grad(5) || ctx->needs_input_grad(6))) d_b = dg_rows.sum(0);
    if (!dc.defined() && ctx->needs_input_grad(2)) dc = at::zeros_like(c0);
    if (!dh.defined() && ctx->needs_input_grad(1)) dh = at::zeros_like(h0);
    return {d_x, dh, dc, d_w_ih, d_w_hh, d_b, d_b, Tensor(), Tensor()};
  }
};

// True when the call is one nn.LSTM makes without projections: hx = (h0, c0)
// of [layers * directions, B, H], params 2 or 4 per layer and direction, and a
// 3-d input on this device. Anything else goes to ATen's composite, which
// checks and reports it as it always has.
bool layer_path_applies(const Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
                        int64_t num_layers, bool bidirectional) {
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t per = has_biases ? 4 : 2;
  if (input.dim() != 3 || hx.size() != 2 || num_layers < 1) return false;
  if (static_cast<int64_t>(params.size()) != num_layers * directions * per) return false;
  if (!input.is_privateuseone() || hx[0].dim() != 3 || !hx[0].sizes().equals(hx[1].sizes())) return false;
  if (hx[0].size(0) != num_layers * directions) return false;
  const int64_t hidden = hx[0].size(2);
  for (int64_t k = 0; k < num_layers * directions; ++k) {
    const Tensor& w_hh = params[k * per + 1];
    if (w_hh.dim() != 2 || w_hh.size(0) != 4 * hidden || w_hh.size(1) != hidden) return false;  // projections
  }
  return input.size(0) > 0;
}

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, at::TensorList hx, at::TensorList params,
                                        bool has_biases, int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first) {
  if (!layer_path_applies(input, hx, params, has_biases, num_layers, bidirectional))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t per = has_biases ? 4 : 2;
  Tensor layer_input = (batch_first ? input.transpose(0, 1) : input).contiguous();
  bool keep = false;
  if (at::GradMode::is_enabled()) {
    keep = input.requires_grad() || hx[0].requires_grad() || hx[1].requires_grad();
    for (const Tensor& p : params) keep = keep || p.requires_grad();
  }
  std::vector<Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t k = layer * directions + d;
      const std::optional<Tensor> none;
      auto out = LstmLayer::apply(layer_input, hx[0][k], hx[1][k], params[k * per], params[k * per + 1],
                                  has_biases ? params[k * per + 2] : none, has_biases ? params[k * per + 3] : none,
                                  /*reverse=*/d == 1, keep);
      outputs.push_back(out[0]);
      h_n.push_back(out[1]);
      c_n.push_back(out[2]);
    }
    layer_input = directions == 1 ? outputs[0] : at::cat(outputs, 2);
    if (dropout > 0 && train && layer + 1 < num_layers) layer_input = at::dropout(layer_input, dropout, train);
  }
  Tensor output = batch_first ? layer_input.transpose(0, 1) : layer_input;
  return {output, at::stack(h_n), at::stack(c_n)};
}

}  // namespace

// Autograd's key for this device: the layer is its own autograd node. The
// backend key: inference mode skips the autograd keys and lands here.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("lstm.input", lstm); }
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("lstm.input", lstm); }

}  // namespace openreg
