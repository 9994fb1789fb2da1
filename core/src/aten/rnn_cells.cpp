// The fused RNN cells ATen calls for accelerator tensors: routed to the engines,
// with a composite of device ops as the fallback.
//
// ATen's LSTM and GRU layers take a different path on accelerators than on CPU:
// for a CUDA, XPU or PrivateUse1 input each time step calls
// aten::_thnn_fused_lstm_cell / aten::_thnn_fused_gru_cell, and their backward
// aten::_thnn_fused_lstm_cell_backward_impl / aten::_thnn_fused_gru_cell_backward.
// These four ops have CUDA kernels only in ATen: no CPU kernel and no composite.
// They are the only ops of that class a torch.nn layer reaches on this device.
// The reference engine registers CPU kernels for them (aten_ref/rnn_cells_cpu.cpp,
// the conformance suites' reference).
//
// route_call offers each call to the engines of the chain (the SDK's kernels,
// engines/common/include/openreg/sdk/rnn.hpp); when none ahead of the reference
// engine serves it, or every one declines, it runs the composite below, written
// with ordinary aten ops that each route to the engines as usual (rather than the
// whole cell on the reference engine). The composite is
// registered for composite_route.h's kCompositeSlot, which is where route_call's
// run_composite finds it.
//
// The formulas and the workspace format every implementation shares are in
// bridge/rnn_cell_math.h.
#include "../bridge/rnn_cell_math.h"
#include "composite_route.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace openreg {
namespace {

using rnn_cell::OptTensor;
using rnn_cell::gru_cell;
using rnn_cell::gru_cell_backward;
using rnn_cell::lstm_cell;
using rnn_cell::lstm_cell_backward;

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
