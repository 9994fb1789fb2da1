// Ops that have a per-tensor decomposition (ATen's CompositeExplicitAutograd kernel,
// e.g. the `_foreach_*` loops): route_call offers them to engines as one call, and
// runs the decomposition instead of the host's reference path when no engine ahead
// of the reference engine serves them, so each small op still goes to the fastest
// engine.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "../engine/engine_host.h"

namespace openreg {

// Ops registered for route_call that keep their decomposition as the fallback:
// every `aten::_foreach_*` overload with a CompositeExplicitAutograd kernel.
bool wants_composite_route(const c10::OperatorHandle& op);

// Same decision from the plan's name ("aten::_foreach_add_.List"), cheap per call.
inline bool has_composite_route(const std::string& op_name) { return op_name.rfind("aten::_foreach_", 0) == 0; }

// True when the first engine of `route` that would run the call lists the op itself
// (an ANY_OP engine, the reference engine aten_ref, only replays ATen's CPU kernel).
inline bool engine_serves(const Route::Candidate& c) { return !c.engine->any_op(); }

// Runs the op's decomposition on the stack (its per-tensor ops dispatch as usual).
void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace openreg
