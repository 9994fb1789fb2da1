// torch.distributed on openreg tensors: a c10d op's CPU kernel (gloo) run on CPU
// aliases of the device tensors (device memory is host memory: no copy).
//
// The aliases are made here, in C++, and never reach Python. A tensor with a Python
// object gives that object a reference while C++ holds the tensor, so the thread that
// drops such a tensor takes the GIL (torch 2.13: TensorImpl::decref_pyobject). gloo's
// threads drop a collective's aliases, often last; made here, an alias has no Python
// object and they free it without the GIL. (The device tensors the kernel was called
// with do have Python objects, as CPU tensors made in Python do when torch hands them
// to gloo: releasing those still takes the GIL on gloo's thread, as on CPU.)
#include "c10d_on_aliases.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <string>
#include <unordered_map>
#include <utility>

namespace openreg_python {

namespace {

// The device tensor of each alias made for one call (by the alias's TensorImpl).
using DeviceOfAlias = std::unordered_map<const c10::TensorImpl*, at::Tensor>;

// A CPU tensor over a device tensor's bytes, same geometry, no copy. Unlike core's
// per-call aliases it owns a reference to the device storage, so the memory stays
// allocated while gloo still holds the alias, even after the caller dropped the device
// tensor.
at::Tensor owning_cpu_alias(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "openreg: a collective needs strided tensors, got layout ", t.layout());
  c10::Storage keep = t.storage();
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), [keep](void*) {}, at::TensorOptions().dtype(t.dtype()).device(at::kCPU));
}

// Maps every tensor, in a tensor, a tensor list or a list of them, through `f`.
template <typename F>
c10::IValue map_tensors(const c10::IValue& v, const F& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    c10::impl::GenericList out(in.elementType());
    for (const c10::IValue& e : in) out.push_back(map_tensors(e, f));
    return out;
  }
  return v;
}

c10::IValue to_aliases(const c10::IValue& v, DeviceOfAlias& devices) {
  return map_tensors(v, [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    at::Tensor alias = owning_cpu_alias(t);
    devices.emplace(alias.unsafeGetTensorImpl(), t);
    return alias;
  });
}

c10::IValue to_devices(const c10::IValue& v, const DeviceOfAlias& devices) {
  return map_tensors(v, [&](const at::Tensor& t) -> at::Tensor {
    auto it = t.defined() ? devices.find(t.unsafeGetTensorImpl()) : devices.end();
    return it == devices.end() ? t : it->second;
  });
}

// gloo's Work for a collective on aliases, seen from the device: wait() is gloo's (it
// raises gloo's error, as on CPU tensors) and the future gives the device tensors
// (DDP's reducer reads its reduced bucket from it).
class DeviceWork : public c10d::Work {
 public:
  DeviceWork(c10::intrusive_ptr<c10d::Work> inner, c10::intrusive_ptr<c10::ivalue::Future> future)
      : inner_(std::move(inner)), future_(std::move(future)) {}
  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  std::vector<at::Tensor> result() override { return future_->value().toTensorVector(); }
  void synchronize() override { inner_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout) override {
    bool done = inner_->wait(timeout);
    future_->waitAndThrow();  // the mapping callback has run
    return done;
  }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Works without a future (gloo's send and recv) come back as they are: their results
// are not read.
c10::intrusive_ptr<c10d::Work> device_work(const c10::intrusive_ptr<c10d::Work>& work, DeviceOfAlias devices) {
  c10::intrusive_ptr<c10::ivalue::Future> inner;
  try {
    inner = work->getFuture();
  } catch (const c10::Error&) {
    return work;
  }
  auto mapped = inner->then(
      [devices = std::move(devices)](c10::ivalue::Future& f) -> c10::IValue {
        if (f.hasError()) std::rethrow_exception(f.exception_ptr());
        return to_devices(f.value(), devices);
      },
      inner->elementType());
  return c10::make_intrusive<DeviceWork>(work, mapped);
}

py::object call_on_cpu_aliases(const std::string& name, const py::args& args, const py::kwargs& kwargs) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(("c10d::" + name).c_str(), "");
  torch::jit::Stack stack = torch::jit::createStackForSchema(op.schema(), args, kwargs, std::nullopt);
  DeviceOfAlias devices;
  for (c10::IValue& v : stack) v = to_aliases(v, devices);
  {
    py::gil_scoped_release no_gil;  // gloo's kernel may wait (a barrier); it never needs the GIL
    op.callBoxed(&stack);           // CPU tensors now: the op's CPU kernel, gloo
  }
  for (c10::IValue& v : stack) {
    if (v.isCustomClass()) {
      auto work = v.toCustomClass<c10d::Work>();
      v = c10::IValue(device_work(work, devices));
    } else {
      v = to_devices(v, devices);
    }
  }
  return torch::jit::createPyObjectForStack(std::move(stack));
}

}  // namespace

void bind_c10d_on_aliases(py::module& m) {
  m.def("_call_on_cpu_aliases", &call_on_cpu_aliases,
        "c10d op `name` (e.g. 'allreduce_') on CPU aliases of the openreg tensors among its arguments; "
        "the results and the work's future give the device tensors");
}

}  // namespace openreg_python
