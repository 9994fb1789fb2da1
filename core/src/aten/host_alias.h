// CPU tensors that alias openreg memory (device memory is host memory).
#pragma once

#include <ATen/core/Tensor.h>

namespace openreg {

// A CPU tensor viewing the same bytes with the same geometry; CPU tensors and
// undefined tensors are returned as they are.
at::Tensor host_alias(const at::Tensor& t);

}  // namespace openreg
