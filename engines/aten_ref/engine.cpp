// aten_ref: the reference engine. Runs any ATen op by name through PyTorch's
// dispatcher on CPU tensors that alias the device memory. It is the fallback of
// every other engine and the specification they are tested against.
#include <openreg/engine.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

const openreg_host* g_host = nullptr;

void report(openreg_status status, const std::string& message) {
  if (g_host) g_host->set_error(g_host->ctx, status, message.c_str());
}

// Undefined when the ABI dtype has no ATen counterpart.
at::ScalarType scalar_type_or_undefined(openreg_dtype d) {
  switch (d.code) {
    case OPENREG_DTYPE_CODE_FLOAT:
      if (d.bits == 16) return at::kHalf;
      if (d.bits == 32) return at::kFloat;
      if (d.bits == 64) return at::kDouble;
      break;
    case OPENREG_DTYPE_CODE_BFLOAT:
      if (d.bits == 16) return at::kBFloat16;
      break;
    case OPENREG_DTYPE_CODE_INT:
      if (d.bits == 8) return at::kChar;
      if (d.bits == 16) return at::kShort;
      if (d.bits == 32) return at::kInt;
      if (d.bits == 64) return at::kLong;
      break;
    case OPENREG_DTYPE_CODE_UINT:
      if (d.bits == 8) return at::kByte;
      if (d.bits == 16) return at::kUInt16;
      if (d.bits == 32) return at::kUInt32;
      if (d.bits == 64) return at::kUInt64;
      break;
    case OPENREG_DTYPE_CODE_BOOL: return at::kBool;
    case OPENREG_DTYPE_CODE_COMPLEX:
      if (d.bits == 32) return at::kComplexHalf;
      if (d.bits == 64) return at::kComplexFloat;
      if (d.bits == 128) return at::kComplexDouble;
      break;
  }
  return at::ScalarType::Undefined;
}

at::ScalarType to_scalar_type(openreg_dtype d) {
  at::ScalarType st = scalar_type_or_undefined(d);
  TORCH_CHECK(st != at::ScalarType::Undefined, "aten_ref: unknown dtype code ", int(d.code), " bits ",
              int(d.bits));
  return st;
}

openreg_dtype to_abi_dtype(at::ScalarType st) {
  for (uint8_t code : {OPENREG_DTYPE_CODE_FLOAT, OPENREG_DTYPE_CODE_BFLOAT, OPENREG_DTYPE_CODE_INT,
                       OPENREG_DTYPE_CODE_UINT, OPENREG_DTYPE_CODE_BOOL, OPENREG_DTYPE_CODE_COMPLEX}) {
    for (uint8_t bits : {8, 16, 32, 64, 128}) {
      openreg_dtype d{code, bits, 1};
      if (scalar_type_or_undefined(d) == st) return d;
    }
  }
  TORCH_CHECK(false, "aten_ref: dtype ", st, " cannot be returned through the engine ABI");
}

// A CPU tensor over the descriptor's memory: no copy.
at::Tensor alias(const openreg_tensor& t) {
  c10::IntArrayRef sizes(t.sizes, t.ndim), strides(t.strides, t.ndim);
  auto opts = at::TensorOptions().dtype(to_scalar_type(t.dtype)).device(at::kCPU);
  char* base = static_cast<char*>(t.data) + t.byte_offset;
  return at::from_blob(base ? base : reinterpret_cast<char*>(64), sizes, strides, opts);
}

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto opt = t->castRaw<c10::OptionalType>()) return opt->getElementType();
  return t;
}

