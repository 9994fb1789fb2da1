// The router: one boxed fallback for every aten op that reaches PrivateUse1
// without a native kernel. It sizes outputs with PyTorch's Meta kernels, allocates
// them on the device, and asks the engines of the chain in order.
#include "../runtime/runtime.h"
#include "call_builder.h"
#include "host_alias.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <shared_mutex>

namespace openreg {

namespace {

// What we learn once per operator from its schema.
struct OpPlan {
  std::string name;              // "aten::add.Tensor"
  std::vector<int> return_alias; // per return: the mutable argument it aliases, or -1
  bool host_only = false;        // returns something engines cannot produce
  std::string host_reason;
  std::atomic<uint64_t> host_calls{0};
  // Router decisions by dtype slot (see route_slot), filled on first use.
  std::array<std::atomic<Route*>, 36> routes{};
};

// Slot of a dtype in OpPlan::routes: code (0..6) x bits (8..128), or 35 for "no
// tensor"; -1 for anything else (then the router's own cache answers).
int route_slot(openreg_dtype d, bool has_dtype) {
  if (!has_dtype) return 35;
  int b = d.bits == 8 ? 0 : d.bits == 16 ? 1 : d.bits == 32 ? 2 : d.bits == 64 ? 3 : d.bits == 128 ? 4 : -1;
  if (b < 0 || d.code > 6 || d.lanes != 1) return -1;
  return d.code * 5 + b;
}

Route* route_for(OpPlan& plan, openreg_dtype dtype, bool has_dtype) {
  int slot = route_slot(dtype, has_dtype);
  if (slot >= 0) {
    if (Route* r = plan.routes[slot].load(std::memory_order_acquire)) return r;
  }
  Route* r = router().route(plan.name, dtype, has_dtype);
  if (slot >= 0) plan.routes[slot].store(r, std::memory_order_release);
  return r;
}

std::shared_mutex g_plans_mutex;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpPlan>> g_plans;

bool is_tensor_type(const c10::TypePtr& t) {
  return t->kind() == c10::TypeKind::TensorType ||
         (t->kind() == c10::TypeKind::OptionalType &&
          t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType);
}

std::unique_ptr<OpPlan> make_plan(const c10::FunctionSchema& schema) {
  auto plan = std::make_unique<OpPlan>();
  plan->name = schema.name();
  if (!schema.overload_name().empty()) plan->name += "." + schema.overload_name();
  const auto& args = schema.arguments();
  for (const auto& r : schema.returns()) {
    int alias = -1;
    const auto* info = r.alias_info();
    if (info && info->isWrite()) {
      for (size_t i = 0; i < args.size(); ++i) {
        const auto* ai = args[i].alias_info();
        if (ai && ai->isWrite() && ai->beforeSets() == info->beforeSets()) alias = static_cast<int>(i);
      }
    } else if (info) {
      plan->host_only = true;
      plan->host_reason = "returns a view";
    }
    bool list = r.type()->kind() == c10::TypeKind::ListType &&
                is_tensor_type(r.type()->castRaw<c10::ListType>()->getElementType());
    if (!is_tensor_type(r.type()) && !list) {
      plan->host_only = true;
      plan->host_reason = "returns a " + r.type()->str();
    }
    if (alias < 0 && info && info->isWrite()) {
      plan->host_only = true;
      plan->host_reason = "mutates a list argument";
    }
    plan->return_alias.push_back(alias);
  }
  return plan;
}

OpPlan& plan_for(const c10::OperatorHandle& op) {
  const auto* key = &op.schema();
  {
    std::shared_lock<std::shared_mutex> lock(g_plans_mutex);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return *it->second;
  }
  auto plan = make_plan(op.schema());
  std::unique_lock<std::shared_mutex> lock(g_plans_mutex);
  auto& slot = g_plans[key];
  if (!slot) slot = std::move(plan);
  return *slot;
}

bool is_device_tensor(const c10::IValue& v) { return v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kDevice; }

// Applies fn to every tensor in an argument (tensors and tensor lists).
template <typename F>
void for_each_tensor(const c10::IValue& v, F&& fn) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) fn(v.toTensor());
  } else if (v.isTensorList() || v.isList()) {
    for (const auto& item : v.toListRef()) {
      if (item.isTensor() && item.toTensor().defined()) fn(item.toTensor());
    }
  }
}

// Rebuilds an argument with each tensor mapped through fn (lists keep their type).
template <typename F>
c10::IValue map_tensors(const c10::IValue& v, F&& fn) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(fn(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const auto& t : v.toTensorList()) out.push_back(fn(static_cast<at::Tensor>(t)));
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    if (in.empty() || !(in.get(0).isTensor() || in.get(0).isNone())) return v;
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& item : in) {
      c10::IValue e = item;
      if (e.isTensor() && e.toTensor().defined()) out.push_back(fn(e.toTensor()));
      else out.push_back(std::nullopt);
    }
    return out;
  }
  return v;
}

