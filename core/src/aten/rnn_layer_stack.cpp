#include "rnn_layer_stack.h"

#include <torch/csrc/autograd/autograd.h>

namespace openreg::rnn {

using at::Tensor;

bool layer_path_applies(const Tensor& input, at::TensorList state, at::TensorList params, const Stack& stack,
                        int64_t gates) {
  const int64_t count = stack.layers * stack.directions;
  if (!input.is_privateuseone() || input.dim() != 3 || input.size(0) == 0 || stack.layers < 1) return false;
  if (static_cast<int64_t>(params.size()) != count * stack.params_per_layer()) return false;
  for (const Tensor& s : state)
    if (s.dim() != 3 || s.size(0) != count || !s.sizes().equals(state[0].sizes())) return false;
  const int64_t hidden = state[0].size(2);
  for (int64_t k = 0; k < count; ++k) {
    const Tensor& w_hh = params[k * stack.params_per_layer() + 1];
    if (w_hh.dim() != 2 || w_hh.size(0) != gates * hidden || w_hh.size(1) != hidden) return false;  // projections
  }
  return true;
}

bool needs_backward(const Tensor& input, at::TensorList state, at::TensorList params) {
  if (!at::GradMode::is_enabled()) return false;
  if (input.requires_grad()) return true;
  for (const Tensor& s : state)
    if (s.requires_grad()) return true;
  for (const Tensor& p : params)
    if (p.requires_grad()) return true;
  return false;
}

std::vector<Tensor> run_stack(const Tensor& input, const Stack& stack, double dropout, bool train, bool batch_first,
                              const LayerFn& layer) {
  Tensor layer_input = (batch_first ? input.transpose(0, 1) : input).contiguous();
  std::vector<std::vector<Tensor>> finals;  // [state][layer * direction]
  for (int64_t l = 0; l < stack.layers; ++l) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < stack.directions; ++d) {
      std::vector<Tensor> out = layer(layer_input, l * stack.directions + d, /*reverse=*/d == 1);
      outputs.push_back(out[0]);
      finals.resize(out.size() - 1);
      for (size_t s = 1; s < out.size(); ++s) finals[s - 1].push_back(out[s]);
    }
    layer_input = outputs.size() == 1 ? outputs[0] : at::cat(outputs, 2);
    if (dropout > 0 && train && l + 1 < stack.layers) layer_input = at::dropout(layer_input, dropout, train);
  }
  std::vector<Tensor> result{batch_first ? layer_input.transpose(0, 1) : layer_input};
  for (const auto& per_layer : finals) result.push_back(at::stack(per_layer));
  return result;
}

Tensor states_before_steps(const Tensor& y, const Tensor& h0, bool reverse) {
  const int64_t steps = y.size(0);
  const Tensor first = h0.unsqueeze(0);
  if (steps == 1) return first;
  return reverse ? at::cat({y.narrow(0, 1, steps - 1), first}) : at::cat({first, y.narrow(0, 0, steps - 1)});
}

torch::autograd::variable_list differentiate_again(const torch::autograd::variable_list& produced,
                                                   const torch::autograd::variable_list& grads,
                                                   const torch::autograd::variable_list& inputs, size_t count) {
  torch::autograd::variable_list outputs, grad_outputs, wanted_inputs, result(count);
  for (size_t k = 0; k < produced.size(); ++k)
    if (grads[k].defined()) outputs.push_back(produced[k]), grad_outputs.push_back(grads[k]);
  std::vector<size_t> wanted;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].requires_grad()) wanted.push_back(k), wanted_inputs.push_back(inputs[k]);
  if (outputs.empty() || wanted.empty()) return result;
  auto got = torch::autograd::grad(outputs, wanted_inputs, grad_outputs, /*retain_graph=*/true,
                                   /*create_graph=*/true, /*allow_unused=*/true);
  for (size_t k = 0; k < wanted.size(); ++k) result[wanted[k]] = got[k];
  return result;
}

}  // namespace openreg::rnn
