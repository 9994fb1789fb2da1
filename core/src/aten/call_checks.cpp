#include "call_checks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstring>

namespace openreg {

namespace {

// Copies between devices: their point is a tensor elsewhere.
constexpr const char* kCrossDeviceOps[] = {"aten::copy_", "aten::copy", "aten::_copy_from",
                                           "aten::_copy_from_and_resize", "aten::_to_copy", "aten::to"};

// In-place random fills with scalar parameters (bernoulli_ only in its .float
// overload: .Tensor's p is a tensor whose shape the Meta kernel checks).
constexpr const char* kRandomFills[] = {"aten::normal_",      "aten::uniform_",    "aten::bernoulli_",
                                        "aten::random_",      "aten::exponential_", "aten::geometric_",
                                        "aten::log_normal_", "aten::cauchy_"};

// In-place ops that only change metadata: nothing is written through them.
constexpr const char* kMetadataOps[] = {"aten::squeeze_",  "aten::unsqueeze_", "aten::transpose_", "aten::t_",
                                        "aten::swapdims_", "aten::swapaxes_",  "aten::as_strided_", "aten::resize_",
                                        "aten::resize_as_", "aten::set_",      "aten::detach_"};

// CPU writes these into expanded tensors: fill_ (and zero_) by design, tril_ and
// triu_ unchecked, the others with a deprecation warning only.
constexpr const char* kInternalOverlapAllowed[] = {"aten::fill_",      "aten::zero_", "aten::masked_fill_",
                                                   "aten::index_put_", "aten::_index_put_impl_",
                                                   "aten::index_fill_", "aten::tril_", "aten::triu_"};

// Kernels that do not check their output against their inputs on CPU (neither
// TensorIterator nor at::assert_no_*): a partial overlap is the caller's business
// there. Found by writing each OpInfo op's out= into a tensor that shares one
// element with its input on torch CPU.
constexpr const char* kPartialOverlapAllowed[] = {
    "aten::_fft_c2r", "aten::_linalg_det", "aten::_linalg_eigh", "aten::_linalg_solve_ex", "aten::_linalg_svd",
    "aten::alias_copy", "aten::as_strided_copy", "aten::avg_pool2d", "aten::avg_pool3d", "aten::bmm",
    "aten::cholesky", "aten::diag_embed", "aten::diagonal_copy", "aten::dot", "aten::expand_copy",
    "aten::linalg_cholesky_ex", "aten::linalg_householder_product", "aten::linalg_inv_ex", "aten::linalg_ldl_solve",
    "aten::linalg_lu_solve", "aten::linalg_pinv", "aten::linalg_solve_triangular", "aten::linalg_vector_norm",
    "aten::linear", "aten::log_sigmoid_forward", "aten::log_softmax", "aten::_log_softmax", "aten::logsumexp",
    "aten::mm", "aten::addmm", "aten::mv", "aten::mvlgamma", "aten::narrow_copy", "aten::ormqr",
    "aten::permute_copy", "aten::slice_scatter", "aten::softmax", "aten::_softmax", "aten::squeeze_copy",
    "aten::std", "aten::t_copy", "aten::transpose_copy", "aten::tril", "aten::triu", "aten::unfold_copy",
    "aten::unsqueeze_copy", "aten::var", "aten::vdot", "aten::view_copy"};

// CPU kernels that call at::assert_no_overlap (aten/src/ATen/native: any shared
// element is refused, even when the written tensor is exactly an input).
constexpr const char* kNoOverlapOps[] = {
    "aten::index_select",  "aten::gather",        "aten::take",          "aten::cat",
    "aten::masked_select", "aten::index",         "aten::index_put_",    "aten::_index_put_impl_",
    "aten::put_",          "aten::put",           "aten::index_add_",    "aten::index_add",
    "aten::index_copy_",   "aten::index_copy",    "aten::index_reduce_", "aten::index_reduce",
    "aten::scatter_",      "aten::scatter",       "aten::scatter_add_",  "aten::scatter_add",
    "aten::scatter_reduce_", "aten::scatter_reduce", "aten::nonzero", "aten::linalg_cross"};

template <size_t N>
bool listed(const std::string& name, const char* const (&list)[N]) {
  for (const char* entry : list) {
    if (name == entry) return true;
  }
  return false;
}

bool is_tensor(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

bool is_scalar_type(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) {
    return is_scalar_type(t->castRaw<c10::OptionalType>()->getElementType());
  }
  return t->kind() == c10::TypeKind::ScalarTypeType;
}

bool is_optional_tensor(const c10::TypePtr& t) {
  return t->kind() == c10::TypeKind::OptionalType &&
         is_tensor(t->castRaw<c10::OptionalType>()->getElementType());
}

[[noreturn]] void raise_device_mismatch(const DeviceRule& rule, const std::string& op_name, size_t arg,
                                        c10::Device device, const at::Tensor& t) {
  const std::string arg_name =
      rule.schema && arg < rule.schema->arguments().size() ? rule.schema->arguments()[arg].name() : "";
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", device,
              " and ", t.device(), "! (when checking argument '", arg_name, "' of ", op_name, ")");
}

// A tensor is acceptable where it lives on the op's device, or is a 0-dim CPU
// tensor (ATen reads those as scalars: TensorIterator's "CPU scalars",
// index_put_'s value, masked_fill_'s value, ...).
inline bool acceptable(const at::Tensor& t, c10::Device device) {
  const c10::Device d = t.device();
  return d == device || (d.is_cpu() && t.dim() == 0);
}

// Applies fn to every defined tensor of an argument (tensor or list of tensors).
template <typename F>
inline void each_tensor(const c10::IValue& v, F&& fn) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined()) fn(t);
  } else if (v.isList()) {
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isTensor() && item.toTensor().defined()) fn(item.toTensor());
    }
  }
}

