#include "cpp_meta_kernels.h"

#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/maximum_meta_dispatch.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_meta_dispatch.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/atan2_ops.h>
#include <ATen/ops/remainder_meta_dispatch.h>
#include <ATen/ops/remainder_ops.h>
#include <ATen/ops/fmod_meta_dispatch.h>
#include <ATen/ops/fmod_ops.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_ops.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/addcmul_meta_dispatch.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addcdiv_meta_dispatch.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/clamp_meta_dispatch.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_max_meta_dispatch.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/eq_meta_dispatch.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/ne_meta_dispatch.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/lt_meta_dispatch.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/le_meta_dispatch.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/gt_meta_dispatch.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/ge_meta_dispatch.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/log_meta_dispatch.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/rsqrt_meta_dispatch.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sin_meta_dispatch.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/cos_meta_dispatch.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/erf_meta_dispatch.h>
#include <ATen/ops/erf_ops.h>
#include <ATen/ops/log1p_meta_dispatch.h>
#include <ATen/ops/log1p_ops.h>
#include <ATen/ops/expm1_meta_dispatch.h>
#include <ATen/ops/expm1_ops.h>
#include <ATen/ops/floor_meta_dispatch.h>
#include <ATen/ops/floor_ops.h>
#include <ATen/ops/ceil_meta_dispatch.h>
#include <ATen/ops/ceil_ops.h>
#include <ATen/ops/round_meta_dispatch.h>
#include <ATen/ops/round_ops.h>
#include <ATen/ops/trunc_meta_dispatch.h>
#include <ATen/ops/trunc_ops.h>
#include <ATen/ops/sign_meta_dispatch.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/sgn_meta_dispatch.h>
#include <ATen/ops/sgn_ops.h>
#include <ATen/ops/bitwise_not_meta_dispatch.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/silu_meta_dispatch.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/mish_meta_dispatch.h>
#include <ATen/ops/mish_ops.h>
#include <ATen/ops/hardsigmoid_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/gelu_meta_dispatch.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/leaky_relu_meta_dispatch.h>
#include <ATen/ops/leaky_relu_ops.h>
#include <ATen/ops/elu_meta_dispatch.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/threshold_meta_dispatch.h>
#include <ATen/ops/threshold_ops.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/softplus_ops.h>
#include <ATen/ops/isneginf_meta_dispatch.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/isposinf_meta_dispatch.h>
#include <ATen/ops/isposinf_ops.h>
#include <ATen/ops/gelu_backward_meta_dispatch.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/silu_backward_meta_dispatch.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/tanh_backward_meta_dispatch.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/sigmoid_backward_meta_dispatch.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/leaky_relu_backward_meta_dispatch.h>
#include <ATen/ops/leaky_relu_backward_ops.h>
#include <ATen/ops/elu_backward_meta_dispatch.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/softplus_backward_meta_dispatch.h>
#include <ATen/ops/softplus_backward_ops.h>
#include <ATen/ops/hardsigmoid_backward_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_backward_ops.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/addmv_ops.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/linalg_vector_norm_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/all_ops.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/max_meta_dispatch.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/min_meta_dispatch.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/prod_meta_dispatch.h>
#include <ATen/ops/prod_ops.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/nll_loss_backward_meta_dispatch.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/smooth_l1_loss_meta_dispatch.h>
#include <ATen/ops/smooth_l1_loss_ops.h>
#include <ATen/ops/index_meta_dispatch.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/scatter_add_meta_dispatch.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/index_add_meta_dispatch.h>
#include <ATen/ops/index_add_ops.h>
#include <ATen/ops/index_copy_meta_dispatch.h>
#include <ATen/ops/index_copy_ops.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/max_pool2d_with_indices_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/avg_pool2d_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/avg_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/upsample_nearest2d_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_ops.h>
#include <ATen/ops/upsample_bilinear2d_meta_dispatch.h>
#include <ATen/ops/upsample_bilinear2d_ops.h>
#include <ATen/ops/upsample_nearest2d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_backward_ops.h>
#include <ATen/ops/fill_meta_dispatch.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/zero_meta_dispatch.h>
#include <ATen/ops/zero_ops.h>
#include <ATen/ops/arange_meta_dispatch.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/topk_meta_dispatch.h>
#include <ATen/ops/topk_ops.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/sort_ops.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/layer_norm.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_backward_ops.h>
#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/TypeProperties.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace openreg {

