// The op path's entry: one boxed kernel for every aten op that reaches PrivateUse1
// without a native kernel. It plans the op once, sizes and allocates the outputs,
// then offers the call to the engines of the chain in order (or runs it on the
// host's reference path when the ABI cannot carry it). docs/design.md walks one
// call through it.
#include "../bridge/torch_abi.h"
#include "../runtime/profiler.h"
#include "../runtime/recycling_pool.h"
#include "../runtime/runtime.h"
#include "call_builder.h"
#include "call_checks.h"
#include "composite_route.h"
#include "engine_error.h"
#include "foreach_slices.h"
#include "op_plan.h"
#include "output_sizing.h"
#include "reference_path.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <chrono>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

namespace openreg {

namespace {

// Slot of a dtype in OpPlan::routes: code (0..6) x bits (8..128), or 35 for "no
// tensor"; -1 for anything else (then the route table's own map answers).
int route_slot(openreg_dtype d, bool has_dtype) {
  if (!has_dtype) return 35;
  int b = d.bits == 8 ? 0 : d.bits == 16 ? 1 : d.bits == 32 ? 2 : d.bits == 64 ? 3 : d.bits == 128 ? 4 : -1;
  if (b < 0 || d.code > 6 || d.lanes != 1) return -1;
  return d.code * 5 + b;
}

Route* route_for(OpPlan& plan, openreg_dtype dtype, bool has_dtype) {
  const int slot = route_slot(dtype, has_dtype);
  if (slot >= 0) {
    if (Route* r = plan.routes[slot].load(std::memory_order_acquire)) return r;
  }
  Route* r = route_table().route(plan.name, dtype, has_dtype);
  if (slot >= 0) plan.routes[slot].store(r, std::memory_order_release);
  return r;
}

// The device the call runs on (its first device tensor's, else a Device argument's,
// else the current one) and the dtype it is routed by (its first tensor's), whose
// sizes are the call's size and shape.
c10::DeviceIndex call_device(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, openreg_dtype* dtype,
                             bool* has_dtype, c10::IntArrayRef* sizes) {
  c10::DeviceIndex dev = -1;
  auto visit = [&](const at::Tensor& t) {
    if (!*has_dtype) {
      *has_dtype = bridge::to_abi_dtype(t.scalar_type(), dtype);
      *sizes = t.sizes();
    }
    if (dev < 0 && t.device().type() == kDevice) dev = t.device().index();
  };
  for (int i : plan.tensor_args) {
    const c10::IValue& a = args[i];
    if (a.isTensor()) {
      if (a.toTensor().defined()) visit(a.toTensor());
    } else if (a.isList()) {
      for (const auto& item : a.toListRef()) {
        if (item.isTensor() && item.toTensor().defined()) visit(item.toTensor());
      }
    }
  }
  if (dev < 0) {
    for (size_t i = 0; i < args.size(); ++i) {
      if (plan.arg_kinds[i] == ArgKind::kDevice && args[i].isDevice() && args[i].toDevice().type() == kDevice &&
          args[i].toDevice().has_index()) {
        return args[i].toDevice().index();
      }
    }
  }
  return dev < 0 ? current_device() : dev;
}

void run_reference_only(OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device) {
  TORCH_CHECK(registry().config().fallback, "openreg: ", plan.name, " ", plan.reference_reason,
              ", which only the reference path can produce, and strict mode is on "
              "(OPENREG_FALLBACK=none). Unset OPENREG_FALLBACK to allow it");
  if (verbosity() >= 2) log_line(plan.name + " -> host reference path (" + plan.reference_reason + ")");
  run_on_reference_path(op, stack, device);
  Route* counter = plan.reference_route.load(std::memory_order_acquire);
  if (!counter) {
    counter = route_table().reference_route(plan.name);
    plan.reference_route.store(counter, std::memory_order_release);
  }
  counter->reference_calls.fetch_add(1, std::memory_order_relaxed);
}

// One call offered to a route's engines, in the route's order; copyable, so that a
// queued call carries it to the worker.
struct Offer {
  OpPlan* plan;
  Route* route;
  openreg_dtype dtype;
  bool composite;  // engines that do not serve the op by name are skipped
  bool timing;
  uint64_t shape;  // shape_key of the routed-by tensor, when tuned or timing
  int first;       // the tuned route's preferred candidate, tried first

