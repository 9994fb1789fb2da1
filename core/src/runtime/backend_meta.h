// openreg's c10::BackendMeta: a small set of user-set tags a device tensor carries
// (torch._C._set_tensor_metadata(t, {"openreg.<name>": True})), kept through copies
// between device tensors, shallow copies, torch.save/torch.load, functionalization
// and (with python/openreg/backend_meta.py) FakeTensor conversion.
#pragma once

#include <ATen/core/Tensor.h>

namespace openreg {

// The copy rule: a device-to-device copy gives `dst` the tags of `src` when `src`
// has any, and leaves dst's own otherwise (a copy from the CPU, or from an untagged
// tensor, as when functionalization writes a mutation back into an input).
void copy_backend_meta(const at::Tensor& src, const at::Tensor& dst);

}  // namespace openreg