c10::IValue to_ivalue(const c10::Argument& arg, const openreg_value& v) {
  switch (v.kind) {
    case OPENREG_VALUE_NONE: return c10::IValue();
    case OPENREG_VALUE_TENSOR: return alias(*v.u.tensor);
    case OPENREG_VALUE_TENSOR_LIST: {
      auto elem = unwrap_optional(arg.real_type())->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::OptionalType) {
        c10::List<std::optional<at::Tensor>> list;
        for (int64_t i = 0; i < v.u.tensors.count; ++i) {
          const openreg_tensor* t = v.u.tensors.items[i];
          list.push_back(t ? std::optional<at::Tensor>(alias(*t)) : std::nullopt);
        }
        return list;
      }
      c10::List<at::Tensor> list;
      for (int64_t i = 0; i < v.u.tensors.count; ++i) list.push_back(alias(*v.u.tensors.items[i]));
      return list;
    }
    case OPENREG_VALUE_INT: return v.u.i;
    case OPENREG_VALUE_DOUBLE: return v.u.d;
    case OPENREG_VALUE_BOOL: return v.u.i != 0;
    case OPENREG_VALUE_INT_LIST:
      return std::vector<int64_t>(v.u.ints.items, v.u.ints.items + v.u.ints.count);
    case OPENREG_VALUE_DOUBLE_LIST:
      return std::vector<double>(v.u.doubles.items, v.u.doubles.items + v.u.doubles.count);
    case OPENREG_VALUE_BOOL_LIST: {
      c10::List<bool> list;
      for (int64_t i = 0; i < v.u.ints.count; ++i) list.push_back(v.u.ints.items[i] != 0);
      return list;
    }
    case OPENREG_VALUE_SCALAR:
      switch (v.u.scalar.kind) {
        case OPENREG_SCALAR_INT: return at::Scalar(v.u.scalar.v.i);
        case OPENREG_SCALAR_BOOL: return at::Scalar(v.u.scalar.v.i != 0);
        case OPENREG_SCALAR_COMPLEX: return at::Scalar(c10::complex<double>(v.u.scalar.v.d, v.u.scalar.imag));
        default: return at::Scalar(v.u.scalar.v.d);
      }
    case OPENREG_VALUE_STRING: return std::string(v.u.str.data, v.u.str.length);
    case OPENREG_VALUE_DTYPE: return static_cast<int64_t>(to_scalar_type(v.u.dtype));
    case OPENREG_VALUE_LAYOUT:
    case OPENREG_VALUE_MEMORY_FORMAT: return v.u.i;
    case OPENREG_VALUE_DEVICE: return c10::Device(c10::kCPU);
    case OPENREG_VALUE_GENERATOR: {
      // One mt19937 stream per (seed, offset): equal pairs give equal numbers.
      uint64_t s = v.u.generator.seed ^ (v.u.generator.offset * 0x9E3779B97F4A7C15ULL);
      return at::make_generator<at::CPUGeneratorImpl>(s);
    }
  }
  TORCH_CHECK(false, "aten_ref: argument '", arg.name(), "' has unknown value kind ", v.kind);
}

const c10::OperatorHandle& find_op(const char* full_name) {
  static std::mutex mutex;
  static std::unordered_map<std::string, c10::OperatorHandle> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(full_name);
  if (it != cache.end()) return it->second;
  std::string name = full_name, overload;
  auto dot = name.find('.');
  if (dot != std::string::npos) {
    overload = name.substr(dot + 1);
    name.resize(dot);
  }
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "aten_ref: no ATen operator named '", full_name, "'");
  return cache.emplace(full_name, *handle).first->second;
}

// Ops whose CPU kernel leaves outputs empty that their Meta kernel sizes, where
// the output is unused: the saved statistics of a batch norm in eval mode.
bool leaves_unused_outputs_empty(const char* op) {
  return std::strcmp(op, "aten::native_batch_norm") == 0 || std::strcmp(op, "aten::native_batch_norm.out") == 0 ||
         std::strncmp(op, "aten::_native_batch_norm_legit", 30) == 0;
}

// Writes one result into its output descriptor unless the op already wrote there.
void store(const openreg_call& call, const at::Tensor& result, const openreg_tensor& out) {
  if (out.ndim < 0 || !result.defined()) return;
  at::Tensor dst = alias(out);
  if (dst.numel() == 0) return;
  if (result.data_ptr() == dst.data_ptr() && result.strides() == dst.strides()) return;
  if (result.sizes() != dst.sizes()) {
    // Any disagreement but the known unused one is an error, never zeros or a
    // silent broadcast: the host must size such an op by its kernel instead.
    TORCH_CHECK(result.numel() == 0 && leaves_unused_outputs_empty(call.op_name), "aten_ref: the CPU kernel of ",
                call.op_name, " produced shape ", result.sizes(), " but the host sized this output ", dst.sizes(),
                " from the Meta kernel");
    dst.zero_();
    return;
  }
  dst.copy_(result);
}

// The device sizes outputs with the Meta kernels, whose native_batch_norm keeps
// the saved mean/invstd of a bfloat16/float16 input in float32 (as CUDA does);
// the CPU kernel keeps them in the parameters' dtype and its backward insists on
// that. The backward gets them in the dtype it expects.
void align_saved_stats(torch::jit::Stack* stack) {
  auto& s = *stack;  // grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, ...
  if (s.size() < 7 || !s[1].isTensor()) return;
  at::ScalarType want = s[2].isTensor() && s[2].toTensor().defined() ? s[2].toTensor().scalar_type()
                                                                     : s[1].toTensor().scalar_type();
  for (size_t i : {size_t(5), size_t(6)}) {
    if (s[i].isTensor() && s[i].toTensor().defined() && s[i].toTensor().scalar_type() != want) {
      s[i] = s[i].toTensor().to(want);
    }
  }
}