// Sizes every output with the Meta kernel and allocates it on the device.
// Returns (per schema return) the output tensors, flattened into *flat.
void size_outputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, const OpPlan& plan,
                  c10::Device device, std::vector<c10::IValue>* returns, std::vector<at::Tensor>* flat) {
  torch::jit::Stack meta;
  meta.reserve(args.size());
  for (const auto& a : args) {
    if (a.isGenerator()) {
      meta.emplace_back();
    } else if (a.isDevice()) {
      meta.emplace_back(c10::Device(c10::kMeta));
    } else {
      meta.push_back(map_tensors(a, [](const at::Tensor& t) {
        if (t.device().type() != kDevice) return t;
        return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
      }));
    }
  }
  op.callBoxed(&meta);
  auto alloc = [&](const at::Tensor& m) -> at::Tensor {
    if (!m.defined()) return m;
    return at::empty_strided(m.sizes(), m.strides(), m.options().device(device));
  };
  for (size_t r = 0; r < plan.return_alias.size(); ++r) {
    const c10::IValue& m = meta[r];
    int alias = plan.return_alias[r];
    if (alias >= 0) {
      const at::Tensor& real = args[alias].toTensor();
      if (real.sizes() != m.toTensor().sizes()) real.resize_(m.toTensor().sizes());
      returns->push_back(args[alias]);
      flat->push_back(real);
    } else if (m.isTensor()) {
      auto t = alloc(m.toTensor());
      returns->emplace_back(t);
      flat->push_back(t);
    } else if (m.isNone()) {
      returns->emplace_back();
      flat->emplace_back();
    } else {
      c10::List<at::Tensor> list;
      for (const auto& item : m.toTensorList()) {
        auto t = alloc(item);
        list.push_back(t);
        flat->push_back(t);
      }
      returns->emplace_back(list);
    }
  }
}

// The reference path for what the ABI cannot carry (views, non-tensor
// results): ATen's CPU kernel on aliases of the device memory.
void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device) {
  size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> originals(stack->end() - n, stack->end());
  torch::jit::Stack cpu;
  for (const auto& a : originals) {
    if (a.isGenerator()) {
      uint64_t seed, offset;
      next_random_stream(a.toGenerator(), device.index(), &seed, &offset);
      cpu.emplace_back(at::make_generator<at::CPUGeneratorImpl>(seed ^ (offset * 0x9E3779B97F4A7C15ULL)));
    } else if (a.isDevice()) {
      cpu.emplace_back(c10::Device(c10::kCPU));
    } else {
      cpu.push_back(map_tensors(a, host_alias));
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu);
  // A result that points into an argument's memory is a view of it: rebuild it
  // on that argument's storage (its dtype may differ, as for view(dtype)).
  auto adopt = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || r.device().type() == kDevice) return r;
    const char* p = static_cast<const char*>(r.storage().data());
    for (const auto& a : originals) {
      at::Tensor base;
      for_each_tensor(a, [&](const at::Tensor& t) {
        if (base.defined() || t.device().type() != kDevice || !t.storage().data()) return;
        const char* lo = static_cast<const char*>(t.storage().data());
        if (p >= lo && p < lo + t.storage().nbytes()) base = t;
      });
      if (base.defined()) {
        const auto* start = static_cast<const char*>(base.storage().data());
        int64_t offset = (static_cast<const char*>(r.data_ptr()) - start) / int64_t(r.dtype().itemsize());
        return at::empty({0}, base.options().dtype(r.dtype()))
            .set_(base.storage(), offset, r.sizes(), r.strides());
      }
    }
    return r.to(device);
  };
  torch::jit::drop(*stack, n);
  for (auto& r : cpu) stack->push_back(map_tensors(r, adopt));
}

[[noreturn]] void engine_failed(const Engine& e, const std::string& op, const Route& route, const std::string& msg) {
  TORCH_CHECK(false, "openreg: engine '", e.name, "' failed on ", op, " (",
              route.has_dtype ? dtype_name(route.dtype) : "no tensor", "): ", msg);
}

