#include "call_builder.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "../runtime/runtime.h"

namespace openreg {

bool to_abi_dtype(at::ScalarType type, openreg_dtype* out) {
  auto set = [&](uint8_t code, uint8_t bits) {
    *out = openreg_dtype{code, bits, 1};
    return true;
  };
  switch (type) {
    case at::kFloat: return set(OPENREG_DTYPE_CODE_FLOAT, 32);
    case at::kDouble: return set(OPENREG_DTYPE_CODE_FLOAT, 64);
    case at::kHalf: return set(OPENREG_DTYPE_CODE_FLOAT, 16);
    case at::kBFloat16: return set(OPENREG_DTYPE_CODE_BFLOAT, 16);
    case at::kChar: return set(OPENREG_DTYPE_CODE_INT, 8);
    case at::kShort: return set(OPENREG_DTYPE_CODE_INT, 16);
    case at::kInt: return set(OPENREG_DTYPE_CODE_INT, 32);
    case at::kLong: return set(OPENREG_DTYPE_CODE_INT, 64);
    case at::kByte: return set(OPENREG_DTYPE_CODE_UINT, 8);
    case at::kUInt16: return set(OPENREG_DTYPE_CODE_UINT, 16);
    case at::kUInt32: return set(OPENREG_DTYPE_CODE_UINT, 32);
    case at::kUInt64: return set(OPENREG_DTYPE_CODE_UINT, 64);
    case at::kBool: return set(OPENREG_DTYPE_CODE_BOOL, 8);
    case at::kComplexHalf: return set(OPENREG_DTYPE_CODE_COMPLEX, 32);
    case at::kComplexFloat: return set(OPENREG_DTYPE_CODE_COMPLEX, 64);
    case at::kComplexDouble: return set(OPENREG_DTYPE_CODE_COMPLEX, 128);
    default: return false;
  }
}

CallBuilder::CallBuilder(const c10::FunctionSchema& schema, const std::string& op_name,
                         c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device_index)
    : device_index_(device_index) {
  values_.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) values_.push_back(convert(schema.arguments()[i], args[i]));
  call_.struct_size = sizeof(openreg_call);
  call_.op_name = op_name.c_str();
  call_.op_index = -1;
  call_.num_args = static_cast<int32_t>(values_.size());
  call_.args = values_.data();
}

const openreg_tensor* CallBuilder::describe(const at::Tensor& t) {
  openreg_tensor d{};
  d.struct_size = sizeof(openreg_tensor);
  d.ndim = static_cast<int32_t>(t.dim());
  d.data = t.numel() ? t.data_ptr() : nullptr;
  d.byte_offset = 0;
  d.sizes = t.dim() ? t.sizes().data() : nullptr;
  d.strides = t.dim() ? t.strides().data() : nullptr;
  TORCH_CHECK(to_abi_dtype(t.scalar_type(), &d.dtype), "openreg: dtype ", t.scalar_type(),
              " cannot be passed to engines");
  d.device_index = t.device().is_cpu() ? -1 : t.device().index();
  tensors_.push_back(d);
  return &tensors_.back();
}

