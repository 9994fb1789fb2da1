// Fused attention on the device: which kernel F.scaled_dot_product_attention takes.
//
// ATen's F.scaled_dot_product_attention asks the device type's
// _fused_sdp_choice_stub (a DispatchStub), and torch._fused_sdp_choice asks the
// aten::_fused_sdp_choice op: both get the same answer here. On openreg the
// answer is SDPBackend::overrideable when the engine chain serves
// aten::_scaled_dot_product_fused_attention_overrideable for the inputs' dtype and
// the inputs are ones the engines take (the checks CPU's choice makes for its flash
// kernel; where only the reference engine serves it, for inference only: see
// chain_server); else SDPBackend::math, ATen's decomposition into matmul, softmax and
// matmul, each routed to the engines as usual. The overrideable forward and its
// backward (derivatives.yaml pairs them under AutogradPrivateUse1) route like any op
// (op_routing.cpp registers route_call for them, since their composite kernels only
// raise). Dropout is left to the math path: its mask comes from the device
// generator there (core's native_dropout, dropout.cpp), and no engine implements it
// in the fused ops.
#include "../bridge/reference_flash.h"
#include "../bridge/torch_abi.h"
#include "../runtime/runtime.h"

#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>

namespace openreg {
namespace {

constexpr const char* kFusedOp = "aten::_scaled_dot_product_fused_attention_overrideable";

// Who in the chain serves the fused op for a dtype.
enum class Server : int8_t { kUnknown = 0, kNone, kReferenceOnly, kEngine };

// kEngine when an engine of the chain lists the fused op for `dtype`; kReferenceOnly
// when only the reference engine (ANY_OP) would run it. Its forward is torch CPU's
// flash kernel for the inputs fused_inputs lets through, its backward the float64
// definition (engines/aten_ref/attention_cpu.cpp), slower than the math path's ops:
// on the aten_ref chain GPT-2's training step took 1.41x torch CPU's time through the
// fused ops against 0.98x through the math path. So the reference serves inference
// only (see wants_grad), and only inputs its flash forward takes (bridge/reference_flash.h).
// The chain is fixed once loaded, so the answer is kept per dtype (every SDPA call asks).
Server chain_server(at::ScalarType dtype) {
  static std::array<std::atomic<int8_t>, static_cast<size_t>(at::ScalarType::NumOptions)> known{};
  auto& slot = known[static_cast<size_t>(dtype)];
  if (const int8_t k = slot.load(std::memory_order_acquire)) return static_cast<Server>(k);
  lazy_init();
  openreg_dtype d{};
  Server served = Server::kNone;
  if (bridge::to_abi_dtype(dtype, &d)) {
    for (const auto& c : route_table().route(kFusedOp, d, true)->candidates) {
      if (!c.engine->any_op()) served = Server::kEngine;
      else if (served == Server::kNone) served = Server::kReferenceOnly;
    }
  }
  slot.store(static_cast<int8_t>(served), std::memory_order_release);
  return served;
}

// Whether autograd will ask for the backward of this call (a mask that needs a
// gradient never gets here: fused_inputs refuses it).
bool wants_grad(const sdp::sdp_params& p) {
  return at::GradMode::is_enabled() && (p.query.requires_grad() || p.key.requires_grad() || p.value.requires_grad());
}

bool chain_serves(const sdp::sdp_params& p) {
  switch (chain_server(p.query.scalar_type())) {
    case Server::kEngine: return true;
    // Inputs the reference's flash forward does not take would get its float64
    // definition, slower than the math path.
    case Server::kReferenceOnly: return !wants_grad(p) && bridge::reference_flash_takes(p.query, p.key, p.value);
    default: return false;
  }
}

bool is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// The inputs the fused engine kernels take: dense 4-d query, key and value of one
// floating dtype on this device, equal batch, equal heads or, with enable_gqa, key and
// value heads that divide the query's (the engines' contract: query head h reads
// key/value head h / group; transformers' LLaMA asks for it), a mask of bool or
// the query's dtype that broadcasts to [batch, heads, L, S] and needs no gradient,
// no dropout, not both a mask and is_causal.
bool fused_inputs(const sdp::sdp_params& p) {
  const auto dtype = p.query.scalar_type();
  for (const at::Tensor* t : {&p.query, &p.key, &p.value}) {
    if (t->layout() != c10::kStrided || t->is_nested() || t->scalar_type() != dtype) return false;
  }
  if (!is_float(dtype)) return false;
  if (p.attn_mask.has_value()) {
    const auto& m = *p.attn_mask;
    if (m.layout() != c10::kStrided || m.is_nested() || (m.scalar_type() != at::kBool && m.scalar_type() != dtype)) {
      return false;
    }
    if (p.is_causal) return false;
  }
  return sdp::check_tensor_shapes(p, false) && sdp::check_for_dropout(p, false) &&
         sdp::check_batch_size_and_num_heads_dense</*supports_gqa=*/true>(p, false) &&
         sdp::check_attn_mask_shape(p, false) && sdp::check_nonzero_sequence_lengths_dense(p, false) &&
         p.query.size(-1) == p.key.size(-1) && p.key.size(-2) == p.value.size(-2);
}

}  // namespace

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const sdp::sdp_params p{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  const auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && fused_inputs(p) && chain_serves(p)) {
    return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  }
  // As CPU's choice: math when allowed (sdpa_kernel may have turned it off).
  TORCH_CHECK(ctx.userEnabledMathSDP(), "openreg: no scaled_dot_product_attention kernel is enabled for these inputs: "
              "the fused (overrideable) one needs dense 4-d inputs of one floating dtype with equal batch and heads, "
              "no dropout, and an engine that serves it (OPENREG_VERBOSE=1 shows the chain); enable the math one");
  return static_cast<int64_t>(sdp::SDPBackend::math);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", fused_sdp_choice); }

}  // namespace openreg

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &openreg::fused_sdp_choice)
}  // namespace at::native
