// Ops that have a decomposition into smaller device ops: route_call offers them to
// engines as one call, and runs the decomposition instead of the host's reference
// path when no engine ahead of the reference engine serves them (or every one that
// does declines), so each small op still goes to the fastest engine. Two kinds:
//  - the `_foreach_*` loops: ATen's CompositeExplicitAutograd kernel;
//  - the fused RNN cells (`aten::_thnn_fused_*`, CUDA-only in ATen, so the reference
//    engine cannot run them): core's own composite (rnn_cells.cpp), registered for
//    kCompositeSlot.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "../engine/engine_host.h"

namespace openreg {

// The dispatch key run_composite redispatches to: a backend key nothing else
// registers aten kernels for, whose dispatch-table entry is the op's
// CompositeExplicitAutograd kernel, or core's own decomposition registered there.
constexpr c10::DispatchKey kCompositeSlot = c10::DispatchKey::PrivateUse3;

// Ops registered for route_call that keep their decomposition as the fallback:
// every `aten::_foreach_*` overload with a CompositeExplicitAutograd kernel, and the
// fused RNN cells core decomposes (a kernel in kCompositeSlot).
bool wants_composite_route(const c10::OperatorHandle& op);

// False when every engine of the chain is a reference engine (ANY_OP: aten_ref
// alone): the decomposition's small ops would all go to it too, each paying a
// routed call, so one call of the whole op (ATen's CPU kernel) costs less. The
// chain, once loaded, never changes.
bool chain_has_kernels_of_its_own();

// Same decision from the plan's name ("aten::_foreach_add_.List"), cheap per call.
inline bool has_composite_route(const std::string& op_name) {
  return op_name.rfind("aten::_foreach_", 0) == 0 || op_name.rfind("aten::_thnn_fused_", 0) == 0;
}

// True when the first engine of `route` that would run the call lists the op itself
// (an ANY_OP engine, the reference engine aten_ref, only replays ATen's CPU kernel).
inline bool engine_serves(const Route::Candidate& c) { return !c.engine->any_op(); }

// Runs the op's decomposition on the stack (its per-tensor ops dispatch as usual).
void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace openreg