// The first quantized dtype among the call's tensors (Tensor, Tensor?, Tensor[]
// arguments) and ScalarType arguments: one compare per tensor on every call.
std::optional<c10::ScalarType> quantized_dtype(const DeviceRule& rule, c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::ScalarType> found;
  uint64_t mask = rule.overlap_args;  // every tensor argument
  while (mask && !found) {
    const size_t i = static_cast<size_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    if (i >= args.size()) break;
    each_tensor(args[i], [&](const at::Tensor& t) {
      if (!found && c10::isQIntType(t.scalar_type())) found = t.scalar_type();
    });
  }
  mask = rule.dtype_args;
  while (mask && !found) {
    const size_t i = static_cast<size_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    if (i >= args.size()) break;
    if (args[i].isInt() && c10::isQIntType(static_cast<c10::ScalarType>(args[i].toInt()))) {
      found = static_cast<c10::ScalarType>(args[i].toInt());
    }
  }
  return found;
}

}  // namespace

DeviceRule device_rule_for(const c10::FunctionSchema& schema) {
  DeviceRule rule;
  rule.schema = &schema;
  const std::string& name = schema.name();
  rule.devices_unchecked = listed(name, kCrossDeviceOps);
  rule.overlap_unchecked = listed(name, kMetadataOps);
  rule.internal_overlap_allowed = listed(name, kInternalOverlapAllowed);
  rule.any_overlap_refused = listed(name, kNoOverlapOps);
  rule.partial_overlap_allowed = listed(name, kPartialOverlapAllowed);
  rule.empty_input_refused = (name == "aten::max" || name == "aten::min") && schema.overload_name().empty();
  rule.random_fill = listed(name, kRandomFills) && (name != "aten::bernoulli_" || schema.overload_name() == "float");
  const bool foreach_op = name.rfind("aten::_foreach_", 0) == 0;
  rule.foreach_lists = foreach_op;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && i < 64; ++i) {
    const c10::TypePtr& type = args[i].real_type();
    const uint64_t bit = uint64_t{1} << i;
    if (is_scalar_type(type)) rule.dtype_args |= bit;
    if (is_tensor(type) || is_optional_tensor(type)) {
      rule.overlap_args |= bit;
      // _foreach_*.Tensor's `scalars` is a CPU tensor of per-tensor scalars by contract.
      if (!(foreach_op && args[i].name() == "scalars")) rule.device_args |= bit;
    } else if (type->kind() == c10::TypeKind::ListType) {
      const c10::TypePtr& elem = type->castRaw<c10::ListType>()->getElementType();
      if (is_tensor(elem)) {
        rule.overlap_args |= bit;
        rule.device_args |= bit;
      } else if (is_optional_tensor(elem)) {
        // Tensor?[] is advanced indexing's index list: ATen (AdvancedIndex) moves
        // the indices to the indexed tensor's device, so CPU indices are fine.
        rule.overlap_args |= bit;
      }
    }
  }
  return rule;
}

void check_devices(const DeviceRule& rule, const std::string& op_name, c10::ArrayRef<c10::IValue> args,
                   c10::Device device) {
  if (auto q = quantized_dtype(rule, args)) refuse_quantized(op_name, *q);
  if (rule.devices_unchecked) return;
  uint64_t mask = rule.device_args;
  while (mask) {
    const size_t i = static_cast<size_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    if (i >= args.size()) break;
    each_tensor(args[i], [&](const at::Tensor& t) {
      if (!acceptable(t, device)) raise_device_mismatch(rule, op_name, i, device, t);
    });
  }
}

