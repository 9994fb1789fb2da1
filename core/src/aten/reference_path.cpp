#include "reference_path.h"

#include "../runtime/runtime.h"
#include "boxed_args.h"
#include "../bridge/torch_abi.h"
#include "cpu_alias.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>

namespace openreg {

namespace {

// A result that points into an argument's memory is a view of it: rebuilt on that
// argument's storage (its dtype may differ, as for view(dtype)). Others are copied.
at::Tensor adopt(const at::Tensor& r, c10::ArrayRef<c10::IValue> originals, c10::Device device) {
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
      return at::empty({0}, base.options().dtype(r.dtype())).set_(base.storage(), offset, r.sizes(), r.strides());
    }
  }
  return r.to(device);
}

}  // namespace

void run_on_reference_path(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device) {
  synchronize_device(device.index());  // the host reads and writes device memory below
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> originals(stack->end() - n, stack->end());
  torch::jit::Stack cpu;
  cpu.reserve(n);
  for (const auto& a : originals) {
    if (a.isGenerator()) {
      uint64_t seed, offset;
      next_random_stream(a.toGenerator(), device.index(), &seed, &offset);
      cpu.emplace_back(at::make_generator<at::CPUGeneratorImpl>(bridge::mix_random_stream(seed, offset)));
    } else if (a.isDevice()) {
      cpu.emplace_back(c10::Device(c10::kCPU));
    } else {
      cpu.push_back(map_tensors(a, cpu_alias));
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu);
  torch::jit::drop(*stack, n);
  for (auto& r : cpu) stack->push_back(map_tensors(r, [&](const at::Tensor& t) { return adopt(t, originals, device); }));
}

}  // namespace openreg
