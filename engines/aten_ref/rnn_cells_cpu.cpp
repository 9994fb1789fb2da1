// CPU kernels for the fused RNN cells, which ATen has for CUDA only
// (aten::_thnn_fused_lstm_cell, _thnn_fused_lstm_cell_backward_impl,
// _thnn_fused_gru_cell, _thnn_fused_gru_cell_backward): with them the reference
// engine can run these ops like any other, so both conformance suites have a
// reference to compare engines' cell kernels against. The formulas are core's
// (bridge/rnn_cell_math.h), computed in float64 and rounded once to the
// arguments' dtype, as engines are asked to compute reduced-precision cells.
#include "bridge/rnn_cell_math.h"

#include <torch/library.h>

namespace {

using at::Tensor;
using openreg::rnn_cell::OptTensor;

Tensor wide(const Tensor& t) { return t.defined() ? t.to(at::kDouble) : t; }
OptTensor wide(const OptTensor& t) { return t && t->defined() ? OptTensor(t->to(at::kDouble)) : t; }
Tensor narrow_to(const Tensor& t, at::ScalarType dtype) { return t.defined() ? t.to(dtype) : t; }

std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                                             const OptTensor& input_bias, const OptTensor& hidden_bias) {
  auto [hy, cy, ws] = openreg::rnn_cell::lstm_cell(wide(input_gates), wide(hidden_gates), wide(cx), wide(input_bias),
                                                   wide(hidden_bias));
  const auto dt = input_gates.scalar_type();
  return {narrow_to(hy, dt), narrow_to(cy, dt), narrow_to(ws, dt)};
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(const OptTensor& grad_hy, const OptTensor& grad_cy,
                                                      const Tensor& cx, const Tensor& cy, const Tensor& workspace,
                                                      bool has_bias) {
  auto [d_gates, d_cx, d_bias] =
      openreg::rnn_cell::lstm_cell_backward(wide(grad_hy), wide(grad_cy), wide(cx), wide(cy), wide(workspace), has_bias);
  const auto dt = workspace.scalar_type();
  return {narrow_to(d_gates, dt), narrow_to(d_cx, dt), narrow_to(d_bias, dt)};
}

std::tuple<Tensor, Tensor> gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                    const OptTensor& input_bias, const OptTensor& hidden_bias) {
  auto [hy, ws] = openreg::rnn_cell::gru_cell(wide(input_gates), wide(hidden_gates), wide(hx), wide(input_bias),
                                              wide(hidden_bias));
  const auto dt = input_gates.scalar_type();
  return {narrow_to(hy, dt), narrow_to(ws, dt)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> gru_cell_backward(const Tensor& grad_hy, const Tensor& workspace,
                                                                     bool has_bias) {
  auto [gi, gh, ghx, gbi, gbh] = openreg::rnn_cell::gru_cell_backward(wide(grad_hy), wide(workspace), has_bias);
  const auto dt = grad_hy.scalar_type();
  return {narrow_to(gi, dt), narrow_to(gh, dt), narrow_to(ghx, dt), narrow_to(gbi, dt), narrow_to(gbh, dt)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
}
