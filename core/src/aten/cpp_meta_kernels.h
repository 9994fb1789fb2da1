// ATen's own C++ Meta kernels, called directly for output sizing.
//
// `import torch` replaces the Meta kernel of several hundred aten ops that have
// one in C++ (the structured kernels' meta functions, which CPU's kernels run
// too) with Python (torch._meta_registrations, mostly torch._refs): 0.2-0.5 ms a
// call instead of a few microseconds, and the first one imports torch._dynamo
// (one to two seconds). The output cache hides that once a signature repeats, but
// a model whose shapes change (a new sequence length every batch) meets it on
// every op of every step. For the ops listed in cpp_meta_kernels.cpp the sizing
// calls ATen's C++ Meta kernel (at::meta::*) instead: the same function CPU runs
// before it computes, so the outputs' sizes, strides and dtype are CPU's, and so
// are the errors for bad arguments. For a few ops whose only ATen Meta kernel is a
// Python decomposition (layer and batch norm and their backwards, where, relu,
// mse_loss_backward) the table holds a C++ one of openreg's, written from CPU's kernel.
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/stack.h>

#include <string>

namespace openreg {

// One operator's C++ Meta kernel, boxed, and the argument checks CPU's kernel
// makes beyond it (gelu's `approximate`, which ATen checks in the kernel, not in
// the meta function), so that bad arguments raise CPU's error at the call.
struct CppMeta {
  c10::KernelFunction kernel;
  void (*check_args)(const torch::jit::Stack& args) = nullptr;
  // Runs the checks and the kernel on the Meta twins of a call's arguments; leaves
  // the returns on the stack, as OperatorHandle::callBoxed does.
  void call(const c10::OperatorHandle& op, torch::jit::Stack* stack) const;
};

// The C++ Meta kernel of the operator named "aten::add.Tensor" (the plan's name);
// nullptr for an op not in the table (its Meta kernel is then called through the
// dispatcher).
const CppMeta* cpp_meta_kernel(const std::string& op_name);

}  // namespace openreg
