// torch.distributed on openreg tensors: c10d ops on CPU aliases (c10d_on_aliases.cpp).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openreg_python {

// Adds _C._register_c10d_kernels(names, before_collective).
void bind_c10d_on_aliases(pybind11::module& m);

}  // namespace openreg_python
