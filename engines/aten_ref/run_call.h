// One call of an ATen op on CPU aliases of the call's memory.
#pragma once

#include <openreg/engine.h>

namespace aten_ref {

// Runs the call, writing every output; throws (a c10::Error for bad input) on failure.
void run_call(const openreg_call& call);

}  // namespace aten_ref