void refuse_quantized(const std::string& op_name, std::optional<c10::ScalarType> dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "openreg: quantized tensors are not supported on the openreg device (", op_name,
      dtype ? std::string(" with dtype ") + c10::toString(*dtype) : std::string(),
      "). Quantize on the CPU instead: torch.quantize_per_tensor(x.cpu(), ...) and keep the quantized tensor ",
      "and its quantized ops there; q.dequantize().to(\"openreg\") brings its values back as floats.");
}

namespace {

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl() ||
         a.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl() ==
             b.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
}

// A _foreach_ op's written list `w` (DeviceRule::foreach_lists).
void check_written_list_overlap(const DeviceRule& rule, c10::ArrayRef<c10::IValue> args, int w) {
  if (rule.partial_overlap_allowed) return;
  const c10::List<at::Tensor> outs = args[w].toTensorList();
  uint64_t mask = rule.overlap_args & ~(w < 64 ? uint64_t{1} << w : 0);
  while (mask) {
    const size_t i = static_cast<size_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    if (i >= args.size()) break;
    if (args[i].isTensorList()) {
      const c10::List<at::Tensor> ins = args[i].toTensorList();
      if (ins.size() != outs.size()) continue;  // the op's own check names the lengths
      for (size_t k = 0; k < outs.size(); ++k) {
        const at::Tensor out = outs.get(k), in = ins.get(k);
        if (out.defined() && in.defined() && same_storage(out, in)) at::assert_no_partial_overlap(out, in);
      }
    } else if (args[i].isTensor()) {
      const at::Tensor& in = args[i].toTensor();
      for (const at::Tensor out : outs) {
        if (out.defined() && in.defined() && same_storage(out, in)) at::assert_no_partial_overlap(out, in);
      }
    }
  }
}

}  // namespace

void check_written_overlap(const DeviceRule& rule, c10::ArrayRef<c10::IValue> args,
                           c10::ArrayRef<int> written_args) {
  if (rule.overlap_unchecked) return;
  for (int w : written_args) {
    if (w < 0 || static_cast<size_t>(w) >= args.size()) continue;
    if (rule.foreach_lists && args[w].isTensorList()) {
      check_written_list_overlap(rule, args, w);
      continue;
    }
    each_tensor(args[w], [&](const at::Tensor& out) {
      if (!rule.internal_overlap_allowed) at::assert_no_internal_overlap(out);
      uint64_t mask = rule.overlap_args & ~(w < 64 ? uint64_t{1} << w : 0);
      while (mask) {
        const size_t i = static_cast<size_t>(__builtin_ctzll(mask));
        mask &= mask - 1;
        if (i >= args.size()) break;
        each_tensor(args[i], [&](const at::Tensor& in) {
          // Tensors on different storages cannot overlap: the common case, decided
          // without ATen's full test.
          if (out.unsafeGetTensorImpl() != in.unsafeGetTensorImpl() &&
              out.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl() !=
                  in.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()) {
            return;
          }
          if (rule.any_overlap_refused) at::assert_no_overlap(out, in);
          else if (!rule.partial_overlap_allowed) at::assert_no_partial_overlap(out, in);
        });
      }
    });
  }
}

namespace {

// Ops on a quantized dtype dispatch to QuantizedPrivateUse1 (empty(dtype=qint8),
// q_cpu.to("openreg"), copy_ from a quantized CPU tensor): none is served.
void refuse_quantized_call(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const DeviceRule rule = device_rule_for(op.schema());
  const auto args = torch::jit::last(*stack, op.schema().arguments().size());
  refuse_quantized(op.schema().name(), quantized_dtype(rule, args));
}

}  // namespace

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized_call>());
}

void check_empty_input(const DeviceRule& rule, c10::ArrayRef<c10::IValue> args) {
  if (!rule.empty_input_refused || !args[0].isTensor() || args[0].toTensor().numel() != 0) return;
  const std::string& name = rule.schema->name();
  TORCH_CHECK(false, name.substr(name.find("::") + 2),
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
              "with the 'dim' argument.");
}

void check_random_fill(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  thread_local at::Generator own = at::make_generator<at::CPUGeneratorImpl>();
  torch::jit::Stack cpu(args.begin(), args.end());
  cpu[0] = at::empty({1}, at::TensorOptions().dtype(args[0].toTensor().scalar_type()));
  TORCH_INTERNAL_ASSERT(op.schema().arguments().back().name() == "generator", op.schema());
  cpu.back() = own;
  op.callBoxed(&cpu);
}

}  // namespace openreg
