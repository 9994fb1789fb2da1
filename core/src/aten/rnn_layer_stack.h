// What the device's whole-layer LSTM and GRU (lstm_layer.cpp, gru_layer.cpp)
// share: running a stack of layers and directions, deciding when the layer path
// applies, and the pieces of a layer's backward that don't depend on the cell.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <optional>
#include <vector>

namespace openreg::rnn {

// nn.LSTM / nn.GRU's call: layers x directions, each with 2 weights and, with
// biases, 2 biases, in that order in params.
struct Stack {
  int64_t layers;
  int64_t directions;
  bool has_biases;
  int64_t params_per_layer() const { return has_biases ? 4 : 2; }
};

// True when input is a 3-d device tensor, `state` (h0, or c0 too) is
// [layers * directions, B, H] each, and params fit `gates` gates of hidden size
// H without projections. Anything else is left to ATen's composite.
bool layer_path_applies(const at::Tensor& input, at::TensorList state, at::TensorList params, const Stack& stack,
                        int64_t gates);

// True when autograd will want a backward: grad mode on and some input requiring grad.
bool needs_backward(const at::Tensor& input, at::TensorList state, at::TensorList params);

// One layer in one direction: (time-major input [T, B, I], index k of the layer
// and direction in `params` / the state, reverse) -> {output [T, B, H], final
// states...}.
using LayerFn = std::function<std::vector<at::Tensor>(const at::Tensor& input, int64_t k, bool reverse)>;

// Runs the stack: batch_first handled, directions concatenated, dropout between
// layers when training. Returns the output and each final state stacked to
// [layers * directions, B, H].
std::vector<at::Tensor> run_stack(const at::Tensor& input, const Stack& stack, double dropout, bool train,
                                  bool batch_first, const LayerFn& layer);

// A saved optional tensor (undefined: none) as the optional a cell op takes.
inline std::optional<at::Tensor> defined_or_none(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The hidden state each step started from, in time order: [T, B, H].
at::Tensor states_before_steps(const at::Tensor& y, const at::Tensor& h0, bool reverse);

// A layer's backward under create_graph=True: autograd differentiates
// `produced` (a forward run again with grad mode on) against `inputs`.
// Returns one gradient per input (undefined where none), padded to `count`.
torch::autograd::variable_list differentiate_again(const torch::autograd::variable_list& produced,
                                                   const torch::autograd::variable_list& grads,
                                                   const torch::autograd::variable_list& inputs, size_t count);

}  // namespace openreg::rnn
