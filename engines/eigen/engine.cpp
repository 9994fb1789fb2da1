// The Eigen engine's op table: every operator it advertises, for which dtypes,
// and the kernel serving it. Anything else (and anything a kernel declines)
// falls back to the next engine of the chain, in the end aten_ref.
#include <openreg/sdk/indexing.hpp>
#include <openreg/sdk/tensor_ops.hpp>

#include <string>

#include "eigen_engine.h"

namespace sdk = openreg::sdk;
namespace ee = eigen_engine;

namespace eigen_engine {
void register_optim_ops(sdk::EngineDef& e);  // ops_optim.cpp
void register_group_norm_ops(sdk::EngineDef& e);  // ops_norm.cpp
}

namespace {

using DL = std::initializer_list<openreg_dtype>;

// name, name_, name.out (and other out overloads) for one kernel.
void unary_forms(sdk::EngineDef& e, const std::string& op, DL dt, ee::Unary k, bool has_out = true,
                 bool has_inplace = true) {
  auto kern = [k](const sdk::Call& c) { ee::unary(c, k); };
  e.op("aten::" + op, dt, kern);
  if (has_inplace) e.op("aten::" + op + "_", dt, kern);
  if (has_out) e.op("aten::" + op + ".out", dt, kern);
}

void binary_forms(sdk::EngineDef& e, const std::string& op, DL dt, ee::Binary k, bool scalar_forms = true) {
  auto kern = [k](const sdk::Call& c) { ee::binary(c, k); };
  if (k == ee::B_MAX || k == ee::B_MIN) {
    e.op("aten::" + op, dt, kern);
    e.op("aten::" + op + ".out", dt, kern);
    return;
  }
  e.op("aten::" + op + ".Tensor", dt, kern);
  e.op("aten::" + op + "_.Tensor", dt, kern);
  e.op("aten::" + op + ".out", dt, kern);
  if (scalar_forms) {
    e.op("aten::" + op + ".Scalar", dt, kern);
    e.op("aten::" + op + "_.Scalar", dt, kern);
    e.op("aten::" + op + ".Scalar_out", dt, kern);
  }
}

// PyTorch's CPU kernels for _softmax.out, _log_softmax.out, their backward .out
// forms and gelu.out (float32) write a non-contiguous out= tensor as if it were
// contiguous, and aten_ref (the specification) inherits that. This engine writes
// through the strides correctly, so it declines those calls rather than disagree.
// The check runs in the kernel, before it writes: no supports(), one ABI crossing.
template <class Kernel>
sdk::Kernel contiguous_out_only(Kernel kernel) {
  return [kernel](const sdk::Call& c) {
    OPENREG_SDK_REQUIRE(c.output(0).is_contiguous(), c.op_name(),
                        ": non-contiguous out= tensor (PyTorch's CPU kernel writes it as if contiguous; left to the "
                        "reference so results agree)");
    kernel(c);
  };
}

sdk::EngineDef build() {
  const auto f32 = sdk::dtypes::float32, f64 = sdk::dtypes::float64, bf16 = sdk::dtypes::bfloat16;
  const DL ew{f32, f64, bf16};
  const DL fl{f32, f64};
  const DL ewi{f32, f64, bf16, sdk::dtypes::int64, sdk::dtypes::int32};
  const DL ewhi{f32, f64, bf16, sdk::dtypes::float16, sdk::dtypes::int64, sdk::dtypes::int32};
  const DL red_dt{f32, f64, bf16, sdk::dtypes::float16};  // reductions: 16-bit floats read as float
  sdk::EngineDef e("eigen", "0.1.0");

  // ---- elementwise (ops_elementwise.cpp)
  binary_forms(e, "add", ewhi, ee::B_ADD);
  binary_forms(e, "sub", ewhi, ee::B_SUB);
  binary_forms(e, "mul", ewhi, ee::B_MUL);
  binary_forms(e, "div", ew, ee::B_DIV);
  binary_forms(e, "maximum", ew, ee::B_MAX);
  binary_forms(e, "minimum", ew, ee::B_MIN);

  unary_forms(e, "neg", ewi, ee::U_NEG);
  unary_forms(e, "abs", ewi, ee::U_ABS);
  unary_forms(e, "exp", ew, ee::U_EXP);
  unary_forms(e, "log", ew, ee::U_LOG);
  unary_forms(e, "sqrt", ew, ee::U_SQRT);
  unary_forms(e, "rsqrt", ew, ee::U_RSQRT);
  unary_forms(e, "relu", ewi, ee::U_RELU);
  unary_forms(e, "sigmoid", ew, ee::U_SIGMOID);
  unary_forms(e, "tanh", ew, ee::U_TANH);
  unary_forms(e, "gelu", ew, ee::U_GELU, /*has_out=*/false);
  e.op("aten::gelu.out", ew, contiguous_out_only([](const sdk::Call& c) { ee::unary(c, ee::U_GELU); }));
  unary_forms(e, "sin", ew, ee::U_SIN);
  unary_forms(e, "cos", ew, ee::U_COS);
  unary_forms(e, "log2", ew, ee::U_LOG2);
  unary_forms(e, "log1p", ew, ee::U_LOG1P);
  unary_forms(e, "expm1", ew, ee::U_EXPM1);
  unary_forms(e, "erf", ew, ee::U_ERF);
  unary_forms(e, "reciprocal", ew, ee::U_RECIPROCAL);
  unary_forms(e, "floor", ew, ee::U_FLOOR);
  unary_forms(e, "ceil", ew, ee::U_CEIL);
  unary_forms(e, "round", ew, ee::U_ROUND);
  unary_forms(e, "trunc", ew, ee::U_TRUNC);
  unary_forms(e, "silu", ew, ee::U_SILU);
  unary_forms(e, "leaky_relu", ew, ee::U_LEAKY_RELU);
  unary_forms(e, "hardtanh", ew, ee::U_HARDTANH);
  unary_forms(e, "clamp", ew, ee::U_CLAMP);
  {
    auto k = [](const sdk::Call& c) { ee::unary(c, ee::U_POW); };
    for (const char* n : {"aten::pow.Tensor_Scalar", "aten::pow_.Scalar", "aten::pow.Tensor_Scalar_out"})
      e.op(n, ew, k);
  }

  {
    const DL num{f32, f64, bf16, sdk::dtypes::int64, sdk::dtypes::int32};
    const std::pair<const char*, ee::Compare> cmps[] = {{"eq", ee::C_EQ}, {"ne", ee::C_NE}, {"lt", ee::C_LT},
                                                        {"le", ee::C_LE}, {"gt", ee::C_GT}, {"ge", ee::C_GE}};
    for (auto [op, k] : cmps) {
      auto kern = [k = k](const sdk::Call& c) { ee::compare(c, k); };
      for (const char* ov : {".Tensor", "_.Tensor", ".Tensor_out", ".Scalar", "_.Scalar", ".Scalar_out"}) {
        std::string name = std::string("aten::") + op + ov;
        e.op(name, num, kern);
      }
    }
    for (const char* n : {"aten::sign", "aten::sign_", "aten::sign.out"}) e.op(n, num, ee::sign);
  }

  auto act = [&](const std::string& op, ee::ActBackward k) {
    e.op("aten::" + op, ew, [k](const sdk::Call& c) { ee::activation_backward(c, k); });
  };
  act("threshold_backward", ee::A_THRESHOLD);
  act("sigmoid_backward", ee::A_SIGMOID);
  act("tanh_backward", ee::A_TANH);
  act("gelu_backward", ee::A_GELU);
  act("silu_backward", ee::A_SILU);

  for (auto [op, k] : {std::pair<const char*, ee::Ternary>{"addcmul", ee::T_ADDCMUL}, {"addcdiv", ee::T_ADDCDIV}}) {
    auto kern = [k = k](const sdk::Call& c) { ee::ternary(c, k); };
    e.op(std::string("aten::") + op, ew, kern);
    e.op(std::string("aten::") + op + "_", ew, kern);
    e.op(std::string("aten::") + op + ".out", ew, kern);
  }
  {
    auto kern = [](const sdk::Call& c) { ee::ternary(c, ee::T_LERP); };
    for (const char* n : {"aten::lerp.Scalar", "aten::lerp_.Scalar", "aten::lerp.Scalar_out", "aten::lerp.Tensor",
                          "aten::lerp_.Tensor", "aten::lerp.Tensor_out"})
      e.op(n, ew, kern);
  }

  const DL all{f32, f64, bf16, sdk::dtypes::int64, sdk::dtypes::int32, sdk::dtypes::bool_};
  e.op("aten::fill_.Scalar", all, ee::fill);
  e.op("aten::zero_", all, ee::zero);
  e.op("aten::clone", all, ee::clone);
  e.op("aten::copy_", ew, ee::copy);

  // ---- linear algebra (ops_matmul.cpp)
  auto mk = [](bool batched, bool add) { return [=](const sdk::Call& c) { ee::matmul(c, batched, add); }; };
  for (const char* n : {"aten::mm", "aten::mm.out"}) e.op(n, ew, mk(false, false));
  for (const char* n : {"aten::bmm", "aten::bmm.out"}) e.op(n, ew, mk(true, false));
  for (const char* n : {"aten::addmm", "aten::addmm_", "aten::addmm.out"}) e.op(n, ew, mk(false, true));
  for (const char* n : {"aten::baddbmm", "aten::baddbmm_", "aten::baddbmm.out"}) e.op(n, ew, mk(true, true));

  // ---- softmax and losses (ops_softmax.cpp)
  for (bool log : {false, true}) {
    const std::string fwd = log ? "aten::_log_softmax" : "aten::_softmax";
    const std::string bwd = log ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data";
    auto f = [log](const sdk::Call& c) { ee::softmax(c, log); };
    auto b = [log](const sdk::Call& c) { ee::softmax_backward(c, log); };
    e.op(fwd, ew, f);
    e.op(fwd + ".out", ew, contiguous_out_only(f));
    e.op(bwd, ew, b);
    e.op(bwd + ".out", ew, contiguous_out_only(b));
  }
  e.op("aten::nll_loss_forward", fl, ee::nll_loss_forward);
  e.op("aten::nll_loss_backward", fl, ee::nll_loss_backward);
  e.op("aten::mse_loss", fl, ee::mse_loss);  // mse_loss.out: the suite sizes its out wrongly (see README)
  e.op("aten::mse_loss_backward", fl, ee::mse_loss_backward);

  // ---- reductions (ops_reduce.cpp)
  auto red = [](ee::Reduce k) { return [k](const sdk::Call& c) { ee::reduce(c, k); }; };
  e.op("aten::sum", red_dt, red(ee::R_SUM_ALL));
  for (const char* n : {"aten::sum.dim_IntList", "aten::sum.IntList_out"}) e.op(n, red_dt, red(ee::R_SUM));
  for (const char* n : {"aten::mean.dim", "aten::mean.out"}) e.op(n, red_dt, red(ee::R_MEAN));
  for (const char* n : {"aten::amax", "aten::amax.out"}) e.op(n, red_dt, red(ee::R_AMAX));
  for (const char* n : {"aten::amin", "aten::amin.out"}) e.op(n, red_dt, red(ee::R_AMIN));
  e.op("aten::max.dim", red_dt, red(ee::R_MAX_DIM));
  e.op("aten::min.dim", red_dt, red(ee::R_MIN_DIM));
  for (const char* n : {"aten::argmax", "aten::argmax.out"}) e.op(n, red_dt, red(ee::R_ARGMAX));
  for (const char* n : {"aten::argmin", "aten::argmin.out"}) e.op(n, red_dt, red(ee::R_ARGMIN));

  // ---- normalisation (ops_norm.cpp)
  e.op("aten::native_layer_norm", fl, ee::layer_norm);
  e.op("aten::native_layer_norm_backward", fl, ee::layer_norm_backward);
  e.op("aten::native_batch_norm", fl, ee::batch_norm);
  e.op("aten::native_batch_norm_backward", fl, ee::batch_norm_backward);
  ee::register_group_norm_ops(e);  // the SDK's group norm, float32 and float64

  // ---- indexing and joining (ops_index.cpp): copies of bits, so every dtype
  // (where.self is routed by its condition's dtype, bool).
  {
    const DL any{f32, f64, bf16, sdk::dtypes::float16, sdk::dtypes::int64, sdk::dtypes::int32, sdk::dtypes::bool_};
    e.op("aten::index_select", any, ee::index_select);  // embedding reaches engines as index_select
    e.op("aten::cat", any, ee::cat);
    e.op("aten::where.self", {sdk::dtypes::bool_}, ee::where);
  }

  // ---- convolution and pooling (ops_conv.cpp)
  // Both decline transposed and non-2-d convolutions themselves, before writing.
  e.op("aten::convolution", fl, ee::convolution);
  e.op("aten::convolution_backward", fl, ee::convolution_backward);
  e.op("aten::max_pool2d_with_indices", fl, ee::max_pool2d);
  e.op("aten::max_pool2d_with_indices_backward", fl, ee::max_pool2d_backward);
  e.op("aten::avg_pool2d", fl, ee::avg_pool2d);
  e.op("aten::avg_pool2d_backward", fl, ee::avg_pool2d_backward);

  // ---- kernels shared with the onednn engine (sdk/tensor_ops.hpp, sdk/indexing.hpp): tensor
  // plumbing real models call between the heavy ops (masks, positions,
  // embedding gradients), so they do not cross to the reference engine.
  {
    const DL all_dtypes{f32, f64, bf16, sdk::dtypes::float16, sdk::dtypes::int64, sdk::dtypes::int32,
                        sdk::dtypes::int16, sdk::dtypes::int8, sdk::dtypes::uint8, sdk::dtypes::bool_};
    for (const char* n : {"aten::tril", "aten::tril_", "aten::tril.out"}) e.op(n, all_dtypes, sdk::ops::tril);
    for (const char* n : {"aten::triu", "aten::triu_", "aten::triu.out"}) e.op(n, all_dtypes, sdk::ops::triu);
    for (const char* n : {"aten::isneginf", "aten::isneginf.out"}) e.op(n, all_dtypes, sdk::ops::isneginf);
    for (const char* n : {"aten::isposinf", "aten::isposinf.out"}) e.op(n, all_dtypes, sdk::ops::isposinf);
    for (const char* n : {"aten::all", "aten::all.dim", "aten::all.dims", "aten::all.out", "aten::all.all_out"})
      e.op(n, all_dtypes, sdk::ops::all);
    for (const char* n : {"aten::any", "aten::any.dim", "aten::any.dims", "aten::any.out", "aten::any.all_out"})
      e.op(n, all_dtypes, sdk::ops::any);
    // gather and x[idx, ...] (sdk/indexing.hpp): token-type ids and padding masks.
    for (const char* n : {"aten::gather", "aten::gather.out"}) e.op(n, all_dtypes, sdk::ops::gather);
    // flip and roll (sdk/tensor_ops.hpp): copies along reversed or rotated dims.
    e.op("aten::flip", all_dtypes, sdk::ops::flip);
    e.op("aten::roll", all_dtypes, sdk::ops::roll);
    // PReLU (sdk/prelu.hpp), floating dtypes.
    e.op("aten::_prelu_kernel", {f32, f64, bf16, sdk::dtypes::float16}, sdk::ops::prelu_kernel);
    e.op("aten::_prelu_kernel_backward", {f32, f64, bf16, sdk::dtypes::float16}, sdk::ops::prelu_kernel_backward);
    for (const char* n : {"aten::index.Tensor", "aten::index.Tensor_out"}) e.op(n, all_dtypes, sdk::ops::index);
    e.op("aten::arange.start_out", {f32, f64, bf16, sdk::dtypes::float16, sdk::dtypes::int64, sdk::dtypes::int32},
         sdk::ops::arange);  // routed by out's dtype, its only tensor
    e.op("aten::embedding_dense_backward", {f32, f64, bf16, sdk::dtypes::float16},
         sdk::ops::embedding_dense_backward);
    {
      const auto ints = {sdk::dtypes::bool_, sdk::dtypes::uint8, sdk::dtypes::int8, sdk::dtypes::int16,
                         sdk::dtypes::int32, sdk::dtypes::int64};
      for (const char* n : {"aten::bitwise_and.Tensor", "aten::bitwise_and_.Tensor", "aten::bitwise_and.Tensor_out"})
        e.op(n, ints, sdk::ops::bitwise_and);
      for (const char* n : {"aten::bitwise_or.Tensor", "aten::bitwise_or_.Tensor", "aten::bitwise_or.Tensor_out"})
        e.op(n, ints, sdk::ops::bitwise_or);
      for (const char* n : {"aten::bitwise_xor.Tensor", "aten::bitwise_xor_.Tensor", "aten::bitwise_xor.Tensor_out"})
        e.op(n, ints, sdk::ops::bitwise_xor);
    }
    e.op("aten::where.self_out", {sdk::dtypes::bool_}, ee::where);
  }
  // ---- the optimizer step: fused Adam/AdamW/SGD and _foreach_ lists (ops_optim.cpp)
  ee::register_optim_ops(e);
  sdk::rnn::register_ops(e);  // the fused LSTM/GRU cells (openreg/sdk/rnn.hpp)

  // The kernels' instruction set is chosen here, so a bad OPENREG_EIGEN_ISA fails init with its message.
  e.on_init([](const sdk::Host& h) {
    h.log(OPENREG_LOG_INFO, std::string("eigen engine: kernels for ") + ee::isa().name);
  });
  return e;
}

}  // namespace

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
  static sdk::EngineDef engine = build();
  return engine.table();
}
