// Nested tensors (torch.nested, strided layout) on the openreg device.
//
// A nested device tensor is PyTorch's NestedTensorImpl over a device storage, its
// nested sizes, strides and offsets on the CPU, as on CUDA. Engines never see one:
// like the ops the ABI cannot carry, nested ops run on the reference path. One boxed
// fallback for the NestedTensorPrivateUse1 key (and a kernel for the dense ops that
// build nested tensors) maps each nested argument to a nested CPU tensor over the
// same memory and each dense one to a host alias, runs PyTorch's NestedTensorCPU or
// CPU kernel, and maps the results back: a result inside an argument's device
// memory becomes a view of that storage, a new one is copied into a device
// allocation, and metadata the kernel handed back (nested sizes) stays on the CPU.
#include "../runtime/runtime.h"
#include "boxed_args.h"
#include "cpu_alias.h"

#include <ATen/NestedTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>

namespace openreg {

namespace {

using at::native::get_nested_tensor_impl;
using at::native::NestedTensorImpl;

std::string op_name(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  return name;
}

// The storage of a nested or dense tensor (TensorImpl::storage() may refuse for nested).
const c10::Storage& storage_of(const at::Tensor& t) { return t.unsafeGetTensorImpl()->unsafe_storage(); }

// How many elements of `dtype` a storage holds.
int64_t storage_elems(const c10::Storage& s, caffe2::TypeMeta dtype) {
  return static_cast<int64_t>(s.nbytes() / dtype.itemsize());
}

// A nested CPU tensor over the same memory and metadata as a nested device tensor;
// its storage keeps the device storage alive.
at::Tensor nested_to_host(const at::Tensor& t) {
  const auto* nt = get_nested_tensor_impl(t);
  c10::Storage storage = storage_of(t);
  void* data = storage.nbytes() ? storage.mutable_data() : reinterpret_cast<void*>(64);
  at::Tensor buffer = at::from_blob(data, {storage_elems(storage, t.dtype())}, [storage](void*) {},
                                    at::TensorOptions().dtype(t.dtype()).device(at::kCPU));
  return at::detail::make_tensor<NestedTensorImpl>(buffer, nt->get_nested_sizes(), nt->get_nested_strides(),
                                                   nt->get_storage_offsets());
}

// A nested device tensor on `storage` with a nested CPU tensor's metadata, its
// offsets moved by `shift` elements (where its memory starts inside `storage`).
at::Tensor nested_on_storage(const at::Tensor& r, const c10::Storage& storage, int64_t shift) {
  const auto* nt = get_nested_tensor_impl(r);
  const int64_t n = storage_elems(storage, r.dtype());
  at::Tensor buffer = at::empty({0}, at::TensorOptions().dtype(r.dtype()).device(storage.device()));
  buffer.set_(storage, 0, {n}, {1});
  at::Tensor offsets = shift ? at::add(nt->get_storage_offsets(), shift) : nt->get_storage_offsets();
  return at::detail::make_tensor<NestedTensorImpl>(buffer, nt->get_nested_sizes(), nt->get_nested_strides(),
                                                   offsets);
}

// A new nested CPU result, copied into a device allocation.
at::Tensor nested_copy_to_device(const at::Tensor& r, c10::Device device) {
  c10::DeviceGuard guard(device);
  const c10::Storage& src = storage_of(r);
  c10::Storage storage(c10::Storage::use_byte_size_t(), src.nbytes(), device_allocator(), /*resizable=*/true);
  if (src.nbytes()) std::memcpy(storage.mutable_data(), src.data(), src.nbytes());
  return nested_on_storage(r, storage, 0);
}

// Memory that the arguments own, to tell a result that aliases it from a new one.
struct Region {
  const char* lo;
  size_t nbytes;
  c10::Storage device_storage;  // empty for CPU memory
  bool contains(const void* p) const {
    auto* c = static_cast<const char*>(p);
    return c >= lo && c < lo + nbytes;
  }
};

void add_region(std::vector<Region>* regions, const c10::Storage& s, bool device) {
  if (s.nbytes() == 0 || !s.data()) return;
  regions->push_back({static_cast<const char*>(s.data()), s.nbytes(), device ? s : c10::Storage()});
}

// Maps one CPU result back. `target` is where a new result goes: the device, or
// the CPU when the op was asked for CPU results (_to_copy(device="cpu")).
at::Tensor result_to_device(const at::Tensor& r, const std::vector<Region>& regions, c10::Device target) {
  if (!r.defined() || r.device().type() == kDevice) return r;
  const c10::Storage& s = storage_of(r);
  const void* start = s.data();
  for (const auto& region : regions) {
    if (!start || !region.contains(start)) continue;
    if (!region.device_storage) return r;  // CPU metadata or a CPU argument, handed back
    const int64_t shift_bytes = static_cast<const char*>(start) - region.lo;
    const int64_t item = static_cast<int64_t>(r.dtype().itemsize());
    if (r.is_nested()) return nested_on_storage(r, region.device_storage, shift_bytes / item);
    return at::empty({0}, r.options().device(region.device_storage.device()))
        .set_(region.device_storage, shift_bytes / item + r.storage_offset(), r.sizes(), r.strides());
  }
  if (target.type() != kDevice) return r;
  return r.is_nested() ? nested_copy_to_device(r, target) : r.to(target);
}

void run_nested_on_reference_path(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = op_name(schema);
  const size_t n = schema.arguments().size();
  std::vector<c10::IValue> originals(stack->end() - n, stack->end());

  c10::DeviceIndex dev = -1;
  std::optional<c10::Device> asked;  // a Device argument: where new results go
  bool nested = false;
  bool nested_elsewhere = false;  // a nested argument not on the device (CUDA refuses the mix too)
  std::vector<Region> regions;
  for (const auto& a : originals) {
    TORCH_CHECK(!a.isGenerator(), "openreg: ", name,
                " takes a random generator, which nested tensors on the device do not support");
    if (a.isDevice()) asked = a.toDevice();
    for_each_tensor(a, [&](const at::Tensor& t) {
      const bool on_device = t.device().type() == kDevice;
      if (on_device && dev < 0) dev = t.device().index();
      if (t.is_nested()) {
        nested = true;
        nested_elsewhere = nested_elsewhere || !on_device;
        const auto* nt = get_nested_tensor_impl(t);
        for (const auto* meta : {&nt->get_nested_sizes(), &nt->get_nested_strides(), &nt->get_storage_offsets()}) {
          add_region(&regions, storage_of(*meta), false);
        }
      }
      add_region(&regions, storage_of(t), on_device);
    });
  }
  TORCH_CHECK(!nested_elsewhere || dev < 0 || schema.name() == "aten::copy_", "openreg: ", name,
              ": expected all nested tensors on the openreg device, but one is on the CPU");
  if (dev < 0) dev = current_device();
  const c10::Device device(kDevice, dev);
  c10::Device target = device;
  if (asked && asked->type() != kDevice) target = *asked;
  if (asked && asked->type() == kDevice) target = c10::Device(kDevice, asked->has_index() ? asked->index() : dev);
  c10::DeviceGuard guard(device);
  synchronize_device(dev);  // the host reads and writes device memory below

  const auto cpu_key = nested ? c10::DispatchKey::NestedTensorCPU : c10::DispatchKey::CPU;
  TORCH_CHECK(op.hasKernelForDispatchKey(cpu_key), "openreg: ", name,
              " is not supported on nested tensors on the openreg device: nested ops run on PyTorch's ",
              cpu_key, " kernels, and this op has none");

  torch::jit::Stack cpu;
  cpu.reserve(n);
  for (const auto& a : originals) {
    if (a.isDevice()) {
      cpu.emplace_back(c10::Device(c10::kCPU));
      continue;
    }
    cpu.push_back(map_tensors(a, [](const at::Tensor& t) {
      if (t.device().type() != kDevice) return t;
      return t.is_nested() ? nested_to_host(t) : cpu_alias(t);
    }));
  }
  c10::DispatchKeySet keys(c10::DispatchKey::CPU);
  if (nested) keys = keys | c10::DispatchKeySet(c10::DispatchKey::NestedTensorCPU);
  op.redispatchBoxed(keys, &cpu);

  torch::jit::drop(*stack, n);
  for (size_t r = 0; r < cpu.size(); ++r) {
    int written = r < schema.returns().size() ? written_argument(schema, r) : -1;
    if (written >= 0) {
      stack->push_back(originals[written]);
    } else {
      stack->push_back(map_tensors(cpu[r], [&](const at::Tensor& t) {
        return result_to_device(t, regions, target);
      }));
    }
  }
  if (verbosity() >= 2) log_line(name + " -> host reference path (nested tensors)");
  route_table().reference_route(name)->reference_calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_nested_on_reference_path>());
}

// Ops with both a NestedTensorCPU kernel and a CompositeImplicitAutograd one
// (matmul, linear, chunk, narrow): the composite kernel beats a backend fallback
// and would decompose them on sizes() that nested tensors lack, so the reference path
// is registered for them directly (as CUDA builds register their nested kernels).
namespace {

struct RegisterDirectNestedRoutes {
  RegisterDirectNestedRoutes() {
    static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::NestedTensorPrivateUse1, __FILE__,
                              __LINE__);
    auto& d = c10::Dispatcher::singleton();
    for (const auto& name : d.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = d.findOp(name);
      if (!op || !op->hasSchema()) continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU) ||
          !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorPrivateUse1)) {
        continue;
      }
      std::string full = name.name.substr(6);
      if (!name.overload_name.empty()) full += "." + name.overload_name;
      lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_nested_on_reference_path>());
    }
  }
} g_register_direct_nested_routes;

}  // namespace

// Dense ops that build nested tensors (CPU and CUDA kernels only): the router
// would size their outputs as dense tensors.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"_nested_tensor_from_mask", "_nested_from_padded", "_nested_view_from_buffer"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&run_nested_on_reference_path>());
  }
}

}  // namespace openreg
