// Turns a boxed ATen call (schema + IValue stack) into an openreg_call: tagged
// values in schema order, tensor descriptors, outputs. Owns every array it hands
// out, so the call stays valid while the builder lives.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <deque>
#include <string>
#include <vector>

#include "../engine/engine_host.h"

namespace openreg {

// DLPack-style dtype of an ATen dtype; false when the ABI cannot express it.
bool to_abi_dtype(at::ScalarType type, openreg_dtype* out);

class CallBuilder {
 public:
  // op_name: "aten::add.Tensor", owned by the caller and alive as long as the
  // builder (the router passes its per-op plan's name, built once per op).
  // args: the op's arguments (schema order). device_index: where random
  // streams are drawn from when a Generator argument is None.
  CallBuilder(const c10::FunctionSchema& schema, const std::string& op_name, c10::ArrayRef<c10::IValue> args,
              c10::DeviceIndex device_index);

  void set_outputs(const std::vector<at::Tensor>& outputs);
  // For ops whose output shapes depend on the data: outputs are requested by
  // the engine through call.alloc_output.
  void set_dynamic_outputs(size_t count, c10::Device device);
  const std::vector<at::Tensor>& dynamic_outputs() const { return dynamic_; }

  openreg_call& call() { return call_; }

 private:
  const openreg_tensor* describe(const at::Tensor& t);
  openreg_value convert(const c10::Argument& arg, const c10::IValue& v);
  static openreg_status alloc_output(const openreg_call* call, int32_t index, int32_t ndim,
                                     const int64_t* sizes, openreg_dtype dtype, openreg_tensor* out);

  c10::DeviceIndex device_index_;
  c10::Device dynamic_device_{c10::DeviceType::CPU};
  std::deque<openreg_tensor> tensors_;
  std::deque<std::vector<const openreg_tensor*>> tensor_lists_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<double>> double_lists_;
  std::deque<std::string> strings_;
  std::vector<openreg_value> values_;
  std::vector<openreg_tensor> outputs_;
  std::vector<at::Tensor> dynamic_;
  std::vector<at::Tensor> keep_alive_;
  openreg_call call_{};
};

}  // namespace openreg
