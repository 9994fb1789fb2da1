#include "composite_route.h"

namespace openreg {

namespace {
// A backend key nothing registers aten kernels for: its dispatch-table entry is the
// op's CompositeExplicitAutograd kernel (checked per op in wants_composite_route).
constexpr c10::DispatchKey kCompositeSlot = c10::DispatchKey::PrivateUse3;
}  // namespace

bool wants_composite_route(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name().name;
  return has_composite_route(name) && op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(kCompositeSlot);
}

void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(kCompositeSlot), stack);
}

}  // namespace openreg
