// Turns a boxed ATen call into an openreg_call: tagged values in schema order (each
// argument converted as its plan says), tensor descriptors, outputs. The arrays live
// in a per-thread arena reused from call to call (no allocation once warm), and stay
// valid while the builder lives.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <vector>

#include "../engine/engine_host.h"

namespace openreg {

struct OpPlan;

struct QueuedCall;

class CallBuilder {
 public:
  // args: the op's arguments (schema order), alive as long as the builder.
  // device_index: where random streams are drawn from when a Generator is None.
  // queued: the call will run on the execution queue after the builder is gone;
  // then hand_over() gives it, with everything it points into, to the task.
  CallBuilder(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device_index,
              bool queued = false);
  ~CallBuilder();
  CallBuilder(const CallBuilder&) = delete;
  CallBuilder& operator=(const CallBuilder&) = delete;

  // The outputs the host allocated (undefined: absent), alive as long as the builder.
  void set_outputs(c10::ArrayRef<at::Tensor> outputs);
  // For ops whose output shapes depend on the data: outputs are requested by
  // the engine through call.alloc_output.
  void set_dynamic_outputs(size_t count, c10::Device device);
  const std::vector<at::Tensor>& dynamic_outputs() const { return dynamic_; }

  openreg_call& call() { return call_; }
  void hand_over(QueuedCall* to);  // queued builders, after set_outputs

  struct Arena;

 private:
  void release_arena();
  static openreg_status alloc_output(const openreg_call* call, int32_t index, int32_t ndim,
                                     const int64_t* sizes, openreg_dtype dtype, openreg_tensor* out);

  Arena& arena_;
  c10::Device dynamic_device_{c10::DeviceType::CPU};
  std::vector<at::Tensor> dynamic_;
  openreg_call call_{};
  bool handed_over_ = false;
};

// A call on its way through the execution queue: the call and its arrays. The
// arena goes back to the pool when the last owner lets go.
struct QueuedCall {
  CallBuilder::Arena* arena = nullptr;
  openreg_call call{};
  QueuedCall() = default;
  QueuedCall(const QueuedCall&) = delete;
  QueuedCall& operator=(const QueuedCall&) = delete;
  ~QueuedCall() { reset(); }
  void reset();  // the arena back to the pool; empty again
};
void recycle_arena(CallBuilder::Arena* arena);

}  // namespace openreg
