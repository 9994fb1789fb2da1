// The oneDNN engine: op table, init (dnnl engine, version, threads) and release.
#include <openreg/sdk/indexing.hpp>
#include <openreg/sdk/tensor_ops.hpp>

#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "data_placement.hpp"
#include "ops.h"
#include "ops_misc.h"

namespace onednn_engine {

void register_optim_ops(openreg::sdk::EngineDef& e);  // ops_optim.cpp
void register_group_norm_ops(openreg::sdk::EngineDef& e);  // ops_norm.cpp
void register_attention_ops(openreg::sdk::EngineDef& e, const std::function<sdk::Kernel(sdk::Kernel)>& guard);  // ops_attention.cpp

namespace {
dnnl::engine* g_engine = nullptr;
sdk::Host g_host;

std::string dnnl_version_string() {
  const dnnl_version_t* v = dnnl_version();
  return sdk::str(v->major, ".", v->minor, ".", v->patch, v->hash && std::string(v->hash) != "N/A" ? std::string(" ") + v->hash : "",
                  " (cpu runtime ", v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other", ")");
}

// A kernel wrapper turning oneDNN's "no implementation" into a decline with
// the message (other oneDNN errors are INTERNAL).
// Also picks the thread count: a thread per kMemGrain elements of the call's
// largest tensor, up to the host's count (torch.get_num_threads()), or per
// kSpreadGrain when the call reads data several threads wrote (data_placement.hpp);
// convolution and matmul refine this by FLOPs.
int64_t largest_tensor(const sdk::Call& call) {
  int64_t m = 0;
  const openreg_call* c = call.raw();
  for (int i = 0; i < c->num_args; ++i)
    if (c->args[i].kind == OPENREG_VALUE_TENSOR) m = std::max(m, sdk::Tensor(c->args[i].u.tensor).numel());
  for (int i = 0; i < c->num_outputs; ++i)
    if (c->outputs[i].ndim >= 0) m = std::max(m, sdk::Tensor(&c->outputs[i]).numel());
  return m;
}

sdk::Kernel guarded(sdk::Kernel k) {
  return [k](const sdk::Call& call) {
    try {
      const int n = memory_bound_threads(call, largest_tensor(call));
      Threads threads(n);
      CallPlacement placement(n);
      k(call);
      placement.done(call);
    } catch (const dnnl::error& e) {
      // No implementation for this case (dtype, layout, ISA): the next engine
      // takes it. Kernels create all their primitives before writing any
      // output, so the decline has written nothing (as the ABI requires).
      if (e.status == dnnl_unimplemented)
        sdk::unsupported(sdk::str(call.op_name(), ": oneDNN has no implementation here (", e.what(), ")"));
      sdk::fail(OPENREG_STATUS_INTERNAL, sdk::str(call.op_name(), ": oneDNN error: ", e.what()));
    }
  };
}
}  // namespace

dnnl::engine& cpu() { return *g_engine; }

std::string cache_summary() {
  auto& c = Cache::get();
  return sdk::str("onednn engine: primitive cache ", c.size(), " entries, ", c.hits(), " hits, ", c.misses(), " misses");
}
const sdk::Host& host() { return g_host; }

}  // namespace onednn_engine