openreg_value CallBuilder::convert(const c10::Argument& arg, const c10::IValue& v) {
  openreg_value out{};
  auto type = arg.real_type();
  if (auto opt = type->castRaw<c10::OptionalType>()) type = opt->getElementType();
  if (v.isNone()) {
    if (type->kind() == c10::TypeKind::GeneratorType) {
      out.kind = OPENREG_VALUE_GENERATOR;
      next_random_stream(std::nullopt, device_index_, &out.u.generator.seed, &out.u.generator.offset);
    } else {
      out.kind = OPENREG_VALUE_NONE;
    }
    return out;
  }
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType: {
      out.kind = OPENREG_VALUE_DTYPE;
      TORCH_CHECK(to_abi_dtype(static_cast<at::ScalarType>(v.toInt()), &out.u.dtype), "openreg: dtype ",
                  static_cast<at::ScalarType>(v.toInt()), " cannot be passed to engines");
      return out;
    }
    case c10::TypeKind::LayoutType: out.kind = OPENREG_VALUE_LAYOUT; out.u.i = v.toInt(); return out;
    case c10::TypeKind::MemoryFormatType: out.kind = OPENREG_VALUE_MEMORY_FORMAT; out.u.i = v.toInt(); return out;
    case c10::TypeKind::NumberType: {
      out.kind = OPENREG_VALUE_SCALAR;
      auto s = v.toScalar();
      if (s.isBoolean()) {
        out.u.scalar.kind = OPENREG_SCALAR_BOOL;
        out.u.scalar.v.i = s.toBool();
      } else if (s.isIntegral(false)) {
        out.u.scalar.kind = OPENREG_SCALAR_INT;
        out.u.scalar.v.i = s.toLong();
      } else if (s.isComplex()) {
        out.u.scalar.kind = OPENREG_SCALAR_COMPLEX;
        auto c = s.toComplexDouble();
        out.u.scalar.v.d = c.real();
        out.u.scalar.imag = c.imag();
      } else {
        out.u.scalar.kind = OPENREG_SCALAR_DOUBLE;
        out.u.scalar.v.d = s.toDouble();
      }
      return out;
    }
    case c10::TypeKind::GeneratorType: {
      out.kind = OPENREG_VALUE_GENERATOR;
      next_random_stream(v.toGenerator(), device_index_, &out.u.generator.seed, &out.u.generator.offset);
      return out;
    }
    case c10::TypeKind::DeviceObjType: {
      out.kind = OPENREG_VALUE_DEVICE;
      auto d = v.toDevice();
      out.u.i = d.is_cpu() ? -1 : (d.has_index() ? d.index() : current_device());
      return out;
    }
    default: break;
  }
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined()) return out;  // NONE
    out.kind = OPENREG_VALUE_TENSOR;
    out.u.tensor = describe(t);
  } else if (v.isTensorList() || v.isList()) {
    auto list = v.toListRef();
    c10::TypePtr elem = type->kind() == c10::TypeKind::ListType
                            ? type->castRaw<c10::ListType>()->getElementType()
                            : nullptr;
    if (elem && elem->kind() == c10::TypeKind::OptionalType) {
      elem = elem->castRaw<c10::OptionalType>()->getElementType();
    }
    bool tensors = v.isTensorList() || (elem && elem->kind() == c10::TypeKind::TensorType);
    if (v.isIntList()) {
      int_lists_.emplace_back(v.toIntVector());
      out.kind = OPENREG_VALUE_INT_LIST;
      out.u.ints = {int_lists_.back().data(), int64_t(int_lists_.back().size())};
    } else if (v.isDoubleList()) {
      double_lists_.emplace_back(v.toDoubleVector());
      out.kind = OPENREG_VALUE_DOUBLE_LIST;
      out.u.doubles = {double_lists_.back().data(), int64_t(double_lists_.back().size())};
    } else if (v.isBoolList()) {
      std::vector<int64_t> b;
      for (bool x : v.toBoolList()) b.push_back(x);
      int_lists_.push_back(std::move(b));
      out.kind = OPENREG_VALUE_BOOL_LIST;
      out.u.ints = {int_lists_.back().data(), int64_t(int_lists_.back().size())};
    } else if (tensors) {
      std::vector<const openreg_tensor*> items;
      for (const auto& item : list) {
        items.push_back(item.isTensor() && item.toTensor().defined() ? describe(item.toTensor()) : nullptr);
      }
      tensor_lists_.push_back(std::move(items));
      out.kind = OPENREG_VALUE_TENSOR_LIST;
      out.u.tensors = {tensor_lists_.back().data(), int64_t(tensor_lists_.back().size())};
    } else {
      // SymInt[] and friends arrive as generic lists of ints.
      std::vector<int64_t> ints;
      for (const auto& item : list) ints.push_back(item.toInt());
      int_lists_.push_back(std::move(ints));
      out.kind = OPENREG_VALUE_INT_LIST;
      out.u.ints = {int_lists_.back().data(), int64_t(int_lists_.back().size())};
    }
  } else if (v.isInt() || v.isSymInt()) {
    out.kind = OPENREG_VALUE_INT;
    out.u.i = v.isInt() ? v.toInt() : v.toSymInt().expect_int();
  } else if (v.isDouble()) {
    out.kind = OPENREG_VALUE_DOUBLE;
    out.u.d = v.toDouble();
  } else if (v.isBool()) {
    out.kind = OPENREG_VALUE_BOOL;
    out.u.i = v.toBool();
  } else if (v.isString()) {
    strings_.emplace_back(v.toStringRef());
    out.kind = OPENREG_VALUE_STRING;
    out.u.str = {strings_.back().data(), int64_t(strings_.back().size())};
  } else {
    TORCH_CHECK(false, "openreg: argument '", arg.name(), "' of type ", v.tagKind(),
                " cannot be passed to engines");
  }
  return out;
}

