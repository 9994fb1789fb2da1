#include "decode.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include "bridge/torch_abi.h"

namespace aten_ref {

using openreg::bridge::to_scalar_type;

namespace {

at::ScalarType checked_scalar_type(openreg_dtype d) {
  at::ScalarType st = to_scalar_type(d);
  TORCH_CHECK(st != at::ScalarType::Undefined, "aten_ref: unknown dtype code ", int(d.code), " bits ",
              int(d.bits));
  return st;
}

}  // namespace

at::Tensor alias(const openreg_tensor& t) {
  checked_scalar_type(t.dtype);
  return openreg::bridge::cpu_alias(t);
}

c10::IValue to_ivalue(const OpEntry& entry, size_t i, const openreg_value& v) {
  switch (v.kind) {
    case OPENREG_VALUE_NONE: return c10::IValue();
    case OPENREG_VALUE_TENSOR: return alias(*v.u.tensor);
    case OPENREG_VALUE_TENSOR_LIST: {
      if (entry.decode[i] == ArgDecode::kOptionalTensorList) {
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(v.u.tensors.count);
        for (int64_t k = 0; k < v.u.tensors.count; ++k) {
          const openreg_tensor* t = v.u.tensors.items[k];
          list.push_back(t ? std::optional<at::Tensor>(alias(*t)) : std::nullopt);
        }
        return list;
      }
      c10::List<at::Tensor> list;
      list.reserve(v.u.tensors.count);
      for (int64_t k = 0; k < v.u.tensors.count; ++k) list.push_back(alias(*v.u.tensors.items[k]));
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
      for (int64_t k = 0; k < v.u.ints.count; ++k) list.push_back(v.u.ints.items[k] != 0);
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
    case OPENREG_VALUE_DTYPE: return static_cast<int64_t>(checked_scalar_type(v.u.dtype));
    case OPENREG_VALUE_LAYOUT:
    case OPENREG_VALUE_MEMORY_FORMAT: return v.u.i;
    case OPENREG_VALUE_DEVICE: return c10::Device(c10::kCPU);
    case OPENREG_VALUE_GENERATOR:
      return at::make_generator<at::CPUGeneratorImpl>(
          openreg::bridge::mix_random_stream(v.u.generator.seed, v.u.generator.offset));
  }
  TORCH_CHECK(false, "aten_ref: argument '", entry.op.schema().arguments()[i].name(), "' has unknown value kind ",
              v.kind);
}

}  // namespace aten_ref