namespace oe = onednn_engine;
namespace sdk = openreg::sdk;

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
  static sdk::EngineDef engine = [] {
    const auto f32 = sdk::dtypes::float32, bf16 = sdk::dtypes::bfloat16;
    sdk::EngineDef e("onednn", "0.1.0 (oneDNN " + oe::dnnl_version_string() + ")");
    const auto f64 = sdk::dtypes::float64, i64 = sdk::dtypes::int64;
    // Ops with a loop of their own serve bfloat16 on any CPU; ops that exist only
    // as oneDNN primitives serve it only where oneDNN has bf16 primitives (isa.hpp).
    // No op registers a supports check: every kernel validates its call first
    // and declines (sdk::unsupported) before writing any output, so a call is
    // one crossing of the ABI.
    auto op = [&](const char* name, sdk::Kernel k) { e.op(name, {f32, bf16}, oe::guarded(std::move(k))); };
    const bool bf16_prims = oe::cpu_caps().avx512_core;
    auto op_prim = [&](const char* name, sdk::Kernel k) {
      if (bf16_prims) e.op(name, {f32, bf16}, oe::guarded(std::move(k)));
      else e.op(name, {f32}, oe::guarded(std::move(k)));
    };
    // Elementwise binaries also serve float64 and int64 (plain loops: Adam's
    // step bookkeeping, BatchNorm's num_batches_tracked).
    auto op_wide = [&](const char* name, bool ints, sdk::Kernel k) {
      if (ints) e.op(name, {f32, bf16, f64, i64}, oe::guarded(std::move(k)));
      else e.op(name, {f32, bf16, f64}, oe::guarded(std::move(k)));
    };
    // matmul
    op_prim("aten::mm", oe::mm);
    op_prim("aten::mm.out", oe::mm);
    op_prim("aten::addmm", oe::addmm);
    op_prim("aten::addmm.out", oe::addmm);
    op_prim("aten::addmm_", oe::addmm);
    op_prim("aten::bmm", oe::bmm);
    op_prim("aten::bmm.out", oe::bmm);
    op_prim("aten::baddbmm", oe::baddbmm);
    op_prim("aten::baddbmm.out", oe::baddbmm);
    op_prim("aten::baddbmm_", oe::baddbmm);
    // convolution
    op_prim("aten::convolution", oe::convolution);
    op_prim("aten::convolution_backward", oe::convolution_backward);
    // softmax
    op_prim("aten::_softmax", oe::softmax);
    op_prim("aten::_softmax.out", oe::softmax);
    op_prim("aten::_log_softmax", oe::log_softmax);
    op_prim("aten::_log_softmax.out", oe::log_softmax);
    op_prim("aten::_softmax_backward_data", oe::softmax_backward);
    op_prim("aten::_softmax_backward_data.out", oe::softmax_backward);
    op_prim("aten::_log_softmax_backward_data", oe::log_softmax_backward);
    op_prim("aten::_log_softmax_backward_data.out", oe::log_softmax_backward);
    // reductions
    op("aten::sum.dim_IntList", oe::sum_dim);
    op("aten::sum.IntList_out", oe::sum_dim);
    op("aten::mean.dim", oe::mean_dim);
    op("aten::mean.out", oe::mean_dim);
    // unary eltwise: functional, in-place, out=
    for (const char* u : {"relu", "gelu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs"}) {
      const std::string n = std::string("aten::") + u;
      op(n.c_str(), oe::unary(u));
      op((n + "_").c_str(), oe::unary(u));
      op((n + ".out").c_str(), oe::unary(u));
    }
    for (const char* u : {"threshold_backward", "sigmoid_backward", "tanh_backward", "gelu_backward"}) {
      const std::string n = std::string("aten::") + u;
      op(n.c_str(), oe::activation_backward(u));
    }
    // binary with broadcasting
    for (const char* b : {"add", "sub", "mul", "div"}) {
      const std::string n = std::string("aten::") + b;
      const bool ints = std::string(b) != "div";
      op_wide((n + ".Tensor").c_str(), ints, oe::binary(b));
      op_wide((n + "_.Tensor").c_str(), ints, oe::binary(b));
      op_wide((n + ".out").c_str(), ints, oe::binary(b));
    }
    for (const char* b : {"maximum", "minimum"}) {
      const std::string n = std::string("aten::") + b;
      op_wide(n.c_str(), true, oe::binary(b));
      op_wide((n + ".out").c_str(), true, oe::binary(b));
    }
    // pointwise loops (Adam), fill
    for (const char* v : {"aten::addcmul", "aten::addcmul_", "aten::addcmul.out"}) op(v, oe::addcmul);
    for (const char* v : {"aten::addcdiv", "aten::addcdiv_", "aten::addcdiv.out"}) op(v, oe::addcdiv);
    for (const char* v : {"aten::lerp.Scalar", "aten::lerp_.Scalar", "aten::lerp.Scalar_out"})
      op(v, oe::lerp_scalar);
    for (const char* v : {"aten::lerp.Tensor", "aten::lerp_.Tensor"})
      op(v, oe::lerp_tensor);
    // fill_ of every dtype (the SDK's kernel): its dtypes are listed with the
    // other shared kernels below.
    op("aten::zero_", oe::zero);
    // losses
    op("aten::nll_loss_forward", oe::nll_loss_forward);
    op("aten::nll_loss_backward", oe::nll_loss_backward);
    op("aten::mse_loss", oe::mse_loss);
    op("aten::mse_loss_backward", oe::mse_loss_backward);
    op("aten::smooth_l1_loss", oe::smooth_l1_loss);
    op("aten::smooth_l1_loss_backward", oe::smooth_l1_loss_backward);
    op("aten::smooth_l1_loss_backward.grad_input", oe::smooth_l1_loss_backward);
    // indexing and joining: copies of bits, so every dtype (where.self is
    // routed by its condition's dtype, bool)
    auto op_any = [&](const char* name, sdk::Kernel k) {
      e.op(name, {f32, f64, bf16, sdk::dtypes::float16, i64, sdk::dtypes::int32, sdk::dtypes::bool_},
           oe::guarded(std::move(k)));
    };
    op_any("aten::index_select", oe::index_select);  // embedding reaches engines as index_select
    op_any("aten::cat", oe::cat);
    e.op("aten::where.self", {sdk::dtypes::bool_}, oe::guarded(oe::where));
    // normalisation
    op_prim("aten::native_batch_norm", oe::batch_norm);
    op_prim("aten::native_batch_norm_backward", oe::batch_norm_backward);
    op_prim("aten::native_layer_norm", oe::layer_norm);
    op_prim("aten::native_layer_norm_backward", oe::layer_norm_backward);
    oe::register_group_norm_ops(e);  // the SDK's group norm, float32 and float64 on any CPU
    // pooling
    op("aten::max_pool2d_with_indices", oe::max_pool2d_with_indices);
    op("aten::max_pool2d_with_indices_backward", oe::max_pool2d_with_indices_backward);
    op_prim("aten::avg_pool2d", oe::avg_pool2d);
    op_prim("aten::avg_pool2d_backward", oe::avg_pool2d_backward);
    // ---- kernels shared with the eigen engine (sdk/tensor_ops.hpp, sdk/indexing.hpp): tensor
    // plumbing real models call between the heavy ops (masks, positions,
    // embedding gradients), so they do not cross to the reference engine.
    {
      const auto all_dtypes = {f32, f64, bf16, sdk::dtypes::float16, i64, sdk::dtypes::int32, sdk::dtypes::int16,
                               sdk::dtypes::int8, sdk::dtypes::uint8, sdk::dtypes::bool_};
      auto shared = [&](const char* name, sdk::Kernel k) { e.op(name, all_dtypes, oe::guarded(std::move(k))); };
      shared("aten::fill_.Scalar", oe::fill_scalar);
      for (const char* n : {"aten::tril", "aten::tril_", "aten::tril.out"}) shared(n, sdk::ops::tril);
      for (const char* n : {"aten::triu", "aten::triu_", "aten::triu.out"}) shared(n, sdk::ops::triu);
      for (const char* n : {"aten::isneginf", "aten::isneginf.out"}) shared(n, sdk::ops::isneginf);
      for (const char* n : {"aten::isposinf", "aten::isposinf.out"}) shared(n, sdk::ops::isposinf);
      for (const char* n : {"aten::all", "aten::all.dim", "aten::all.dims", "aten::all.out", "aten::all.all_out"})
        shared(n, sdk::ops::all);
      for (const char* n : {"aten::any", "aten::any.dim", "aten::any.dims", "aten::any.out", "aten::any.all_out"})
        shared(n, sdk::ops::any);
      // gather and x[idx, ...] (sdk/indexing.hpp): token-type ids and padding masks.
      for (const char* n : {"aten::gather", "aten::gather.out"}) shared(n, sdk::ops::gather);
      // flip and roll (sdk/tensor_ops.hpp): copies along reversed or rotated dims.
      shared("aten::flip", sdk::ops::flip);
      shared("aten::roll", sdk::ops::roll);
      // PReLU (sdk/prelu.hpp), floating dtypes.
      const auto floats = {f32, f64, bf16, sdk::dtypes::float16};
      e.op("aten::_prelu_kernel", floats, oe::guarded(sdk::ops::prelu_kernel));
      e.op("aten::_prelu_kernel_backward", floats, oe::guarded(sdk::ops::prelu_kernel_backward));
      for (const char* n : {"aten::index.Tensor", "aten::index.Tensor_out"}) shared(n, sdk::ops::index);
      e.op("aten::arange.start_out", {f32, f64, bf16, sdk::dtypes::float16, i64, sdk::dtypes::int32},
           oe::guarded(sdk::ops::arange));  // routed by out's dtype, its only tensor
      e.op("aten::embedding_dense_backward", {f32, f64, bf16, sdk::dtypes::float16},
           oe::guarded(sdk::ops::embedding_dense_backward));
      {
        const auto ints = {sdk::dtypes::bool_, sdk::dtypes::uint8, sdk::dtypes::int8, sdk::dtypes::int16,
                           sdk::dtypes::int32, sdk::dtypes::int64};
        for (const char* n : {"aten::bitwise_and.Tensor", "aten::bitwise_and_.Tensor", "aten::bitwise_and.Tensor_out"})
          e.op(n, ints, oe::guarded(sdk::ops::bitwise_and));
        for (const char* n : {"aten::bitwise_or.Tensor", "aten::bitwise_or_.Tensor", "aten::bitwise_or.Tensor_out"})
          e.op(n, ints, oe::guarded(sdk::ops::bitwise_or));
        for (const char* n : {"aten::bitwise_xor.Tensor", "aten::bitwise_xor_.Tensor", "aten::bitwise_xor.Tensor_out"})
          e.op(n, ints, oe::guarded(sdk::ops::bitwise_xor));
      }
      {
        // Comparisons (eigen has its own, ops_compare.cpp): masks built from positions.
        const auto num = {f32, f64, bf16, sdk::dtypes::float16, i64, sdk::dtypes::int32, sdk::dtypes::int16,
                          sdk::dtypes::int8, sdk::dtypes::uint8};
        const std::pair<const char*, sdk::Kernel> cmps[] = {
            {"eq", sdk::ops::compare<sdk::ops::Cmp::Eq>}, {"ne", sdk::ops::compare<sdk::ops::Cmp::Ne>},
            {"lt", sdk::ops::compare<sdk::ops::Cmp::Lt>}, {"le", sdk::ops::compare<sdk::ops::Cmp::Le>},
            {"gt", sdk::ops::compare<sdk::ops::Cmp::Gt>}, {"ge", sdk::ops::compare<sdk::ops::Cmp::Ge>}};
        for (const auto& [name, k] : cmps)
          for (const char* ov : {".Tensor", "_.Tensor", ".Tensor_out", ".Scalar", "_.Scalar", ".Scalar_out"})
            e.op(std::string("aten::") + name + ov, num, oe::guarded(k));
      }
      e.op("aten::where.self_out", {sdk::dtypes::bool_}, oe::guarded(oe::where));
      // Elementwise math without a oneDNN primitive here (ops_misc.cpp): LLaMA's
      // RMSNorm, rotary embedding and SwiGLU.
      for (const char* u : {"neg", "rsqrt", "silu", "sin", "cos", "hardswish", "hardsigmoid"}) {
        const std::string n = std::string("aten::") + u;
        for (const std::string& form : {n, n + "_", n + ".out"}) {
          if (std::string(u) == "neg") e.op(form, {f32, bf16, f64, i64}, oe::guarded(oe::math_unary(u)));
          else e.op(form, {f32, bf16, f64}, oe::guarded(oe::math_unary(u)));
        }
      }
      for (const char* n : {"aten::leaky_relu", "aten::leaky_relu_", "aten::leaky_relu.out"})
        e.op(n, {f32, bf16, f64}, oe::guarded(oe::leaky_relu));
      for (const char* n : {"aten::pow.Tensor_Scalar", "aten::pow_.Scalar", "aten::pow.Tensor_Scalar_out"})
        e.op(n, {f32, bf16, f64}, oe::guarded(oe::pow_scalar));
      e.op("aten::silu_backward", {f32, bf16, f64}, oe::guarded(oe::silu_backward));
      e.op("aten::leaky_relu_backward", {f32, bf16, f64}, oe::guarded(oe::leaky_relu_backward));
      e.op("aten::hardtanh_backward", {f32, bf16, f64}, oe::guarded(oe::hardtanh_backward));
      e.op("aten::hardsigmoid_backward", {f32, bf16, f64}, oe::guarded(oe::hardsigmoid_backward));
    }
    // ---- the optimizer step: fused Adam/AdamW/SGD and _foreach_ lists (ops_optim.cpp)
    oe::register_optim_ops(e);
    sdk::rnn::register_ops(e);  // the fused LSTM/GRU cells (openreg/sdk/rnn.hpp)
    oe::register_attention_ops(e, oe::guarded);  // the overrideable fused attention ops
    e.dynamic_op("aten::mkldnn_rnn_layer", {f32}, oe::guarded(oe::lstm_layer));  // sized by the kernel
    e.op("aten::mkldnn_rnn_layer_backward", {f32}, oe::guarded(oe::lstm_layer_backward));

    e.on_init([](const sdk::Host& h) {
      oe::g_host = h;
      oe::g_engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
      // OPENREG_ONEDNN_CACHE_STATS=1: print the primitive cache counters at exit.
      if (const char* v = std::getenv("OPENREG_ONEDNN_CACHE_STATS"); v && *v && *v != '0')
        std::atexit([] { std::fprintf(stderr, "%s\n", oe::cache_summary().c_str()); });
      h.log(OPENREG_LOG_INFO, "onednn engine: oneDNN " + oe::dnnl_version_string() + ", ISA " + oe::cpu_caps().name +
                                  (oe::cpu_caps().avx512_core ? "" : " (bfloat16 only in the engine's own loops)") +
                                  ", " + std::to_string(h.num_threads()) + " threads (OpenMP max " +
                                  std::to_string(omp_get_max_threads()) + ")");
    });
    e.on_release([] { oe::g_host.log(OPENREG_LOG_INFO, oe::cache_summary()); });
    return e;
  }();
  return engine.table();
}
