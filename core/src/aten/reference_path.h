// The reference path: for what the ABI cannot carry (ops that return a view or a
// Python value), ATen's CPU kernel runs on CPU aliases of the device memory.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace openreg {

// Runs `op` (its arguments on top of `stack`) through ATen's CPU kernel and leaves
// its results on the stack, as device tensors: a result inside an argument's memory
// becomes a view of that argument's storage, any other is copied to `device`.
void run_on_reference_path(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device);

}  // namespace openreg
