// Output sizing: the geometry of an op's outputs, from PyTorch's Meta kernels,
// cached per argument signature, and the outputs allocated on the device.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace openreg {

struct OpPlan;

// The outputs one Meta call produced: per schema return, either the mutable
// argument it writes (with the sizes the Meta kernel resized it to), None, an
// undefined tensor, a tensor, a list of tensors, or an int (a SymInt return whose
// value the Meta kernel gives: the fused attention ops' max_q/max_k).
struct OutputGeometry {
  c10::SmallVector<int64_t, 6> sizes, strides;
  at::ScalarType dtype = at::ScalarType::Undefined;
};
struct ReturnGeometry {
  enum Kind { kWritten, kNone, kUndefined, kTensor, kList, kInt } kind = kNone;
  std::vector<OutputGeometry> tensors;  // one for kWritten/kTensor, any number for kList
  int64_t value = 0;                    // kInt
};
struct OutputPlan {
  bool dynamic = false;  // no Meta kernel, or the shapes depend on the data: the engine sizes
  std::vector<ReturnGeometry> returns;
};

// Meta results by the signature the Meta kernel sees (see signature_key in
// output_sizing.cpp): many Meta kernels are Python (torch._refs), 50-150 us a call,
// and a training loop repeats the same signatures every step.
struct OutputCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const OutputPlan>> by_signature;
};

// The output plan of this call: cached, or from the Meta kernel (remembered,
// "dynamic" included). Kernel-sized ops are always dynamic.
std::shared_ptr<const OutputPlan> output_plan(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                              OpPlan& plan);

// Allocates the outputs on `device` and resizes written (out=) arguments as the
// Meta kernel did. *returns gets one value per schema return; *flat one tensor
// per output (undefined where absent), in the order engines receive them.
void allocate_outputs(const OutputPlan& m, c10::ArrayRef<c10::IValue> args, const OpPlan& plan,
                      c10::Device device, c10::SmallVectorImpl<c10::IValue>* returns,
                      c10::SmallVectorImpl<at::Tensor>* flat);

}  // namespace openreg
