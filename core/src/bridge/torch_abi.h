// The torch <-> engine-ABI bridge: the facts core and aten_ref must agree on,
// written once. Header-only, so that aten_ref (a separate library that links
// libtorch) and core share the code without sharing a binary.
//  - the dtype map between at::ScalarType and openreg_dtype;
//  - the CPU generator seed of one (seed, offset) random stream;
//  - the CPU tensor that aliases device memory (device memory is host memory).
#pragma once

#include <openreg/engine.h>

#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace openreg::bridge {

// The ABI dtype of an ATen dtype; false when the ABI has none (quantized, float8, ...).
inline bool to_abi_dtype(at::ScalarType type, openreg_dtype* out) {
  auto set = [out](uint8_t code, uint8_t bits) {
    *out = openreg_dtype{code, bits, 1};
    return true;
  };
  switch (type) {
    case at::kHalf: return set(OPENREG_DTYPE_CODE_FLOAT, 16);
    case at::kFloat: return set(OPENREG_DTYPE_CODE_FLOAT, 32);
    case at::kDouble: return set(OPENREG_DTYPE_CODE_FLOAT, 64);
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

// The ATen dtype of an ABI dtype; Undefined when ATen has none. The inverse of
// to_abi_dtype (lanes must be 1; a bool of any width is kBool, as DLPack allows).
constexpr at::ScalarType to_scalar_type(openreg_dtype d) {
  if (d.lanes != 1) return at::ScalarType::Undefined;
  switch (d.code) {
    case OPENREG_DTYPE_CODE_FLOAT:
      switch (d.bits) {
        case 16: return at::kHalf;
        case 32: return at::kFloat;
        case 64: return at::kDouble;
      }
      break;
    case OPENREG_DTYPE_CODE_BFLOAT:
      if (d.bits == 16) return at::kBFloat16;
      break;
    case OPENREG_DTYPE_CODE_INT:
      switch (d.bits) {
        case 8: return at::kChar;
        case 16: return at::kShort;
        case 32: return at::kInt;
        case 64: return at::kLong;
      }
      break;
    case OPENREG_DTYPE_CODE_UINT:
      switch (d.bits) {
        case 8: return at::kByte;
        case 16: return at::kUInt16;
        case 32: return at::kUInt32;
        case 64: return at::kUInt64;
      }
      break;
    case OPENREG_DTYPE_CODE_BOOL: return at::kBool;
    case OPENREG_DTYPE_CODE_COMPLEX:
      switch (d.bits) {
        case 32: return at::kComplexHalf;
        case 64: return at::kComplexFloat;
        case 128: return at::kComplexDouble;
      }
      break;
  }
  return at::ScalarType::Undefined;
}

// The seed of the CPU generator (mt19937) that draws the numbers of the random
// stream (seed, offset) the host hands to one call. Every path that runs a random
// op on the CPU (core's host path, aten_ref) seeds with it: equal pairs must give
// equal numbers whichever path runs the call.
constexpr uint64_t mix_random_stream(uint64_t seed, uint64_t offset) {
  return seed ^ (offset * 0x9E3779B97F4A7C15ULL);
}

// A CPU tensor over `data` (the address of element 0) with this geometry: no
// copy, no ownership; valid while the memory is. `data` may be null when the
// tensor has no elements. (at::from_blob does the same with more checks; this
// runs on every tensor of every call.)
inline at::Tensor cpu_alias(void* data, c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType type) {
  const caffe2::TypeMeta dtype = c10::scalarTypeToTypeMeta(type);
  const size_t nbytes = at::detail::computeStorageNbytes(sizes, strides, dtype.itemsize());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(data, c10::Device(c10::kCPU)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                          dtype);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return t;
}

// The CPU alias of an ABI tensor descriptor (its dtype must have an ATen
// counterpart: check to_scalar_type first).
inline at::Tensor cpu_alias(const openreg_tensor& t) {
  c10::IntArrayRef sizes(t.sizes, t.ndim), strides(t.strides, t.ndim);
  char* base = t.data ? static_cast<char*>(t.data) + t.byte_offset : nullptr;
  return cpu_alias(base, sizes, strides, to_scalar_type(t.dtype));
}

}  // namespace openreg::bridge
