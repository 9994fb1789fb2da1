// The router: one boxed fallback for every aten op that reaches PrivateUse1
// without a native kernel. It sizes outputs with PyTorch's Meta kernels, allocates
// them on the device, and asks the engines of the chain in order.
#include "../runtime/runtime.h"
#include "call_builder.h"
#include "boxed_args.h"
#include "host_alias.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <mutex>
#include <shared_mutex>

namespace openreg {

namespace {

// The outputs one Meta call produced: per schema return, either the mutable
// argument it aliases (with the sizes the Meta kernel resized it to), None, a
// tensor, or a list of tensors.
struct OutputMeta {
  c10::SmallVector<int64_t, 6> sizes, strides;
  at::ScalarType dtype = at::ScalarType::Undefined;
};
struct ReturnMeta {
  enum Kind { kAlias, kNone, kUndefined, kTensor, kList } kind = kNone;
  std::vector<OutputMeta> tensors;  // one for kAlias/kTensor, any number for kList
};
struct MetaResult {
  bool dynamic = false;  // no Meta kernel, or the shape depends on the data
  std::vector<ReturnMeta> returns;
};

// What we learn once per operator from its schema.
struct OpPlan {
  std::string name;              // "aten::add.Tensor"
  std::vector<int> return_alias; // per return: the mutable argument it aliases, or -1
  bool host_only = false;        // returns something engines cannot produce
  std::string host_reason;
  std::atomic<uint64_t> host_calls{0};
  // Router decisions by dtype slot (see route_slot), filled on first use.
  std::array<std::atomic<Route*>, 36> routes{};
  // Per argument: a Scalar (number) argument, whose value cannot change the
  // outputs' metadata, only its type can (except for arange/range).
  std::vector<bool> number_arg;
  // Sized by the kernel, never by Meta (see kKernelSizedOps).
  bool kernel_sized = false;
  // Meta results by argument signature (see meta_key): the Meta kernels of many
  // ops are Python (torch._refs), 50-150 us a call; a training loop repeats the
  // same signatures every step.
  std::mutex meta_mutex;
  std::unordered_map<std::string, std::shared_ptr<const MetaResult>> meta_cache;
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

// Ops whose CPU kernel (the reference, whose backward the device also runs) shapes
// some outputs differently from the Meta kernel, so the kernel sizes them, and may
// leave an optional output undefined:
//  - CPU's _embedding_bag leaves offset2bag empty on its sum-mode fast path (its
//    backward then rebuilds it) and sizes bag_size by the number of bags, where Meta
//    sizes both as CUDA does; a Meta-sized, zero-filled offset2bag sent every
//    gradient to bag 0;
//  - _native_multi_head_attention returns no attention weights (None) when they are
//    not asked for; Meta returns an empty tensor, which nn.MultiheadAttention would
//    hand to the user.
constexpr const char* kKernelSizedOps[] = {"aten::_embedding_bag", "aten::_embedding_bag_forward_only",
                                           "aten::_native_multi_head_attention"};

std::unique_ptr<OpPlan> make_plan(const c10::FunctionSchema& schema) {
  auto plan = std::make_unique<OpPlan>();
  plan->name = schema.name();
  if (!schema.overload_name().empty()) plan->name += "." + schema.overload_name();
  for (const char* op : kKernelSizedOps) plan->kernel_sized = plan->kernel_sized || plan->name == op;
  const auto& args = schema.arguments();
  bool value_shaped = schema.name() == "aten::arange" || schema.name() == "aten::range";
  for (const auto& a : args) {
    auto type = a.real_type();
    if (auto opt = type->castRaw<c10::OptionalType>()) type = opt->getElementType();
    plan->number_arg.push_back(!value_shaped && type->kind() == c10::TypeKind::NumberType);
  }
  for (size_t ri = 0; ri < schema.returns().size(); ++ri) {
    const auto& r = schema.returns()[ri];
    int alias = written_argument(schema, ri);
    const auto* info = r.alias_info();
    if (info && !info->isWrite()) {
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

// The signature the Meta kernel sees: everything about the arguments that can
// change the outputs' metadata. Device tensors reach the Meta kernel as fresh
// empty_strided Meta tensors (dtype, sizes, strides); other tensors as they are,
// so a 0-dim one adds its value (unless it is a wrapped Python number, whose
// value only its dtype matters for), and a larger one makes the call uncacheable.
// Returns false when the call cannot be cached.
class KeyWriter {
 public:
  explicit KeyWriter(std::string* out) : out_(out) {}
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_->append(b, sizeof(T));
  }
  void put_ints(c10::IntArrayRef v) {
    put<int64_t>(static_cast<int64_t>(v.size()));
    out_->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }

 private:
  std::string* out_;
};

bool key_tensor(KeyWriter& w, const at::Tensor& t) {
  if (!t.defined()) {
    w.put<char>('u');
    return true;
  }
  if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return false;
  w.put<char>('t');
  w.put<int8_t>(static_cast<int8_t>(t.scalar_type()));
  if (t.device().type() == kDevice) {
    w.put<char>('d');
    w.put_ints(t.sizes());
    w.put_ints(t.strides());
    return true;
  }
  if (t.dim() != 0) return false;
  w.put<int8_t>(static_cast<int8_t>(t.device().type()));
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    w.put<char>('w');
    return true;
  }
  if (t.device().type() != c10::DeviceType::CPU) return false;
  w.put<char>('v');
  uint64_t bits = 0;
  std::memcpy(&bits, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof(bits)));
  w.put(bits);
  return true;
}

bool meta_key(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, std::string* key) {
  key->clear();
  KeyWriter w(key);
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    if (v.isNone()) {
      w.put<char>('N');
    } else if (v.isTensor()) {
      if (!key_tensor(w, v.toTensor())) return false;
    } else if (plan.number_arg[i] && (v.isInt() || v.isDouble() || v.isBool() || v.isComplexDouble())) {
      w.put<char>(v.isInt() ? 'I' : v.isDouble() ? 'F' : v.isBool() ? 'B' : 'C');
    } else if (v.isInt()) {
      w.put<char>('i');
      w.put(v.toInt());
    } else if (v.isDouble()) {
      w.put<char>('f');
      w.put(v.toDouble());
    } else if (v.isBool()) {
      w.put<char>('b');
      w.put(v.toBool());
    } else if (v.isComplexDouble()) {
      w.put<char>('c');
      w.put(v.toComplexDouble());
    } else if (v.isString()) {
      w.put<char>('s');
      const auto& str = v.toStringRef();
      w.put<int64_t>(static_cast<int64_t>(str.size()));
      key->append(str);
    } else if (v.isGenerator()) {
      w.put<char>('g');
    } else if (v.isDevice()) {
      w.put<char>('D');
    } else if (v.isIntList()) {
      w.put<char>('l');
      w.put_ints(v.toIntList().vec());
    } else if (v.isDoubleList()) {
      w.put<char>('L');
      for (double d : v.toDoubleList()) w.put(d);
      w.put<char>(';');
    } else if (v.isBoolList()) {
      w.put<char>('m');
      for (bool b : v.toBoolList()) w.put(b);
      w.put<char>(';');
    } else if (v.isList()) {
      // Tensor lists, optional-tensor lists and SymInt lists.
      w.put<char>('[');
      for (const auto& item : v.toListRef()) {
        if (item.isNone()) {
          w.put<char>('N');
        } else if (item.isTensor()) {
          if (!key_tensor(w, item.toTensor())) return false;
        } else if (item.isInt()) {
          w.put<char>('i');
          w.put(item.toInt());
        } else {
          return false;
        }
      }
      w.put<char>(']');
    } else {
      return false;
    }
  }
  return true;
}

OutputMeta describe_meta(const at::Tensor& m) {
  OutputMeta o;
  o.sizes.assign(m.sizes().begin(), m.sizes().end());
  o.strides.assign(m.strides().begin(), m.strides().end());
  o.dtype = m.scalar_type();
  return o;
}

// Runs the Meta kernel on Meta twins of the device tensors. Throws when the op
// has no Meta kernel or its shapes depend on the data.
std::shared_ptr<const MetaResult> run_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                           const OpPlan& plan) {
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
  auto result = std::make_shared<MetaResult>();
  for (size_t r = 0; r < plan.return_alias.size(); ++r) {
    const c10::IValue& m = meta[r];
    ReturnMeta rm;
    if (plan.return_alias[r] >= 0) {
      rm.kind = ReturnMeta::kAlias;
      rm.tensors.push_back(describe_meta(m.toTensor()));
    } else if (m.isTensor()) {
      rm.kind = m.toTensor().defined() ? ReturnMeta::kTensor : ReturnMeta::kUndefined;
      if (m.toTensor().defined()) rm.tensors.push_back(describe_meta(m.toTensor()));
    } else if (m.isNone()) {
      rm.kind = ReturnMeta::kNone;
    } else {
      rm.kind = ReturnMeta::kList;
      for (const auto& item : m.toTensorList()) rm.tensors.push_back(describe_meta(item));
    }
    result->returns.push_back(std::move(rm));
  }
  return result;
}

// Allocates the outputs a Meta result describes on the device (resizing out=
// arguments as the Meta kernel did). Returns (per schema return) the output
// tensors, flattened into *flat.
void materialize(const MetaResult& m, c10::ArrayRef<c10::IValue> args, const OpPlan& plan, c10::Device device,
                 std::vector<c10::IValue>* returns, std::vector<at::Tensor>* flat) {
  auto alloc = [&](const OutputMeta& o) {
    return at::empty_strided(o.sizes, o.strides, at::TensorOptions().dtype(o.dtype).device(device));
  };
  for (size_t r = 0; r < m.returns.size(); ++r) {
    const ReturnMeta& rm = m.returns[r];
    switch (rm.kind) {
      case ReturnMeta::kAlias: {
        const at::Tensor& real = args[plan.return_alias[r]].toTensor();
        c10::IntArrayRef sizes(rm.tensors[0].sizes);
        if (real.sizes() != sizes) real.resize_(sizes);
        returns->push_back(args[plan.return_alias[r]]);
        flat->push_back(real);
        break;
      }
      case ReturnMeta::kTensor: {
        auto t = alloc(rm.tensors[0]);
        returns->emplace_back(t);
        flat->push_back(t);
        break;
      }
      case ReturnMeta::kNone:
        returns->emplace_back();
        flat->emplace_back();
        break;
      case ReturnMeta::kUndefined:  // a Tensor return left out (output_mask)
        returns->emplace_back(at::Tensor());
        flat->emplace_back();
        break;
      case ReturnMeta::kList: {
        c10::List<at::Tensor> list;
        for (const auto& o : rm.tensors) {
          auto t = alloc(o);
          list.push_back(t);
          flat->push_back(t);
        }
        returns->emplace_back(list);
        break;
      }
    }
  }
}

// The Meta result for this call: from the plan's cache, or by running the Meta
// kernel (and remembering the answer, including "dynamic").
std::shared_ptr<const MetaResult> meta_for(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                           OpPlan& plan) {
  if (plan.kernel_sized) {
    static const auto kDynamic = [] {
      auto d = std::make_shared<MetaResult>();
      d->dynamic = true;
      return d;
    }();
    return kDynamic;
  }
  thread_local std::string key;
  bool cacheable = meta_key(plan, args, &key);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(plan.meta_mutex);
    auto it = plan.meta_cache.find(key);
    if (it != plan.meta_cache.end()) return it->second;
  }
  // A copy: the Meta kernel may run other ops, and the thread's key buffer with them.
  const std::string miss_key = cacheable ? key : std::string();
  std::shared_ptr<const MetaResult> result;
  try {
    result = run_meta(op, args, plan);
  } catch (const std::exception&) {
    auto d = std::make_shared<MetaResult>();
    d->dynamic = true;
    result = d;
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(plan.meta_mutex);
    if (plan.meta_cache.size() >= 4096) plan.meta_cache.clear();  // a bound, not an LRU
    plan.meta_cache.emplace(miss_key, result);
  }
  return result;
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
  auto meta = meta_for(op, args, plan);
  const bool dynamic = meta->dynamic;
  if (!dynamic) {
    materialize(*meta, args, plan, device, &returns, &outputs);
  } else {
    // No Meta kernel, or the shape depends on the data: the engine sizes outputs.
    for (int a : plan.return_alias) {
      TORCH_CHECK(a < 0, "openreg: cannot size the outputs of ", plan.name,
                  " (its Meta kernel failed) and it writes to an out= argument");
    }
  }

  CallBuilder builder(schema, plan.name, args, dev);
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
        TORCH_CHECK(t.defined() || plan.kernel_sized, "openreg: engine '", cand.engine->name, "' ran ", plan.name,
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

// Nested-tensor ops, which run on the host path too (nested_host.cpp).
std::unordered_map<std::string, uint64_t> nested_host_stats();
void reset_nested_host_stats();

std::unordered_map<std::string, uint64_t> host_path_stats() {
  std::unordered_map<std::string, uint64_t> out = nested_host_stats();
  std::shared_lock<std::shared_mutex> lock(g_plans_mutex);
  for (const auto& kv : g_plans) {
    uint64_t n = kv.second->host_calls.load(std::memory_order_relaxed);
    if (n) out[kv.second->name] += n;
  }
  return out;
}

void reset_host_path_stats() {
  reset_nested_host_stats();
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
//    that only raise (convolution, convolution_backward);
//  - native_layer_norm, whose CompositeExplicitAutograd kernel would split it
//    into native_batch_norm + addcmul, so engines never saw a layer norm.
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
                          name.name == "aten::native_layer_norm";
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
