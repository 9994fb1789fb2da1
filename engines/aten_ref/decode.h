// ABI values to ATen values: tensors become CPU aliases of the device memory.
#pragma once

#include <openreg/engine.h>

#include <ATen/core/ivalue.h>

#include "op_entry.h"

namespace aten_ref {

// The CPU alias of a descriptor; a c10::Error when its dtype has no ATen counterpart.
at::Tensor alias(const openreg_tensor& t);

// Argument i of a call of entry's op.
c10::IValue to_ivalue(const OpEntry& entry, size_t i, const openreg_value& v);

}  // namespace aten_ref
