// What the op path learns once per operator from its schema: the plan.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "../engine/engine_host.h"
#include "call_checks.h"
#include "cpp_meta_kernels.h"
#include "output_sizing.h"

namespace openreg {

// How one schema argument crosses the ABI (decided from its type, once).
enum class ArgKind : uint8_t {
  kTensor,        // Tensor, Tensor?
  kTensorList,    // Tensor[], Tensor?[]
  kInt,           // int, SymInt
  kDouble,
  kBool,
  kIntList,       // int[], SymInt[]
  kDoubleList,
  kBoolList,
  kScalar,        // Scalar (a Python number, its kind kept)
  kString,
  kDtype,         // ScalarType
  kLayout,
  kMemoryFormat,
  kDevice,
  kGenerator,
  kOther,         // decided from the value (rare types)
};

struct OpPlan {
  std::string name;                   // "aten::add.Tensor"
  std::vector<ArgKind> arg_kinds;     // per schema argument
  std::vector<int> tensor_args;       // indices of Tensor / Tensor-list arguments
  std::vector<int> return_alias;      // per return: the argument it writes to, or -1
  std::vector<int> written_args;      // arguments written in place (Tensor(a!))
  // Per argument: a Scalar (or Scalar[]) whose value cannot change the outputs'
  // metadata, only its type can (all Scalars but arange's and range's).
  std::vector<bool> number_arg;
  bool reference_only = false;        // returns what engines cannot produce
  std::string reference_reason;       // "returns a view", ...
  bool kernel_sized = false;          // see kKernelSizedOps in op_plan.cpp
  int kernel_sized_if = -1;           // a bool argument that, true, makes a call kernel-sized (kKernelSizedIf)
  DeviceRule device_rule;             // device and overlap checks (call_checks.h)
  bool foreach_elementwise = false;   // its queued calls may run a slice at a time (foreach_slices.h)
  // ATen's C++ Meta kernel, called directly for output sizing (cpp_meta_kernels.h),
  // or nullptr: the dispatcher's Meta kernel.
  const CppMeta* cpp_meta = nullptr;
  // Route decisions by dtype slot (see route_slot in op_routing.cpp), filled on first use.
  std::array<std::atomic<Route*>, 36> routes{};
  std::atomic<Route*> reference_route{nullptr};  // counts the calls on the reference path
  OutputCache outputs;                // output geometry by argument signature
};

// The plan of an operator, built on first use. Never freed (one per operator).
OpPlan& plan_for(const c10::OperatorHandle& op);

// Whether this call's outputs are sized by the engine that runs it (see kKernelSizedOps).
bool sized_by_kernel(const OpPlan& plan, c10::ArrayRef<c10::IValue> args);

}  // namespace openreg
