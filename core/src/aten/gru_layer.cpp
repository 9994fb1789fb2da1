// nn.GRU on the device a whole layer at a time, with a backward of its own:
// lstm_layer.cpp's approach (read its header) for GRU. Per layer and direction
// one autograd node: the input projection of every step is one GEMM, each step
// one hidden GEMM and one fused cell (aten::_thnn_fused_gru_cell); the
// backward walks the steps once (fused cell backward, one GEMM for the hidden
// state's gradient), then the input's gradient, the weight and bias gradients
// as one GEMM or sum each over all steps. Anything nn.GRU's call doesn't look
// like (packed sequences and such) runs ATen's composite.
#include "rnn_layer_stack.h"

#include <ATen/ops/gru_native.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace openreg {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LayerRun {
  Tensor y, h_n;
  std::vector<Tensor> workspace;  // per step, in time order (rnn_cells.cpp's format)
};

// x [T, B, I], h0 [B, H], w_ih [3H, I], w_hh [3H, H], biases [3H] or none.
LayerRun run_layer(const Tensor& x, const Tensor& h0, const Tensor& w_ih, const Tensor& w_hh,
                   const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh, bool reverse) {
  const int64_t steps = x.size(0);
  const Tensor x_gates = at::linear(x, w_ih);  // the biases go to the cell (b_hh sits inside r * (...))
  const Tensor w_hh_t = w_hh.t();
  LayerRun r;
  std::vector<Tensor> h(steps);
  r.workspace.resize(steps);
  Tensor h_prev = h0;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    auto [hy, ws] = at::_thnn_fused_gru_cell(x_gates[t], at::mm(h_prev, w_hh_t), h_prev, b_ih, b_hh);
    h[t] = hy, r.workspace[t] = ws;
    h_prev = hy;
  }
  r.y = at::stack(h), r.h_n = h_prev;
  return r;
}

struct GruLayer : public torch::autograd::Function<GruLayer> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& h0, const Tensor& w_ih,
                               const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                               const std::optional<Tensor>& b_hh, bool reverse, bool keep_for_backward) {
    LayerRun r = run_layer(x, h0, w_ih, w_hh, b_ih, b_hh, reverse);
    if (keep_for_backward) {
      ctx->saved_data["reverse"] = reverse;
      ctx->save_for_backward({x, h0, w_ih, w_hh, b_ih.value_or(Tensor()), b_hh.value_or(Tensor()), r.y,
                              at::stack(r.workspace)});
    }
    return {r.y, r.h_n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &h0 = saved[1], &w_ih = saved[2], &w_hh = saved[3];
    if (at::GradMode::is_enabled()) {  // create_graph=True: a differentiable gradient
      LayerRun again =
          run_layer(x, h0, w_ih, w_hh, rnn::defined_or_none(saved[4]), rnn::defined_or_none(saved[5]), reverse);
      return rnn::differentiate_again({again.y, again.h_n}, grads, variable_list(saved.begin(), saved.begin() + 6),
                                      8);
    }
    const bool has_bias = saved[4].defined();
    const Tensor &y = saved[6], &workspace = saved[7];
    const Tensor &grad_y = grads[0], &grad_hn = grads[1];
    const int64_t steps = x.size(0);

    Tensor dh = grad_hn;  // the gradient reaching the step's output from later steps
    std::vector<Tensor> d_input_gates(steps), d_hidden_gates(steps);
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      Tensor dh_total = dh;
      if (grad_y.defined()) dh_total = dh.defined() ? grad_y[t] + dh : grad_y[t];
      if (!dh_total.defined()) dh_total = at::zeros_like(h0);
      auto [d_ig, d_hg, d_hx, unused_i, unused_h] =
          at::_thnn_fused_gru_cell_backward(dh_total, workspace[t], /*has_bias=*/false);
      d_input_gates[t] = d_ig, d_hidden_gates[t] = d_hg;
      dh = d_hx + at::mm(d_hg, w_hh);
    }
    const int64_t rows = steps * x.size(1), hidden = w_hh.size(1);
    const Tensor d_ig_rows = at::stack(d_input_gates).view({rows, 3 * hidden});
    const Tensor d_hg_rows = at::stack(d_hidden_gates).view({rows, 3 * hidden});
    Tensor d_x, d_w_ih, d_w_hh, d_b_ih, d_b_hh;
    if (ctx->needs_input_grad(0)) d_x = at::mm(d_ig_rows, w_ih).view(x.sizes());
    if (ctx->needs_input_grad(2)) d_w_ih = at::mm(d_ig_rows.t(), x.reshape({rows, x.size(2)}));
    if (ctx->needs_input_grad(3))
      d_w_hh = at::mm(d_hg_rows.t(), rnn::states_before_steps(y, h0, reverse).reshape({rows, hidden}));
    if (has_bias && ctx->needs_input_grad(4)) d_b_ih = d_ig_rows.sum(0);
    if (has_bias && ctx->needs_input_grad(5)) d_b_hh = d_hg_rows.sum(0);
    return {d_x, dh, d_w_ih, d_w_hh, d_b_ih, d_b_hh, Tensor(), Tensor()};
  }
};

std::tuple<Tensor, Tensor> gru(const Tensor& input, const Tensor& hx, at::TensorList params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first) {
  const rnn::Stack stack{num_layers, bidirectional ? 2 : 1, has_biases};
  if (!rnn::layer_path_applies(input, {hx}, params, stack, /*gates=*/3))
    return at::native::gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  const bool keep = rnn::needs_backward(input, {hx}, params);
  const int64_t per = stack.params_per_layer();
  auto out = rnn::run_stack(input, stack, dropout, train, batch_first, [&](const Tensor& x, int64_t k, bool reverse) {
    const std::optional<Tensor> none;
    return GruLayer::apply(x, hx[k], params[k * per], params[k * per + 1], has_biases ? params[k * per + 2] : none,
                           has_biases ? params[k * per + 3] : none, reverse, keep);
  });
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("gru.input", gru); }
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("gru.input", gru); }

}  // namespace openreg