namespace {

// One entry: the operator's schema type (at::_ops) picks the overload of the
// at::meta function, so a mismatch between the two fails to compile.
#define OPENREG_META_KERNEL(ops, fn_pointer, check)                                                 \
  std::pair<std::string, CppMeta> {                                                                  \
    qualified(at::_ops::ops::name, at::_ops::ops::overload_name),                                    \
        CppMeta{c10::KernelFunction::makeFromUnboxedFunction(                                        \
                    c10::CompileTimeFunctionPointer<at::_ops::ops::schema, fn_pointer>()),           \
                check}                                                                               \
  }
#define OPENREG_CPP_META_CHECKED(ops, fn, check) OPENREG_META_KERNEL(ops, &at::meta::fn, check)
#define OPENREG_CPP_META(ops, fn) OPENREG_CPP_META_CHECKED(ops, fn, nullptr)

std::string qualified(const char* name, const char* overload) {
  return *overload ? std::string(name) + "." + overload : std::string(name);
}

// gelu's and gelu_backward's `approximate` (argument `Arg`), checked as CPU's
// kernel checks it (GeluType in ATen's Activation.h), with its message.
template <size_t Arg>
void check_gelu_approximate(const torch::jit::Stack& args) {
  const auto& mode = args.at(Arg).toStringRef();
  TORCH_CHECK(mode == "none" || mode == "tanh", "approximate argument must be either none or tanh.");
}

// ------------------------------------------------------------ Meta kernels of ours
// For ops models run whose ATen Meta kernel is Python only (decompositions run on
// Meta tensors, torch._decomp): relu 0.7 ms a call, where 0.4, mse_loss_backward
// 1.2, native_layer_norm about 2 and its backward 3 (five of each in a 2-layer
// BERT's training step, at every new sequence length), native_batch_norm and its
// backward 2-4 (twenty of each in a ResNet-18's training step, at every new image
// or batch size). Each gives the outputs CPU's kernel makes, with its checks and
// messages; tests/python/test_output_sizing.py compares them with CPU's.

// A contiguous Meta tensor.
at::Tensor meta_empty(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  return at::Tensor(at::detail::empty_meta(sizes, dtype));
}

// at::empty_like: the same strides when `t` is dense, else dense ones in its
// dimension order. (at::empty_like on a Meta tensor is torch's Python reference.)
at::Tensor meta_empty_like(const at::Tensor& t) {
  const auto strides =
      t.is_non_overlapping_and_dense() ? t.strides().vec() : at::infer_dense_strides(t.sizes(), t.strides());
  return at::Tensor(at::detail::empty_strided_meta(t.sizes(), strides, t.scalar_type()));
}

// CPU's relu is clamp_min(self, 0) after refusing booleans.
at::Tensor relu_meta(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::meta::clamp_min(self, 0);
}
at::Tensor& relu__meta(at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::meta::clamp_min_(self, 0);
}

// The saved statistics of layer and batch norm follow torch's Meta kernels (and
// CUDA) where CPU's kernels differ: in float for a bfloat16 or half input whatever
// the parameters' dtype (CPU: the parameters' dtype), and per channel in batch
// norm's evaluation mode too (CPU: empty). torch.compile traces graphs with those
// Meta kernels, so a compiled graph reads these tensors as they describe them.
c10::ScalarType saved_stats_dtype(const at::Tensor& input) {
  return at::isReducedFloatingType(input.scalar_type()) ? at::kFloat : input.scalar_type();
}

// layer_norm_cpu and layer_norm_backward_cpu: ATen's own input checks
// (_check_layer_norm_inputs), contiguous outputs.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_meta(const at::Tensor& input,
                                                               c10::SymIntArrayRef normalized_shape_sym,
                                                               const std::optional<at::Tensor>& weight_opt,
                                                               const std::optional<at::Tensor>& bias_opt,
                                                               double /*eps*/) {
  const c10::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const auto axis = static_cast<size_t>(input.dim()) - normalized_shape.size();
  c10::DimVector stat_shape(input.sizes().begin(), input.sizes().begin() + static_cast<std::ptrdiff_t>(axis));
  stat_shape.resize(static_cast<size_t>(input.dim()), 1);
  return {meta_empty(input.sizes(), input.scalar_type()), meta_empty(stat_shape, saved_stats_dtype(input)),
          meta_empty(stat_shape, saved_stats_dtype(input))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_meta(
    const at::Tensor& /*grad_out*/, const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const at::Tensor& /*mean*/, const at::Tensor& /*rstd*/, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> grad_input_mask) {
  const c10::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  // CPU's kernel makes each gradient like its tensor, contiguous; a gradient asked
  // for a parameter the call did not pass has no tensor to be like.
  auto like = [](const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.defined(), "native_layer_norm_backward: the ", what,
                " gradient was asked for (output_mask) but no ", what, " was passed");
    return meta_empty(t.sizes(), t.scalar_type());
  };
  return {grad_input_mask[0] ? like(input, "input") : at::Tensor(),
          grad_input_mask[1] ? like(weight, "weight") : at::Tensor(),
          grad_input_mask[2] ? like(bias, "bias") : at::Tensor()};
}

// batch_norm_cpu and batch_norm_backward_cpu. Outputs keep a channels-last input's
// layout; the gradients of the parameters are in float for a bfloat16 or half input
// with float parameters. The parameters' sizes are checked as
// torch.nn.functional.batch_norm checks them before it calls this op (CPU's kernel
// would read past a short one).
bool dense_in_some_format(const at::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}
c10::MemoryFormat dense_format(const at::Tensor& t) {  // of a tensor dense_in_some_format
  if (t.is_contiguous()) return c10::MemoryFormat::Contiguous;
  return t.is_contiguous(at::MemoryFormat::ChannelsLast3d) ? c10::MemoryFormat::ChannelsLast3d
                                                           : c10::MemoryFormat::ChannelsLast;
}
bool contiguous_or_absent(const at::Tensor& t) { return !t.defined() || t.is_contiguous(); }

void check_per_channel(const char* what, const at::Tensor& t, int64_t channels) {
  TORCH_CHECK(!t.defined() || t.numel() == channels, what, " should contain ", channels, " elements not ",
              t.numel());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_meta(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    const std::optional<at::Tensor>& running_mean_opt, const std::optional<at::Tensor>& running_var_opt, bool train,
    double /*momentum*/, double /*eps*/) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const at::Tensor running_mean = running_mean_opt.value_or(at::Tensor());
  const at::Tensor running_var = running_var_opt.value_or(at::Tensor());
  const int64_t channels = input.size(1);
  TORCH_CHECK(train || (running_mean.defined() && running_var.defined()),
              "running_mean and running_var must be defined in evaluation mode");
  check_per_channel("running_mean", running_mean, channels);
  check_per_channel("running_var", running_var, channels);
  check_per_channel("weight", weight, channels);
  check_per_channel("bias", bias, channels);
  const bool all_contiguous = dense_in_some_format(input) && contiguous_or_absent(weight) &&
                              contiguous_or_absent(bias) && contiguous_or_absent(running_mean) &&
                              contiguous_or_absent(running_var);
  return {at::Tensor(at::detail::empty_meta(input.sizes(), input.scalar_type(),
                                            all_contiguous ? dense_format(input) : input.suggest_memory_format())),
          meta_empty({channels}, saved_stats_dtype(input)), meta_empty({channels}, saved_stats_dtype(input))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& running_mean_opt, const std::optional<at::Tensor>& running_var_opt,
    const std::optional<at::Tensor>& save_mean_opt, const std::optional<at::Tensor>& save_invstd_opt, bool /*train*/,
    double /*eps*/, std::array<bool, 3> grad_input_mask) {
  const bool mixed = at::native::is_mixed_type(
      input, weight_opt.value_or(at::Tensor()), running_mean_opt.value_or(at::Tensor()),
      running_var_opt.value_or(at::Tensor()), save_mean_opt.value_or(at::Tensor()),
      save_invstd_opt.value_or(at::Tensor()));
  const c10::ScalarType param_dtype = at::native::param_scalar_type(input, mixed);
  const int64_t channels = input.size(1);
  at::Tensor grad_input;
  if (grad_input_mask[0]) {
    const bool all_contiguous = dense_in_some_format(input) && dense_in_some_format(grad_out) &&
                                input.suggest_memory_format() == grad_out.suggest_memory_format();
    grad_input = at::Tensor(at::detail::empty_meta(
        input.sizes(), input.scalar_type(), all_contiguous ? dense_format(input) : input.suggest_memory_format()));
  }
  return {grad_input, grad_input_mask[1] ? meta_empty({channels}, param_dtype) : at::Tensor(),
          grad_input_mask[2] ? meta_empty({channels}, param_dtype) : at::Tensor()};
}

// CPU's where: the condition boolean (or uint8, deprecated), the values promoted to
// their result type, the output laid out by a TensorIterator over the three, as
// CPU's kernel builds it. A 0-dim CPU operand counts as one of the device's.
at::Tensor where_meta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  at::native::ResultTypeState state{};
  state = at::native::update_result_type_state(self, state);
  state = at::native::update_result_type_state(other, state);
  auto on_meta = [](const at::Tensor& t) {
    if (t.is_meta() || t.dim() != 0) return t;
    return at::Tensor(at::detail::empty_meta({}, t.scalar_type()));
  };
  const at::Tensor unsized_output, cond = on_meta(condition), a = on_meta(self), b = on_meta(other);
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .declare_static_dtype(at::native::result_type(state))
                                .add_output(unsized_output)
                                .add_const_input(cond)
                                .add_const_input(a)
                                .add_const_input(b)
                                .build();
  return iter.output();
}

// CPU's mse_loss_backward: the gradient contiguous in the input's shape and dtype,
// then a TensorIterator over it, the input, the target and the incoming gradient.
at::Tensor mse_loss_backward_meta(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& target,
                                  int64_t /*reduction*/) {
  const at::Tensor grad_input = meta_empty(input.sizes(), input.scalar_type());
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(grad_input)
                                .add_const_input(input)
                                .add_const_input(target)
                                .add_const_input(grad_output)
                                .build();
  return iter.output();
}

// The fused attention ops (attention.cpp) have no CPU kernel: their outputs are
// what torch's Meta kernels (torch/_meta_registrations.py) describe, which
// torch.compile traces with. A miss of the sizing cache, at every new sequence
// length, took 0.25 ms for the forward and 0.5 ms for the backward in Python.
// The forward's output is like the query, in the query's dimension order (largest
// stride first; equal strides keep their order) when its last size differs; the
// log-sum-exp float [batch, heads, query length]; the random seed and offset
// 0-dim int64; no cumulative lengths or debug mask; the lengths as numbers.
at::Tensor like_query_layout(const at::Tensor& query, c10::IntArrayRef shape) {
  if (query.sizes() == shape) return meta_empty_like(query);
  const auto dims = static_cast<int64_t>(shape.size());
  std::vector<int64_t> order(static_cast<size_t>(dims));
  for (int64_t d = 0; d < dims; ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> strides(static_cast<size_t>(dims));
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[static_cast<size_t>(*it)] = stride;
    stride *= shape[static_cast<size_t>(*it)];
  }
  return at::Tensor(at::detail::empty_strided_meta(shape, strides, query.scalar_type()));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention_meta(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                     const std::optional<at::Tensor>& /*attn_bias*/, double /*dropout_p*/, bool /*is_causal*/,
                     bool /*return_debug_mask*/, std::optional<double> /*scale*/) {
  TORCH_CHECK(query.dim() == 3 || query.dim() == 4, "query must be 3D or 4D");
  const int64_t batch = query.dim() == 4 ? query.size(0) : 1;
  const int64_t heads = query.size(-3);
  const int64_t q_len = query.size(-2);
  c10::DimVector out_shape(query.sizes().begin(), query.sizes().end());
  out_shape.back() = value.size(-1);
  return {like_query_layout(query, out_shape),
          meta_empty({batch, heads, q_len}, at::kFloat),
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(q_len),
          c10::SymInt(key.size(-2)),
          meta_empty({}, at::kLong),
          meta_empty({}, at::kLong),
          at::Tensor()};
}

// Its backward: each gradient like its input (the bias's only when one was passed).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward_meta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> /*grad_input_mask*/, const at::Tensor& /*out*/,
    const at::Tensor& /*logsumexp*/, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double /*dropout_p*/, bool /*is_causal*/,
    const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/, std::optional<double> /*scale*/) {
  return {meta_empty_like(query), meta_empty_like(key), meta_empty_like(value),
          attn_bias.defined() ? meta_empty_like(attn_bias) : at::Tensor()};
}

// The ops whose Meta kernel torch replaces with Python and that models run:
// elementwise arithmetic, comparisons, activations and their backwards,
// products, reductions, softmax, losses, indexing, pooling, fills.
const std::unordered_map<std::string, CppMeta>& table() {
  static const auto* kernels = new std::unordered_map<std::string, CppMeta>{
OPENREG_CPP_META(add_Tensor, add),
      OPENREG_CPP_META(add__Tensor, add_),
      OPENREG_CPP_META(sub_Tensor, sub),
      OPENREG_CPP_META(sub__Tensor, sub_),
      OPENREG_CPP_META(mul_Tensor, mul),
      OPENREG_CPP_META(mul__Tensor, mul_),
      OPENREG_CPP_META(div_Tensor, div),
      OPENREG_CPP_META(div__Tensor, div_),
      OPENREG_CPP_META(div_Tensor_mode, div),
      OPENREG_CPP_META(div__Tensor_mode, div_),
      OPENREG_CPP_META(pow_Tensor_Tensor, pow),
      OPENREG_CPP_META(pow_Tensor_Scalar, pow),
      OPENREG_CPP_META(pow_Scalar, pow),
      OPENREG_CPP_META(pow__Tensor, pow_),
      OPENREG_CPP_META(pow__Scalar, pow_),
      OPENREG_CPP_META(maximum, maximum),
      OPENREG_CPP_META(minimum, minimum),
      OPENREG_CPP_META(atan2, atan2),
      OPENREG_CPP_META(remainder_Tensor, remainder),
      OPENREG_CPP_META(remainder__Tensor, remainder_),
      OPENREG_CPP_META(fmod_Tensor, fmod),
      OPENREG_CPP_META(fmod__Tensor, fmod_),
      OPENREG_CPP_META(bitwise_and_Tensor, bitwise_and),
      OPENREG_CPP_META(bitwise_and__Tensor, bitwise_and_),
      OPENREG_CPP_META(bitwise_or_Tensor, bitwise_or),
      OPENREG_CPP_META(bitwise_or__Tensor, bitwise_or_),
      OPENREG_CPP_META(bitwise_xor_Tensor, bitwise_xor),
      OPENREG_CPP_META(bitwise_xor__Tensor, bitwise_xor_),
      OPENREG_CPP_META(lerp_Scalar, lerp),
      OPENREG_CPP_META(lerp__Scalar, lerp_),
      OPENREG_CPP_META(lerp_Tensor, lerp),
      OPENREG_CPP_META(lerp__Tensor, lerp_),
      OPENREG_CPP_META(addcmul, addcmul),
      OPENREG_CPP_META(addcmul_, addcmul_),
      OPENREG_CPP_META(addcdiv, addcdiv),
      OPENREG_CPP_META(addcdiv_, addcdiv_),
      OPENREG_CPP_META(clamp, clamp),
      OPENREG_CPP_META(clamp_, clamp_),
      OPENREG_CPP_META(clamp_min, clamp_min),
      OPENREG_CPP_META(clamp_min_, clamp_min_),
      OPENREG_CPP_META(clamp_max, clamp_max),
      OPENREG_CPP_META(clamp_max_, clamp_max_),
      OPENREG_CPP_META(clamp_Tensor, clamp),
      OPENREG_CPP_META(clamp__Tensor, clamp_),
      OPENREG_CPP_META(clamp_min_Tensor, clamp_min),
      OPENREG_CPP_META(clamp_max_Tensor, clamp_max),
      OPENREG_CPP_META(eq_Tensor, eq),
      OPENREG_CPP_META(eq_Scalar, eq),
      OPENREG_CPP_META(ne_Tensor, ne),
      OPENREG_CPP_META(ne_Scalar, ne),
      OPENREG_CPP_META(lt_Tensor, lt),
      OPENREG_CPP_META(lt_Scalar, lt),
      OPENREG_CPP_META(le_Tensor, le),
      OPENREG_CPP_META(le_Scalar, le),
      OPENREG_CPP_META(gt_Tensor, gt),
      OPENREG_CPP_META(gt_Scalar, gt),
      OPENREG_CPP_META(ge_Tensor, ge),
      OPENREG_CPP_META(ge_Scalar, ge),
      OPENREG_CPP_META(neg, neg),
      OPENREG_CPP_META(neg_, neg_),
      OPENREG_CPP_META(exp, exp),
      OPENREG_CPP_META(exp_, exp_),
      OPENREG_CPP_META(log, log),
      OPENREG_CPP_META(log_, log_),
      OPENREG_CPP_META(sqrt, sqrt),
      OPENREG_CPP_META(sqrt_, sqrt_),
      OPENREG_CPP_META(rsqrt, rsqrt),
      OPENREG_CPP_META(rsqrt_, rsqrt_),
      OPENREG_CPP_META(sin, sin),
      OPENREG_CPP_META(sin_, sin_),
      OPENREG_CPP_META(cos, cos),
      OPENREG_CPP_META(cos_, cos_),
      OPENREG_CPP_META(tanh, tanh),
      OPENREG_CPP_META(tanh_, tanh_),
      OPENREG_CPP_META(sigmoid, sigmoid),
      OPENREG_CPP_META(sigmoid_, sigmoid_),
      OPENREG_CPP_META(reciprocal, reciprocal),
      OPENREG_CPP_META(reciprocal_, reciprocal_),
      OPENREG_CPP_META(erf, erf),
      OPENREG_CPP_META(erf_, erf_),
      OPENREG_CPP_META(log1p, log1p),
      OPENREG_CPP_META(log1p_, log1p_),
      OPENREG_CPP_META(expm1, expm1),
      OPENREG_CPP_META(expm1_, expm1_),
      OPENREG_CPP_META(floor, floor),
      OPENREG_CPP_META(floor_, floor_),
      OPENREG_CPP_META(ceil, ceil),
      OPENREG_CPP_META(ceil_, ceil_),
      OPENREG_CPP_META(round, round),
      OPENREG_CPP_META(round_, round_),
      OPENREG_CPP_META(trunc, trunc),
      OPENREG_CPP_META(trunc_, trunc_),
      OPENREG_CPP_META(sign, sign),
      OPENREG_CPP_META(sign_, sign_),
      OPENREG_CPP_META(sgn, sgn),
      OPENREG_CPP_META(sgn_, sgn_),
      OPENREG_CPP_META(bitwise_not, bitwise_not),
      OPENREG_CPP_META(bitwise_not_, bitwise_not_),
      OPENREG_CPP_META(silu, silu),
      OPENREG_CPP_META(silu_, silu_),
      OPENREG_CPP_META(mish, mish),
      OPENREG_CPP_META(mish_, mish_),
      OPENREG_CPP_META(hardsigmoid, hardsigmoid),
      OPENREG_CPP_META(hardsigmoid_, hardsigmoid_),
      OPENREG_CPP_META_CHECKED(gelu, gelu, check_gelu_approximate<1>),
      OPENREG_CPP_META_CHECKED(gelu_, gelu_, check_gelu_approximate<1>),
      OPENREG_CPP_META(leaky_relu, leaky_relu),
      OPENREG_CPP_META(leaky_relu_, leaky_relu_),
      OPENREG_CPP_META(elu, elu),
      OPENREG_CPP_META(elu_, elu_),
      OPENREG_CPP_META(threshold, threshold),
      OPENREG_CPP_META(threshold_, threshold_),
      OPENREG_CPP_META(softplus, softplus),
      OPENREG_CPP_META(isneginf, isneginf),
      OPENREG_CPP_META(isposinf, isposinf),
      OPENREG_CPP_META_CHECKED(gelu_backward, gelu_backward, check_gelu_approximate<2>),
      OPENREG_CPP_META(silu_backward, silu_backward),
      OPENREG_CPP_META(tanh_backward, tanh_backward),
      OPENREG_CPP_META(sigmoid_backward, sigmoid_backward),
      OPENREG_CPP_META(threshold_backward, threshold_backward),
      OPENREG_CPP_META(leaky_relu_backward, leaky_relu_backward),
      OPENREG_CPP_META(elu_backward, elu_backward),
      OPENREG_CPP_META(softplus_backward, softplus_backward),
      OPENREG_CPP_META(hardsigmoid_backward, hardsigmoid_backward),
      OPENREG_CPP_META(mm, mm),
      OPENREG_CPP_META(addmm, addmm),
      OPENREG_CPP_META(addmm_, addmm_),
      OPENREG_CPP_META(bmm, bmm),
      OPENREG_CPP_META(baddbmm, baddbmm),
      OPENREG_CPP_META(baddbmm_, baddbmm_),
      OPENREG_CPP_META(addmv, addmv),
      OPENREG_CPP_META(sum_dim_IntList, sum),
      OPENREG_CPP_META(mean_dim, mean),
      OPENREG_CPP_META(amax, amax),
      OPENREG_CPP_META(amin, amin),
      OPENREG_CPP_META(argmax, argmax),
      OPENREG_CPP_META(argmin, argmin),
      OPENREG_CPP_META(linalg_vector_norm, linalg_vector_norm),
      OPENREG_CPP_META(cumsum, cumsum),
      OPENREG_CPP_META(cumsum_, cumsum_),
      OPENREG_CPP_META(all, all),
      OPENREG_CPP_META(all_dim, all),
      OPENREG_CPP_META(all_dims, all),
      OPENREG_CPP_META(any, any),
      OPENREG_CPP_META(any_dim, any),
      OPENREG_CPP_META(any_dims, any),
      OPENREG_CPP_META(max_dim, max),
      OPENREG_CPP_META(min_dim, min),
      OPENREG_CPP_META(prod_dim_int, prod),
      OPENREG_CPP_META(_softmax, _softmax),
      OPENREG_CPP_META(_log_softmax, _log_softmax),
      OPENREG_CPP_META(_softmax_backward_data, _softmax_backward_data),
      OPENREG_CPP_META(_log_softmax_backward_data, _log_softmax_backward_data),
      OPENREG_CPP_META(nll_loss_forward, nll_loss_forward_symint),
      OPENREG_CPP_META(nll_loss_backward, nll_loss_backward_symint),
      OPENREG_CPP_META(mse_loss, mse_loss),
      OPENREG_CPP_META(smooth_l1_loss, smooth_l1_loss),
      OPENREG_CPP_META(index_Tensor, index),
      OPENREG_CPP_META(gather, gather),
      OPENREG_CPP_META(scatter_src, scatter),
      OPENREG_CPP_META(scatter__src, scatter_),
      OPENREG_CPP_META(scatter_value, scatter),
      OPENREG_CPP_META(scatter__value, scatter_),
      OPENREG_CPP_META(scatter_add, scatter_add),
      OPENREG_CPP_META(scatter_add_, scatter_add_),
      OPENREG_CPP_META(index_add, index_add),
      OPENREG_CPP_META(index_add_, index_add_),
      OPENREG_CPP_META(index_copy, index_copy),
      OPENREG_CPP_META(index_copy_, index_copy_),
      OPENREG_CPP_META(cat, cat),
      OPENREG_CPP_META(max_pool2d_with_indices, max_pool2d_with_indices),
      OPENREG_CPP_META(max_pool2d_with_indices_backward, max_pool2d_with_indices_backward),
      OPENREG_CPP_META(avg_pool2d, avg_pool2d),
      OPENREG_CPP_META(avg_pool2d_backward, avg_pool2d_backward),
      OPENREG_CPP_META(upsample_nearest2d, upsample_nearest2d_symint),
      OPENREG_CPP_META(upsample_bilinear2d, upsample_bilinear2d_symint),
      OPENREG_CPP_META(upsample_nearest2d_backward, upsample_nearest2d_backward_symint),
      OPENREG_CPP_META(fill__Scalar, fill_),
      OPENREG_CPP_META(fill__Tensor, fill_),
      OPENREG_CPP_META(zero_, zero_),
      OPENREG_CPP_META(arange_start_out, arange_outf),
      OPENREG_CPP_META(topk, topk_symint),
      OPENREG_CPP_META(sort_stable, sort),
      OPENREG_META_KERNEL(relu, &relu_meta, nullptr),
      OPENREG_META_KERNEL(relu_, &relu__meta, nullptr),
      OPENREG_META_KERNEL(where_self, &where_meta, nullptr),
      OPENREG_META_KERNEL(mse_loss_backward, &mse_loss_backward_meta, nullptr),
      OPENREG_META_KERNEL(_scaled_dot_product_fused_attention_overrideable, &fused_attention_meta, nullptr),
      OPENREG_META_KERNEL(_scaled_dot_product_fused_attention_overrideable_backward, &fused_attention_backward_meta,
                          nullptr),
      OPENREG_META_KERNEL(native_layer_norm, &layer_norm_meta, nullptr),
      OPENREG_META_KERNEL(native_batch_norm, &batch_norm_meta, nullptr),
      OPENREG_META_KERNEL(native_batch_norm_backward, &batch_norm_backward_meta, nullptr),
      OPENREG_META_KERNEL(native_layer_norm_backward, &layer_norm_backward_meta, nullptr),
  };
  return *kernels;
}

#undef OPENREG_CPP_META
#undef OPENREG_CPP_META_CHECKED
#undef OPENREG_META_KERNEL

}  // namespace

void CppMeta::call(const c10::OperatorHandle& op, torch::jit::Stack* stack) const {
  if (check_args) check_args(*stack);
  kernel.callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
}

const CppMeta* cpp_meta_kernel(const std::string& op_name) {
  const auto& t = table();
  auto it = t.find(op_name);
  return it == t.end() ? nullptr : &it->second;
}

}  // namespace openreg
