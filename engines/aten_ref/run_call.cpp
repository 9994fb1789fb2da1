#include "run_call.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>

#include "bridge/torch_abi.h"
#include "decode.h"
#include "op_entry.h"

namespace aten_ref {
namespace {

// Below every layer (autograd, autocast, ...): the CPU kernel itself, as core's host path does.
void call_cpu_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// torch's Python Meta kernels of native_batch_norm and native_layer_norm keep the
// saved mean/invstd of a bfloat16/float16 input in float32 (as CUDA does); the CPU
// kernels keep them in the parameters' dtype (the input's without parameters) and
// their backward insists on that. The device's own sizing now saves them as CPU does
// (core/src/aten/cpp_meta_kernels.cpp), but statistics sized by the Python kernels
// still arrive (a graph torch.compile traced with fake tensors). The backward gets
// them in the dtype it expects: what the CPU's forward would have saved.
void align_saved_stats(const OpEntry::SavedStatsArgs& a, torch::jit::Stack* stack) {
  auto& s = *stack;
  if (s.size() <= std::max({a.input, a.weight, a.mean, a.invstd}) || !s[a.input].isTensor()) return;
  at::ScalarType want = s[a.weight].isTensor() && s[a.weight].toTensor().defined()
                            ? s[a.weight].toTensor().scalar_type()
                            : s[a.input].toTensor().scalar_type();
  for (size_t i : {a.mean, a.invstd}) {
    if (s[i].isTensor() && s[i].toTensor().defined() && s[i].toTensor().scalar_type() != want) {
      s[i] = s[i].toTensor().to(want);
    }
  }
}

torch::jit::Stack decode_args(const OpEntry& e, const openreg_call& call, size_t extra) {
  torch::jit::Stack stack;
  stack.reserve(call.num_args + extra);
  for (int32_t i = 0; i < call.num_args; ++i) stack.push_back(to_ivalue(e, i, call.args[i]));
  if (e.saved_stats) align_saved_stats(*e.saved_stats, &stack);
  return stack;
}

// ---- the out= form: the kernel writes into the outputs the host allocated

// Row-major dense: the layout every out= kernel writes correctly.
bool is_contiguous(const openreg_tensor& d) {
  int64_t expected = 1;
  for (int32_t i = d.ndim; i-- > 0;) {
    if (d.sizes[i] != 1 && d.strides[i] != expected) return false;
    expected *= d.sizes[i];
  }
  return true;
}

// The out= form stands in for a functional op only into contiguous outputs: some
// of torch 2.13's CPU out= kernels write a strided out= as if it were contiguous
// (_log_softmax_backward_data of transposed operands, whose Meta output keeps
// their layout, came out wrong), without a warning or a geometry change to tell.
bool out_form_fits(const OpEntry& e, const openreg_call& call) {
  if (!e.out_op || !e.out_ok.load(std::memory_order_relaxed) || (call.flags & OPENREG_CALL_DYNAMIC_OUTPUTS)) {
    return false;
  }
  if (static_cast<size_t>(call.num_outputs) != e.op.schema().returns().size()) return false;
  for (int32_t k = 0; k < call.num_outputs; ++k) {
    if (call.outputs[k].ndim < 0) return false;  // absent: the out= form would write it
    if (!is_contiguous(call.outputs[k])) return false;
  }
  return true;
}

bool same_geometry(const at::Tensor& t, const openreg_tensor& d) {
  return t.dim() == d.ndim && t.sizes() == c10::IntArrayRef(d.sizes, d.ndim) &&
         t.strides() == c10::IntArrayRef(d.strides, d.ndim);
}

// Keeps the warnings of an out= call from the user until the call is known good.
struct WarningBuffer : c10::WarningHandler {
  void process(const c10::Warning& w) override { warnings.push_back(w); }
  std::vector<c10::Warning> warnings;
};

enum class OutForm {
  kDone,    // every output written
  kThrew,   // bad input, or the out= form cannot do this call: run the functional op
  kUnsafe,  // the out= form warned or changed an output's geometry: never use it again
};

// The out= form with the host's outputs. An out= kernel may treat its output
// otherwise than the functional kernel treats a fresh tensor (mse_loss.out
// resizes it to use it as scratch): any warning or geometry change discards
// the attempt, and the functional op then writes every output again.
OutForm run_out_form(const OpEntry& e, const openreg_call& call) {
  WarningBuffer buffer;
  c10::WarningUtils::WarningHandlerGuard guard(&buffer);
  try {
    torch::jit::Stack stack = decode_args(e, call, call.num_outputs);
    c10::SmallVector<at::Tensor, 4> outs;
    c10::SmallVector<void*, 4> data;
    for (int32_t k = 0; k < call.num_outputs; ++k) {
      outs.push_back(alias(call.outputs[k]));
      data.push_back(outs.back().data_ptr());
      stack.push_back(outs.back());  // the same TensorImpl: outs[k] sees any resize
    }
    call_cpu_kernel(*e.out_op, &stack);
    for (int32_t k = 0; k < call.num_outputs; ++k) {
      if (outs[k].data_ptr() != data[k] || !same_geometry(outs[k], call.outputs[k])) return OutForm::kUnsafe;
    }
  } catch (const c10::Error&) {
    return buffer.warnings.empty() ? OutForm::kThrew : OutForm::kUnsafe;
  }
  return buffer.warnings.empty() ? OutForm::kDone : OutForm::kUnsafe;
}

// ---- compute, then store: for everything else

// Writes one result into its output descriptor unless the op already wrote there.
void store(const OpEntry& e, const at::Tensor& result, const openreg_tensor& out) {
  if (out.ndim < 0 || !result.defined()) return;
  at::Tensor dst = alias(out);
  if (dst.numel() == 0) return;
  if (result.data_ptr() == dst.data_ptr() && result.strides() == dst.strides()) return;
  if (result.sizes() != dst.sizes()) {
    // Any disagreement but the known unused one is an error, never zeros or a
    // silent broadcast: the host must size such an op by its kernel instead.
    TORCH_CHECK(result.numel() == 0 && e.leaves_unused_outputs_empty, "aten_ref: the CPU kernel of ", e.name,
                " produced shape ", result.sizes(), " but the host sized this output ", dst.sizes(),
                " from the Meta kernel");
    dst.zero_();
    return;
  }
  dst.copy_(result);
}

void compute_and_store(const OpEntry& e, const openreg_call& call) {
  torch::jit::Stack stack = decode_args(e, call, 0);
  call_cpu_kernel(e.op, &stack);

  const bool dynamic = call.flags & OPENREG_CALL_DYNAMIC_OUTPUTS;
  int32_t k = 0;
  auto emit = [&](const at::Tensor& r) {
    TORCH_CHECK(k < call.num_outputs, "aten_ref: ", e.name, " produced more outputs than the ", call.num_outputs,
                " given");
    if (dynamic && r.defined()) {
      openreg_tensor out{};
      std::vector<int64_t> sizes(r.sizes().begin(), r.sizes().end());
      openreg_dtype dt;
      TORCH_CHECK(openreg::bridge::to_abi_dtype(r.scalar_type(), &dt), "aten_ref: dtype ", r.scalar_type(),
                  " cannot be returned through the engine ABI");
      openreg_status st = call.alloc_output(&call, k, static_cast<int32_t>(sizes.size()), sizes.data(), dt, &out);
      TORCH_CHECK(st == OPENREG_STATUS_OK, "aten_ref: the host could not allocate output ", k);
      store(e, r, out);
    } else if (!dynamic) {
      store(e, r, call.outputs[k]);
    }
    ++k;
  };
  for (const auto& ret : stack) {
    if (ret.isTensor()) emit(ret.toTensor());
    else if (ret.isNone() || ret.isInt()) emit(at::Tensor());  // an int return has no output (max_q)
    else if (ret.isTensorList()) for (const auto& t : ret.toTensorList()) emit(t);
    else TORCH_CHECK(false, "aten_ref: ", e.name, " returned a ", ret.tagKind(), ", not a tensor");
  }
}

}  // namespace

void run_call(const openreg_call& call) {
  const OpEntry& e = find_op(call.op_name);
  const auto& schema = e.op.schema();
  TORCH_CHECK(static_cast<size_t>(call.num_args) == schema.arguments().size(), "aten_ref: ", e.name, " takes ",
              schema.arguments().size(), " arguments, got ", call.num_args);
  if (!out_form_fits(e, call)) return compute_and_store(e, call);
  switch (run_out_form(e, call)) {
    case OutForm::kDone: return;
    case OutForm::kUnsafe:
      e.out_ok.store(false, std::memory_order_relaxed);
      return compute_and_store(e, call);
    case OutForm::kThrew:
      compute_and_store(e, call);  // throws again if the input is bad
      e.out_ok.store(false, std::memory_order_relaxed);  // it is not: the out= form is what failed
      return;
  }
}

}  // namespace aten_ref
