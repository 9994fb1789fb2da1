// What aten_ref knows about one ATen op, worked out once, on its first call.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

namespace aten_ref {

// How one argument's openreg_value becomes an IValue, beyond its value kind.
enum class ArgDecode : uint8_t {
  kPlain,
  kOptionalTensorList,  // Tensor?[]: a NULL item is None
};

struct OpEntry {
  std::string name;  // "aten::add.Tensor"
  c10::OperatorHandle op;
  std::vector<ArgDecode> decode;  // one per schema argument
  // The out= overload (aten::add.out for aten::add.Tensor) when the op is
  // functional and the overload takes its arguments then one kwarg-only
  // Tensor(a!) per return and has a CPU kernel: results are written straight
  // into the outputs the host allocated.
  std::optional<c10::OperatorHandle> out_op;
  // Cleared for good the first time the out= overload warns, changes an
  // output's geometry, or fails where the functional op succeeds.
  mutable std::atomic<bool> out_ok{true};
  // The CPU kernel may leave outputs empty that the Meta kernel sizes (unused
  // batch-norm statistics in eval mode).
  bool leaves_unused_outputs_empty = false;
  // native_batch_norm_backward, native_layer_norm_backward: their saved statistics
  // come in the Meta kernel's dtype. Argument positions, when the op is one of them.
  struct SavedStatsArgs {
    size_t input, weight, mean, invstd;
  };
  std::optional<SavedStatsArgs> saved_stats;

  explicit OpEntry(std::string n, c10::OperatorHandle h) : name(std::move(n)), op(std::move(h)) {}
};

// The entry of op_name ("aten::add.Tensor"). Lock-free once the op has been seen
// with this op_name pointer; throws a c10::Error naming the op when ATen has none.
// Entries live as long as the process.
const OpEntry& find_op(const char* op_name);

}  // namespace aten_ref