  // Index in route->candidates of the k-th engine to offer the call to.
  size_t candidate(size_t k) const {
    const size_t f = static_cast<size_t>(first);
    return f == 0 ? k : k == 0 ? f : k <= f ? k - 1 : k;
  }

  void note_declined(const Route::Candidate& cand, const std::string& msg, std::string* declined) const {
    *declined += "; " + cand.engine->name + " declined: " + msg;
    if (verbosity() >= 1) log_line(plan->name + ": " + cand.engine->name + " declined (" + msg + ")");
  }

  // An engine's error: a c10 error of its status's class here, the same kept as the
  // TaskError's kind on the worker (reported at the next synchronisation point).
  [[noreturn]] void raise(const Route::Candidate& cand, openreg_status st, const std::string& msg) const {
    const std::string text =
        engine_error_text(cand.engine->name, plan->name, route->has_dtype ? dtype_name(route->dtype) : "no tensor", msg);
    if (execution_queue().on_worker_thread()) throw TaskError(text, st);
    raise_for_status(st, text);
  }

  // Offers the call from the k-th engine on (asking each whether it supports it,
  // except `trusted`, which already said so); returns the engine that ran it, or
  // null when all declined. Raises an engine's error.
  // `counted`: the call counts in the engine's calls (openreg.stats()); a slice of a
  // call other than its first does not.
  const Route::Candidate* run_from(openreg_call& call, size_t from, std::string* declined,
                                   size_t trusted = SIZE_MAX, bool counted = true) const {
    for (size_t k = from; k < route->candidates.size(); ++k) {
      const size_t i = candidate(k);
      const auto& cand = route->candidates[i];
      if (composite && !engine_serves(cand)) continue;  // its per-tensor loop instead
      call.op_index = cand.op_index;
      std::string msg;
      const auto start = timing ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      openreg_status st = k == trusted ? OPENREG_STATUS_OK : invoke_supports(*cand.engine, call, &msg);
      if (st == OPENREG_STATUS_OK) {
        profiling::KernelScope event(cand.engine->name, plan->name);
        st = invoke_run(*cand.engine, call, &msg);
      }
      if (timing && st == OPENREG_STATUS_OK) {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
        route->add_timing(shape, i, static_cast<uint64_t>(ns.count()));
      }
      if (st == OPENREG_STATUS_UNSUPPORTED) {
        note_declined(cand, msg, declined);
        continue;
      }
      if (st != OPENREG_STATUS_OK) raise(cand, st, msg);
      if (counted) route->calls[i].fetch_add(1, std::memory_order_relaxed);
      if (verbosity() >= 2) log_line(plan->name + " -> " + cand.engine->name);
      return &cand;
    }
    return nullptr;
  }

  // On the worker: the k-th engine said it supports the call; should it decline
  // after all, the later ones are offered it. Errors go to the queue as text.
  void run_queued(openreg_call& call, size_t k, bool counted = true) const {
    try {
      std::string declined;
      if (run_from(call, k, &declined, k, counted)) return;
      TORCH_CHECK(false, route_table().uncovered_message(*route), declined);
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  }
};

// An engine call on the execution queue: the call, the engine that took it, and the
// caller's profiler when one was recording (its event is recorded where the call runs).
// An elementwise _foreach_ op may also run a slice at a time (foreach_slices.h), unless
// a profiler or route timing wants its calls whole. Taken from a pool on the calling
// thread and given back by the worker (recycling_pool.h).
struct QueuedOp {
  QueuedCall call;
  Offer offer{};
  size_t k = 0;
  std::unique_ptr<profiling::Capture> profiler;
  std::unique_ptr<ForeachSlices> slices;
  SliceableWork sliceable;  // slices' work, with run_slices below

