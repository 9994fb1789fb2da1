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
// gru_layer.cpp does the same for GRU; rnn_layer_stack.h has what both share.
// With create_graph=True the backward runs the layer again under autograd,
// step by step, so that the gradient is differentiable as on CPU.
//
// Without a backward to keep (inference, no_grad), a float32 layer is one
// call of aten::mkldnn_rnn_layer, CPU's whole-layer op, when the chain serves
// it: an engine's own whole-layer kernel, or the reference engine replaying
// CPU's oneDNN kernel. That saves the 2 ops per time step the step path costs.
#include "../bridge/torch_abi.h"
#include "../runtime/runtime.h"
#include "rnn_layer_stack.h"

#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mkldnn_rnn_layer.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace openreg {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LayerRun {
  Tensor y, h_n, c_n;
  std::vector<Tensor> c, gates;  // per step, in time order: cell state, activated gates
};

// One layer, step by step, in whatever autograd mode the caller is in.
// x [T, B, I], h0 and c0 [B, H], w_ih [4H, I], w_hh [4H, H], biases [4H] or
// none; reverse: the backward direction of a bidirectional layer (T-1 .. 0).
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

// One layer and direction as one autograd node. Outputs y [T, B, H] in time
// order, h_n and c_n [B, H]. keep_for_backward: false when autograd won't call
// backward, so the forward keeps nothing.
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

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4];
    if (at::GradMode::is_enabled()) {  // create_graph=True: a differentiable gradient
      LayerRun again = run_layer(x, h0, c0, w_ih, w_hh, rnn::defined_or_none(saved[5]),
                                 rnn::defined_or_none(saved[6]), reverse);
      return rnn::differentiate_again({again.y, again.h_n, again.c_n}, grads,
                                      variable_list(saved.begin(), saved.begin() + 7), 9);
    }
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
      const Tensor c_prev = s == 0 ? c0 : c[reverse ? t + 1 : t - 1];
      Tensor dh_total = dh;
      if (grad_y.defined()) dh_total = dh.defined() ? grad_y[t] + dh : grad_y[t];
      auto [dg, dc_prev, unused] =
          at::_thnn_fused_lstm_cell_backward_impl(dh_total, dc, c_prev, c[t], gates[t], /*has_bias=*/false);
      d_gates[t] = dg;
      dh = at::mm(dg, w_hh);
      dc = dc_prev;
    }
    const int64_t rows = steps * x.size(1), hidden = w_hh.size(1);
    const Tensor dg_rows = at::stack(d_gates).view({rows, 4 * hidden});
    const Tensor dg_cols = dg_rows.t();
    Tensor d_x, d_w_ih, d_w_hh, d_b;
    if (ctx->needs_input_grad(0)) d_x = at::mm(dg_rows, w_ih).view(x.sizes());
    if (ctx->needs_input_grad(3)) d_w_ih = at::mm(dg_cols, x.reshape({rows, x.size(2)}));
    if (ctx->needs_input_grad(4))
      d_w_hh = at::mm(dg_cols, rnn::states_before_steps(y, h0, reverse).reshape({rows, hidden}));
    if (has_bias && (ctx->needs_input_grad(5) || ctx->needs_input_grad(6))) d_b = dg_rows.sum(0);
    if (!dc.defined() && ctx->needs_input_grad(2)) dc = at::zeros_like(c0);
    if (!dh.defined() && ctx->needs_input_grad(1)) dh = at::zeros_like(h0);
    return {d_x, dh, dc, d_w_ih, d_w_hh, d_b, d_b, Tensor(), Tensor()};
  }
};

// True when a layer without backward can be one aten::mkldnn_rnn_layer call:
// float32 (the dtype every engine's and CPU's whole-layer kernel has) and some
// engine of the chain serves the op.
bool whole_layer_op_applies(const Tensor& input) {
  if (input.scalar_type() != at::kFloat) return false;
  openreg_dtype dtype;
  if (!bridge::to_abi_dtype(input.scalar_type(), &dtype)) return false;
  return !route_table().route("aten::mkldnn_rnn_layer", dtype, true)->candidates.empty();
}

// One layer and direction as one aten::mkldnn_rnn_layer call (no backward).
std::vector<Tensor> whole_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                                const std::optional<Tensor>& b_hh, bool reverse) {
  const int64_t hidden = w_hh.size(1);
  const bool has_biases = b_ih.has_value();
  const Tensor zeros = has_biases ? Tensor() : at::zeros({4 * hidden}, w_ih.options());
  // CPU's kernel (which the reference engine replays) reads every operand as
  // contiguous and time-major.
  auto dense = [](const Tensor& t) { return t.contiguous(); };
  auto [y, h_n, c_n, unused] =
      at::mkldnn_rnn_layer(dense(x), dense(w_ih), dense(w_hh), dense(has_biases ? *b_ih : zeros),
                           dense(has_biases ? *b_hh : zeros), dense(h0), dense(c0), reverse,
                           /*batch_sizes=*/{}, /*mode=LSTM*/ 2, hidden, /*num_layers=*/1, has_biases,
                           /*bidirectional=*/false, /*batch_first=*/false, /*train=*/false);
  return {y, h_n, c_n};
}

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, at::TensorList hx, at::TensorList params,
                                        bool has_biases, int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first) {
  const rnn::Stack stack{num_layers, bidirectional ? 2 : 1, has_biases};
  if (hx.size() != 2 || !rnn::layer_path_applies(input, hx, params, stack, /*gates=*/4))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  const bool keep = rnn::needs_backward(input, hx, params);
  const bool one_call = !keep && whole_layer_op_applies(input);
  const int64_t per = stack.params_per_layer();
  auto out = rnn::run_stack(input, stack, dropout, train, batch_first, [&](const Tensor& x, int64_t k, bool reverse) {
    const std::optional<Tensor> none;
    if (one_call) {
      at::AutoDispatchBelowADInplaceOrView no_autograd;  // nothing here needs a backward
      return whole_layer(x, hx[0][k], hx[1][k], params[k * per], params[k * per + 1],
                         has_biases ? params[k * per + 2] : none, has_biases ? params[k * per + 3] : none, reverse);
    }
    return LstmLayer::apply(x, hx[0][k], hx[1][k], params[k * per], params[k * per + 1],
                            has_biases ? params[k * per + 2] : none, has_biases ? params[k * per + 3] : none,
                            reverse, keep);
  });
  return {out[0], out[1], out[2]};
}

}  // namespace

// Autograd's key for this device: the layer is its own autograd node. The
// backend key: inference mode skips the autograd keys and lands here.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("lstm.input", lstm); }
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("lstm.input", lstm); }

}  // namespace openreg
