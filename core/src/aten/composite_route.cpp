#include "composite_route.h"

#include "../runtime/runtime.h"

namespace openreg {

bool chain_has_kernels_of_its_own() {
  static const bool any = [] {
    for (const Engine* e : registry().chain())
      if (!e->any_op()) return true;
    return false;
  }();
  return any;
}

bool wants_composite_route(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name().name;
  if (!has_composite_route(name)) return false;
  // The RNN cells: core's decomposition is what fills the slot.
  if (name.rfind("aten::_thnn_fused_", 0) == 0) return op.hasKernelForDispatchKey(kCompositeSlot);
  // The foreach ops: the slot must fall through to CompositeExplicitAutograd.
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(kCompositeSlot);
}

void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(kCompositeSlot), stack);
}

}  // namespace openreg