void router_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  OpPlan& plan = plan_for(op);

  c10::DeviceIndex dev = -1;
  openreg_dtype dtype{};
  bool has_dtype = false;
  for (const auto& a : args) {
    for_each_tensor(a, [&](const at::Tensor& t) {
      if (!has_dtype) has_dtype = to_abi_dtype(t.scalar_type(), &dtype);
      if (dev < 0 && t.device().type() == kDevice) dev = t.device().index();
    });
    if (dev < 0 && a.isDevice() && a.toDevice().type() == kDevice && a.toDevice().has_index()) {
      dev = a.toDevice().index();
    }
  }
  if (dev < 0) dev = current_device();
  const c10::Device device(kDevice, dev);
  c10::DeviceGuard guard(device);
  lazy_init();

  if (plan.host_only) {
    TORCH_CHECK(registry().config().fallback, "openreg: ", plan.name, " ", plan.host_reason,
                ", which only the reference path can produce, and strict mode is on "
                "(OPENREG_FALLBACK=none). Unset OPENREG_FALLBACK to allow it");
    if (verbosity() >= 2) log_line(plan.name + " -> host reference path (" + plan.host_reason + ")");
    run_on_host(op, stack, device);
    plan.host_calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }

  Route* route = route_for(plan, dtype, has_dtype);
  TORCH_CHECK(!route->candidates.empty(), router().uncovered_message(*route));

  std::vector<c10::IValue> returns;
  std::vector<at::Tensor> outputs;
  bool dynamic = false;
  try {
    size_outputs(op, args, plan, device, &returns, &outputs);
  } catch (const std::exception&) {
    // No Meta kernel, or the shape depends on the data: the engine sizes outputs.
    dynamic = true;
    returns.clear();
    outputs.clear();
    for (int a : plan.return_alias) {
      TORCH_CHECK(a < 0, "openreg: cannot size the outputs of ", plan.name,
                  " (its Meta kernel failed) and it writes to an out= argument");
    }
  }

  CallBuilder builder(schema, args, dev);
  if (dynamic) builder.set_dynamic_outputs(plan.return_alias.size(), device);
  else builder.set_outputs(outputs);
  openreg_call& call = builder.call();

  std::string declined;
  for (size_t i = 0; i < route->candidates.size(); ++i) {
    const auto& cand = route->candidates[i];
    call.op_index = cand.op_index;
    std::string msg;
    openreg_status st = invoke_supports(*cand.engine, call, &msg);
    if (st == OPENREG_STATUS_OK) st = invoke_run(*cand.engine, call, &msg);
    if (st == OPENREG_STATUS_UNSUPPORTED) {
      declined += "; " + cand.engine->name + " declined: " + msg;
      if (verbosity() >= 1) log_line(plan.name + ": " + cand.engine->name + " declined (" + msg + ")");
      continue;
    }
    if (st != OPENREG_STATUS_OK) engine_failed(*cand.engine, plan.name, *route, msg);
    route->calls[i].fetch_add(1, std::memory_order_relaxed);
    if (verbosity() >= 2) log_line(plan.name + " -> " + cand.engine->name);
    torch::jit::drop(*stack, n);
    if (dynamic) {
      for (size_t r = 0; r < builder.dynamic_outputs().size(); ++r) {
        const auto& t = builder.dynamic_outputs()[r];
        TORCH_CHECK(t.defined(), "openreg: engine '", cand.engine->name, "' ran ", plan.name,
                    " but did not allocate output ", r, " through alloc_output");
        stack->emplace_back(t);
      }
    } else {
      for (auto& r : returns) stack->push_back(std::move(r));
    }
    return;
  }
  TORCH_CHECK(false, router().uncovered_message(*route), declined);
}

}  // namespace

std::unordered_map<std::string, uint64_t> host_path_stats() {
  std::unordered_map<std::string, uint64_t> out;
  std::shared_lock<std::shared_mutex> lock(g_plans_mutex);
  for (const auto& kv : g_plans) {
    uint64_t n = kv.second->host_calls.load(std::memory_order_relaxed);
    if (n) out[kv.second->name] = n;
  }
  return out;
}

void reset_host_path_stats() {
  std::shared_lock<std::shared_mutex> lock(g_plans_mutex);
  for (auto& kv : g_plans) kv.second->host_calls = 0;
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&router_fallback>());
}

namespace {

// A composite kernel beats a backend fallback in the dispatcher. Two kinds would
// keep ops from reaching engines as themselves, so the router is registered for
// them directly:
//  - structured ops whose functional/in-place forms have a
//    CompositeExplicitAutogradNonFunctional wrapper (add.Tensor would become
//    empty + add.out): engines see aten::add.Tensor, one call instead of two;
//  - ops whose composite kernel sends unknown backends to *_overrideable stubs
//    that only raise (convolution, convolution_backward).
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
      bool overrideable = name.name == "aten::convolution" || name.name == "aten::convolution_backward";
      if (!structured && !overrideable) continue;
      if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      std::string full = name.name.substr(6);
      if (!name.overload_name.empty()) full += "." + name.overload_name;
      lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&router_fallback>());
    }
  }
} g_register_direct_routes;

}  // namespace

}  // namespace openreg
