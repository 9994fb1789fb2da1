// CPU tensors that alias openreg memory (device memory is host memory).
#pragma once

#include "../bridge/torch_abi.h"

namespace openreg {

// A CPU tensor over the same bytes with the same geometry, for running ATen's CPU
// kernels on device memory; CPU tensors and undefined tensors come back as they are.
inline at::Tensor cpu_alias(const at::Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  return bridge::cpu_alias(t.numel() ? t.data_ptr() : nullptr, t.sizes(), t.strides(), t.scalar_type());
}

}  // namespace openreg
