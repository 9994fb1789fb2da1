// torch.distributed on openreg tensors: c10d ops on CPU aliases (c10d_on_aliases.cpp).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openreg_python {

// Adds _C._call_on_cpu_aliases(name, *args, **kwargs).
void bind_c10d_on_aliases(pybind11::module& m);

}  // namespace openreg_python