void CallBuilder::set_outputs(const std::vector<at::Tensor>& outputs) {
  outputs_.clear();
  for (const auto& t : outputs) {
    if (t.defined()) {
      outputs_.push_back(*describe(t));
    } else {
      openreg_tensor absent{};
      absent.struct_size = sizeof(openreg_tensor);
      absent.ndim = -1;
      outputs_.push_back(absent);
    }
  }
  call_.num_outputs = static_cast<int32_t>(outputs_.size());
  call_.outputs = outputs_.data();
}

void CallBuilder::set_dynamic_outputs(size_t count, c10::Device device) {
  dynamic_device_ = device;
  dynamic_.assign(count, at::Tensor());
  outputs_.assign(count, openreg_tensor{});
  for (auto& o : outputs_) o.struct_size = sizeof(openreg_tensor);
  call_.num_outputs = static_cast<int32_t>(count);
  call_.outputs = outputs_.data();
  call_.flags |= OPENREG_CALL_DYNAMIC_OUTPUTS;
  call_.alloc_output = &CallBuilder::alloc_output;
  call_.host_call_ctx = this;
}

openreg_status CallBuilder::alloc_output(const openreg_call* call, int32_t index, int32_t ndim,
                                         const int64_t* sizes, openreg_dtype dtype, openreg_tensor* out) {
  auto* self = static_cast<CallBuilder*>(call->host_call_ctx);
  if (index < 0 || index >= call->num_outputs || ndim < 0 || (ndim > 0 && !sizes) || !out) {
    set_thread_error(OPENREG_STATUS_INVALID_ARGUMENT, "alloc_output: bad index, ndim or pointer");
    return OPENREG_STATUS_INVALID_ARGUMENT;
  }
  at::ScalarType st = at::ScalarType::Undefined;
  for (int i = 0; i < static_cast<int>(at::ScalarType::NumOptions); ++i) {
    openreg_dtype d;
    if (to_abi_dtype(static_cast<at::ScalarType>(i), &d) && d == dtype) {
      st = static_cast<at::ScalarType>(i);
      break;
    }
  }
  if (st == at::ScalarType::Undefined) {
    set_thread_error(OPENREG_STATUS_INVALID_ARGUMENT, "alloc_output: unknown dtype");
    return OPENREG_STATUS_INVALID_ARGUMENT;
  }
  try {
    c10::DeviceGuard guard(self->dynamic_device_);
    auto t = at::empty(c10::IntArrayRef(sizes, ndim), at::TensorOptions().dtype(st).device(self->dynamic_device_));
    self->dynamic_[index] = t;
    *out = *self->describe(t);
    self->outputs_[index] = *out;
  } catch (const std::exception& e) {
    set_thread_error(OPENREG_STATUS_OUT_OF_MEMORY, e.what());
    return OPENREG_STATUS_OUT_OF_MEMORY;
  }
  return OPENREG_STATUS_OK;
}

}  // namespace openreg