openreg_status run_call(const openreg_call* call) {
  const auto& op = find_op(call->op_name);
  const auto& schema = op.schema();
  TORCH_CHECK(static_cast<size_t>(call->num_args) == schema.arguments().size(), "aten_ref: ",
              call->op_name, " takes ", schema.arguments().size(), " arguments, got ", call->num_args);
  torch::jit::Stack stack;
  stack.reserve(call->num_args);
  for (int32_t i = 0; i < call->num_args; ++i) stack.push_back(to_ivalue(schema.arguments()[i], call->args[i]));
  if (std::strcmp(call->op_name, "aten::native_batch_norm_backward") == 0) align_saved_stats(&stack);
  op.callBoxed(&stack);

  const bool dynamic = call->flags & OPENREG_CALL_DYNAMIC_OUTPUTS;
  int32_t k = 0;
  auto emit = [&](const at::Tensor& r) {
    TORCH_CHECK(k < call->num_outputs, "aten_ref: ", call->op_name, " produced more outputs than the ",
                call->num_outputs, " given");
    if (dynamic && r.defined()) {
      openreg_tensor out{};
      std::vector<int64_t> sizes(r.sizes().begin(), r.sizes().end());
      openreg_dtype dt = to_abi_dtype(r.scalar_type());
      openreg_status st = call->alloc_output(call, k, static_cast<int32_t>(sizes.size()), sizes.data(), dt, &out);
      TORCH_CHECK(st == OPENREG_STATUS_OK, "aten_ref: the host could not allocate output ", k);
      store(*call, r, out);
    } else if (!dynamic) {
      store(*call, r, call->outputs[k]);
    }
    ++k;
  };
  for (const auto& ret : stack) {
    if (ret.isTensor()) emit(ret.toTensor());
    else if (ret.isNone()) emit(at::Tensor());
    else if (ret.isTensorList()) for (const auto& t : ret.toTensorList()) emit(t);
    else TORCH_CHECK(false, "aten_ref: ", call->op_name, " returned a ", ret.tagKind(), ", not a tensor");
  }
  return OPENREG_STATUS_OK;
}

// ---- the engine table

openreg_status engine_init(void*, const openreg_host* host, int32_t) {
  g_host = host;
  return OPENREG_STATUS_OK;
}

void engine_release(void*) { g_host = nullptr; }

openreg_status engine_get_ops(void*, const openreg_op_info** ops, int32_t* count) {
  *ops = nullptr;  // every op: OPENREG_ENGINE_FLAG_ANY_OP
  *count = 0;
  return OPENREG_STATUS_OK;
}

openreg_status engine_run(void*, const openreg_call* call) {
  try {
    return run_call(call);
  } catch (const c10::Error& e) {
    report(OPENREG_STATUS_INVALID_ARGUMENT, e.what_without_backtrace());
    return OPENREG_STATUS_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    report(OPENREG_STATUS_INTERNAL, e.what());
    return OPENREG_STATUS_INTERNAL;
  } catch (...) {
    report(OPENREG_STATUS_INTERNAL, "aten_ref: unknown exception");
    return OPENREG_STATUS_INTERNAL;
  }
}

const std::string& version_string() {
  static const std::string v = std::string("1.0.0 (PyTorch ") + TORCH_VERSION + ")";
  return v;
}

}  // namespace

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t host_major, int32_t) {
  static openreg_engine table = [] {
    openreg_engine t{};
    t.struct_size = sizeof(openreg_engine);
    t.abi_major = OPENREG_ABI_VERSION_MAJOR;
    t.abi_minor = OPENREG_ABI_VERSION_MINOR;
    t.flags = OPENREG_ENGINE_FLAG_HOST_MEMORY | OPENREG_ENGINE_FLAG_ANY_OP | OPENREG_ENGINE_FLAG_CONCURRENT_RUN;
    t.magic = OPENREG_ENGINE_MAGIC;
    t.name = "aten_ref";
    t.version = version_string().c_str();
    t.ctx = nullptr;
    t.init = engine_init;
    t.release = engine_release;
    t.get_ops = engine_get_ops;
    t.run = engine_run;
    t.supports = nullptr;
    t.get_proc_address = nullptr;
    return t;
  }();
  (void)host_major;  // the host checks the major; we answer with ours
  return &table;
}