  static QueuedOp* take(const Offer& offer, size_t k) {
    QueuedOp* op = RecyclingPool<QueuedOp>::instance().take();
    op->offer = offer;
    op->k = k;
    op->profiler = profiling::capture();
    return op;
  }
  static void run(void* self) {
    auto* op = static_cast<QueuedOp*>(self);
    profiling::WorkerScope scope(op->profiler.get());
    op->offer.run_queued(op->call.call, op->k);
  }
  static void run_slices(void* self, const Slice* slices, size_t count) {
    auto* op = static_cast<QueuedOp*>(self);
    const bool first = slices[0].position == 0 && slices[0].begin == 0;
    op->offer.run_queued(op->slices->sliced(slices, count), op->k, first);
  }
  // Done (run, skipped or dropped): what it holds goes, the op goes back to the pool.
  static void drop(void* self) {
    auto* op = static_cast<QueuedOp*>(self);
    op->call.reset();
    op->profiler.reset();
    op->slices.reset();
    RecyclingPool<QueuedOp>::instance().give_back(op);
  }
  RawWork work() {
    if (offer.plan->foreach_elementwise && !profiler && !offer.timing && interleave_group_elements() > 0) {
      slices = ForeachSlices::of(call.call);
      if (slices) sliceable = slices->work(), sliceable.run_slices = &QueuedOp::run_slices;
    }
    return RawWork{&QueuedOp::run, &QueuedOp::drop, this, slices ? &sliceable : nullptr};
  }
};

// Runs a call that is not queued: on the worker for a dynamic call of a host thread
// (run_on_worker), else here (launch blocking, or already on the worker).
const Route::Candidate* run_here_or_on_worker(Offer& offer, openreg_call& call, c10::DeviceIndex dev,
                                              std::string* declined) {
  const Route::Candidate* ran = nullptr;
  run_on_worker(dev, [&] { ran = offer.run_from(call, 0, declined); }, offer.plan->name.c_str());
  return ran;
}

// Whether a _foreach_ call's Tensor[] arguments hold tensors of one dtype, the items at a
// position of the same sizes: the calls ATen's fast route (CUDA's) takes whole. Other
// calls (a float32 list plus a bfloat16 one, an item that broadcasts) run the per-tensor
// loop, which promotes and broadcasts as CPU's does; offered to an engine they were
// declined on the worker, where that loop cannot run.
bool foreach_lists_alike(c10::ArrayRef<c10::IValue> args) {
  c10::ArrayRef<c10::IValue> first;
  bool seen = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  for (const c10::IValue& a : args) {
    if (!a.isTensorList()) continue;
    const c10::ArrayRef<c10::IValue> items = a.toListRef();
    if (!seen) {
      first = items;
      seen = true;
      if (!items.empty()) dtype = items[0].toTensor().scalar_type();
    }
    if (items.size() != first.size()) return true;  // the op's own check names the lengths
    for (size_t k = 0; k < items.size(); ++k) {
      const at::Tensor& t = items[k].toTensor();
      const at::Tensor& f = first[k].toTensor();
      if (!t.defined() || !f.defined()) return true;  // the op's own path reports it
      if (t.scalar_type() != dtype || t.sizes() != f.sizes()) return false;
    }
  }
  return true;
}

void route_call(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpPlan& plan = plan_for(op);
  const size_t n = plan.arg_kinds.size();
  auto args = torch::jit::last(*stack, n);

  openreg_dtype dtype{};
  bool has_dtype = false;
  c10::IntArrayRef sizes;
  const c10::DeviceIndex dev = call_device(plan, args, &dtype, &has_dtype, &sizes);
  const c10::Device device(kDevice, dev);
  check_devices(plan.device_rule, plan.name, args, device);
  check_empty_input(plan.device_rule, args);
  if (plan.device_rule.random_fill) check_random_fill(op, args);
  c10::OptionalDeviceGuard guard;
  if (dev != current_device()) guard.reset_device(device);
  lazy_init();

  // Ops with a per-tensor decomposition (_foreach_*) take it unless an engine ahead
  // of the reference engine serves them: its small ops then route one by one. On a
  // chain of reference engines alone the whole op is one call instead.
  const bool composite =
      has_composite_route(plan.name) && wants_composite_route(op) && chain_has_kernels_of_its_own();
  if (composite && plan.reference_only) return run_composite(op, stack);
  if (plan.reference_only) return run_reference_only(plan, op, stack, device);

  Route* route = route_for(plan, dtype, has_dtype);
  if (composite && (route->candidates.empty() || !engine_serves(route->candidates[0]) ||
                    !foreach_lists_alike(args))) {
    return run_composite(op, stack);
  }
  TORCH_CHECK(!route->candidates.empty(), route_table().uncovered_message(*route));

  // Outputs: sized by the Meta kernel (cached) and allocated here, or, for
  // data-dependent shapes, by the engine through alloc_output.
  c10::SmallVector<c10::IValue, 4> returns;
  c10::SmallVector<at::Tensor, 4> outputs;
  // Overlap of written tensors: before out= arguments are resized (as CPU checks in
  // TensorIterator::build and index_select) and after (gather, cat check the resized out=).
  if (!plan.written_args.empty()) check_written_overlap(plan.device_rule, args, plan.written_args);
  auto sizing = output_plan(op, args, plan);
  const bool dynamic = sizing->dynamic;
  const bool kernel_sized = sized_by_kernel(plan, args);  // may leave an optional output undefined
  if (!dynamic) {
    allocate_outputs(*sizing, args, plan, device, &returns, &outputs);
    if (!plan.written_args.empty()) check_written_overlap(plan.device_rule, args, plan.written_args);
  } else {
    for (int a : plan.return_alias) {
      TORCH_CHECK(a < 0, "openreg: cannot size the outputs of ", plan.name,
                  " (its Meta kernel failed) and it writes to an out= argument");
    }
  }

  // Data-dependent output shapes are known only once the op ran: the caller waits for
  // the queue, then for the op, as CUDA synchronises on nonzero. The op runs on the
  // worker like every other (run_on_worker): on the calling thread, its kernel started
  // an OpenMP team of that thread's, and two teams on two CPUs make each other's threads
  // sleep between parallel regions (execution_queue.cpp): on aten_ref's chain, whose
  // whole-layer LSTM kernels are sized this way, a 2-thread training step of a 1-layer
  // LSTM took 8.6 ms against torch CPU's 1.5.
  const bool queued = !dynamic && !run_inline();
  if (dynamic && !run_inline()) synchronize_device(dev);
  CallBuilder builder(plan, args, dev, queued);
  if (dynamic) builder.set_dynamic_outputs(plan.return_alias.size(), device);
  else builder.set_outputs(outputs);
  openreg_call& call = builder.call();

  // Each engine either runs the call or declines it (UNSUPPORTED, nothing written).
  // In the chain's order, except that a tuned route tries first the fastest engine
  // of the call's shape or size class at the calling thread count (a pinned engine,
  // while tuning, goes first instead); route timing
  // (tuning) measures each engine call by the shape of the routed-by tensor.
  Offer offer{&plan, route, dtype, composite, route_timing_enabled(), 0, 0};
  const Engine* pinned = pinned_engine(*route);
  const bool tuned = !pinned && route->follows_table();
  if (tuned || offer.timing) {
    offer.shape = shape_key(sizes.data(), sizes.size());
    if (offer.timing) route->note_shape(offer.shape, sizes.data(), sizes.size());
    if (tuned) {
      offer.first = route->first_candidate(thread_setting(at::get_num_threads()),
                                           size_class(c10::multiply_integers(sizes)), offer.shape);
    }
  }
  if (pinned) offer.first = std::max(0, route->candidate_of(pinned));
  std::string declined;
  if (queued) {
    // Asked here, run on the worker: the engine that says it supports the call gets it.
    for (size_t k = 0; k < route->candidates.size(); ++k) {
      const auto& cand = route->candidates[offer.candidate(k)];
      if (composite && !engine_serves(cand)) continue;
      call.op_index = cand.op_index;
      std::string msg;
      const openreg_status st = invoke_supports(*cand.engine, call, &msg);
      if (st == OPENREG_STATUS_UNSUPPORTED) {
        offer.note_declined(cand, msg, &declined);
        continue;
      }
      if (st != OPENREG_STATUS_OK) offer.raise(cand, st, msg);
      QueuedOp* task = QueuedOp::take(offer, k);
      builder.hand_over(&task->call);
      enqueue_raw(dev, task->work(), plan.name.c_str());
      torch::jit::drop(*stack, n);
      for (auto& r : returns) stack->push_back(std::move(r));
      return;
    }
  } else if (const Route::Candidate* ran = run_here_or_on_worker(offer, call, dev, &declined)) {
    torch::jit::drop(*stack, n);
    if (dynamic) {
      for (size_t r = 0; r < builder.dynamic_outputs().size(); ++r) {
        const auto& t = builder.dynamic_outputs()[r];
        TORCH_CHECK(t.defined() || kernel_sized, "openreg: engine '", ran->engine->name, "' ran ", plan.name,
                    " but did not allocate output ", r, " through alloc_output");
        stack->emplace_back(t);
      }
    } else {
      for (auto& r : returns) stack->push_back(std::move(r));
    }
    return;
  }
  if (composite) {  // every engine that serves it declined
    if (verbosity() >= 1) log_line(plan.name + ": per-tensor loop" + declined);
    return run_composite(op, stack);
  }
  TORCH_CHECK(false, route_table().uncovered_message(*route), declined);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&route_call>());
}

namespace {

// A composite kernel beats a backend fallback in the dispatcher. Some would keep
// ops from reaching engines as themselves, so route_call is registered for them
// directly:
//  - structured ops whose functional/in-place forms have a
//    CompositeExplicitAutogradNonFunctional wrapper (add.Tensor would become
//    empty + add.out): engines see aten::add.Tensor, one call instead of two;
//  - ops whose composite kernel sends unknown backends to *_overrideable stubs
//    that only raise (convolution, convolution_backward), and the overrideable
//    fused attention ops, whose CompositeExplicitAutograd kernel is such a stub;
//  - native_layer_norm, whose CompositeExplicitAutograd kernel would split it
//    into native_batch_norm + addcmul, so engines never saw a layer norm;
//  - native_group_norm, whose CompositeExplicitAutograd kernel views its input
//    as [1, N * groups, -1], which fails on a channels-last input (CPU's kernel
//    takes it: nn.GroupNorm in a channels_last model raised);
//  - the _foreach_* ops, whose CompositeExplicitAutograd loop would send the
//    optimizer's step to engines as several ops per tensor; route_call still runs
//    that loop when no engine serves them (composite_route.h).
struct RegisterDirectRoutes {
  RegisterDirectRoutes() {
    static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto& d = c10::Dispatcher::singleton();
    for (const auto& name : d.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = d.findOp(name);
      if (!op || !op->hasSchema()) continue;
      bool structured = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
                        op->hasKernelForDispatchKey(c10::DispatchKey::CPU);
      bool overrideable = name.name == "aten::convolution" || name.name == "aten::convolution_backward" ||
                          name.name == "aten::native_layer_norm" || name.name == "aten::native_group_norm" ||
                          name.name == "aten::_scaled_dot_product_fused_attention_overrideable" ||
                          name.name == "aten::_scaled_dot_product_fused_attention_overrideable_backward";
      if (!structured && !overrideable && !wants_composite_route(*op)) continue;
      if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      std::string full = name.name.substr(6);
      if (!name.overload_name.empty()) full += "." + name.overload_name;
      lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&route_call>());
    }
  }
} g_register_direct_routes;

}  // namespace

}  // namespace openreg
