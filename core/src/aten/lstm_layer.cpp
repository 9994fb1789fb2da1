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
// A float32 layer is instead one call of aten::mkldnn_rnn_layer, CPU's
// whole-layer op, when the chain serves it: an engine's own whole-layer
// kernel, or the reference engine replaying CPU's oneDNN kernel. That saves
// the 2 ops per time step the step path costs. Without a backward to keep
// (inference, no_grad) it is called with train=False. In training it is called
// with train=True and the layer's backward is one aten::mkldnn_rnn_layer_backward
// call, on every chain that serves both (training_calls_apply); the forward's
// workspace output is the serving engine's private record for its own backward
// (its size and layout are the engine's): docs/design.md says how both calls
// reach the same engine. A training step (SGD) of a 2-layer LSTM, 64 to 128
// wide, over 32 steps of batch 8, two calls against the step path: onednn (its
// own loop) 4.25 and 2.85 ms (1 and 2 threads) against 4.40 and 4.83; eigen's
// chain (the reference engine's calls) 4.91 and 3.67 against 5.70 and 5.29.
#include "../bridge/torch_abi.h"
#include "../runtime/runtime.h"
#include "rnn_layer_stack.h"

#include <ATen/Parallel.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mkldnn_rnn_layer.h>
#include <ATen/ops/mkldnn_rnn_layer_backward.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>

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

// The route of `op` for a float32 input (the dtype every engine's and CPU's
// whole-layer kernel has), or null for another dtype or when no engine of the
// chain serves it.
Route* whole_layer_route(const char* op, const Tensor& input) {
  if (input.scalar_type() != at::kFloat) return nullptr;
  openreg_dtype dtype;
  if (!bridge::to_abi_dtype(input.scalar_type(), &dtype)) return nullptr;
  Route* r = route_table().route(op, dtype, true);
  return r->candidates.empty() ? nullptr : r;
}

// The engines a call is offered to, in order, as route_call offers it: the pinned
// engine first, else a tuned route's preferred engine of the call's thread setting,
// shape or size class.
std::vector<const Engine*> offer_order(const Route& r, const Tensor& routed_by) {
  std::vector<const Engine*> order;
  const Engine* pinned = pinned_engine(r);
  const int first = pinned              ? r.candidate_of(pinned)
                    : r.follows_table() ? r.first_candidate(thread_setting(at::get_num_threads()),
                                                            size_class(routed_by.numel()),
                                                            shape_key(routed_by.sizes().data(), routed_by.dim()))
                                        : -1;
  if (first >= 0) order.push_back(r.candidates[static_cast<size_t>(first)].engine);
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (static_cast<int>(i) != first) order.push_back(r.candidates[i].engine);
  return order;
}

// True when a training layer can be the two whole-layer calls. The forward's
// workspace means something only to the engine that made it, so both calls must
// reach the same engine. Engines promise (docs/design.md) to take a train=True
// forward exactly when they take its backward; this checks the rest: the
// engines that serve the backward come in the same order in both routes (a
// tuned table might order the two ops differently), so the first engine that
// takes the forward is the first to take the backward. Both calls are routed by
// the layer's input (their first tensor): one size class.
bool training_calls_apply(const Tensor& input) {
  Route* fwd = whole_layer_route("aten::mkldnn_rnn_layer", input);
  Route* bwd = whole_layer_route("aten::mkldnn_rnn_layer_backward", input);
  if (!fwd || !bwd) return false;
  const auto backward_order = offer_order(*bwd, input);
  std::vector<const Engine*> forward_order;
  for (const Engine* e : offer_order(*fwd, input))
    if (std::find(backward_order.begin(), backward_order.end(), e) != backward_order.end()) forward_order.push_back(e);
  return forward_order == backward_order;
}

// CPU's kernel (which the reference engine replays) reads every operand as
// contiguous and time-major; without biases it wants zero ones (it ignores them).
Tensor dense(const Tensor& t) { return t.contiguous(); }
Tensor bias_or_zeros(const std::optional<Tensor>& b, const Tensor& w_hh) {
  return b ? dense(*b) : at::zeros({w_hh.size(0)}, w_hh.options());
}

// One layer and direction as one aten::mkldnn_rnn_layer call (no backward).
std::vector<Tensor> whole_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                                const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                                const std::optional<Tensor>& b_hh, bool reverse) {
  auto [y, h_n, c_n, unused] =
      at::mkldnn_rnn_layer(dense(x), dense(w_ih), dense(w_hh), bias_or_zeros(b_ih, w_hh), bias_or_zeros(b_hh, w_hh),
                           dense(h0), dense(c0), reverse, /*batch_sizes=*/{}, /*mode=LSTM*/ 2, w_hh.size(1),
                           /*num_layers=*/1, b_ih.has_value(), /*bidirectional=*/false, /*batch_first=*/false,
                           /*train=*/false);
  return {y, h_n, c_n};
}

// One layer and direction in training as one autograd node of two whole-layer
// calls: aten::mkldnn_rnn_layer (train=True) forward, whose workspace it keeps,
// and aten::mkldnn_rnn_layer_backward.
struct WholeLstmLayer : public torch::autograd::Function<WholeLstmLayer> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& h0, const Tensor& c0,
                               const Tensor& w_ih, const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                               const std::optional<Tensor>& b_hh, bool reverse) {
    // This node is the graph: the call runs below autograd, yet with grad mode
    // on, as CPU's kernel (which the reference engine replays on this thread:
    // the op is sized by its kernel, so it runs inline) keeps its workspace only then.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    at::AutoGradMode keep_workspace(true);
    auto [y, h_n, c_n, workspace] =
        at::mkldnn_rnn_layer(dense(x), dense(w_ih), dense(w_hh), bias_or_zeros(b_ih, w_hh),
                             bias_or_zeros(b_hh, w_hh), dense(h0), dense(c0), reverse, /*batch_sizes=*/{},
                             /*mode=LSTM*/ 2, w_hh.size(1), /*num_layers=*/1, b_ih.has_value(),
                             /*bidirectional=*/false, /*batch_first=*/false, /*train=*/true);
    ctx->saved_data["reverse"] = reverse;
    ctx->save_for_backward({x, h0, c0, w_ih, w_hh, b_ih.value_or(Tensor()), b_hh.value_or(Tensor()), y, h_n, c_n,
                            workspace});
    ctx->set_materialize_grads(false);  // an unused output's gradient goes as None, not as zeros
    return {y, h_n, c_n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4];
    const std::optional<Tensor> b_ih = rnn::defined_or_none(saved[5]), b_hh = rnn::defined_or_none(saved[6]);
    if (at::GradMode::is_enabled()) {  // create_graph=True: a differentiable gradient, step by step
      LayerRun again = run_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse);
      return rnn::differentiate_again({again.y, again.h_n, again.c_n}, grads,
                                      variable_list(saved.begin(), saved.begin() + 7), 8);
    }
    auto grad = [&](size_t k) { return grads[k].defined() ? std::optional<Tensor>(dense(grads[k])) : std::nullopt; };
    auto [d_x, d_w_ih, d_w_hh, d_b_ih, d_b_hh, d_h0, d_c0] = at::mkldnn_rnn_layer_backward(
        dense(x), dense(w_ih), dense(w_hh), bias_or_zeros(b_ih, w_hh), bias_or_zeros(b_hh, w_hh), dense(h0),
        dense(c0), saved[7], saved[8], saved[9], grad(0), grad(1), grad(2), reverse, /*mode=LSTM*/ 2,
        w_hh.size(1), /*num_layers=*/1, b_ih.has_value(), /*train=*/true, /*bidirectional=*/false,
        /*batch_sizes=*/{}, /*batch_first=*/false, saved[10]);
    if (!b_ih) d_b_ih = d_b_hh = Tensor();  // the kernel's gradients of the zero biases
    return {d_x, d_h0, d_c0, d_w_ih, d_w_hh, d_b_ih, d_b_hh, Tensor()};
  }
};

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, at::TensorList hx, at::TensorList params,
                                        bool has_biases, int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first) {
  const rnn::Stack stack{num_layers, bidirectional ? 2 : 1, has_biases};
  if (hx.size() != 2 || !rnn::layer_path_applies(input, hx, params, stack, /*gates=*/4))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  const bool keep = rnn::needs_backward(input, hx, params);
  const bool one_call = !keep && whole_layer_route("aten::mkldnn_rnn_layer", input);
  const int64_t per = stack.params_per_layer();
  auto out = rnn::run_stack(input, stack, dropout, train, batch_first, [&](const Tensor& x, int64_t k, bool reverse) {
    const std::optional<Tensor> none;
    const Tensor &h0 = hx[0][k], &c0 = hx[1][k], &w_ih = params[k * per], &w_hh = params[k * per + 1];
    const std::optional<Tensor> b_ih = has_biases ? params[k * per + 2] : none;
    const std::optional<Tensor> b_hh = has_biases ? params[k * per + 3] : none;
    if (one_call) {
      at::AutoDispatchBelowADInplaceOrView no_autograd;  // nothing here needs a backward
      return whole_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse);
    }
    // Per layer: each layer's input is its calls' size class.
    if (keep && training_calls_apply(x))
      return WholeLstmLayer::apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse);
    return LstmLayer::apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse, keep);
  });
  return {out[0], out[1], out[2]};
}

}  // namespace

// Autograd's key for this device: the layer is its own autograd node. The
// backend key: inference mode skips the autograd keys and lands here.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("lstm.input", lstm); }
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("lstm.input", lstm); }

}  // namespace openreg
