// torch.distributed on openreg tensors: the PrivateUse1 kernel of every c10d op. It runs
// the op's CPU kernel (gloo) on CPU aliases of the device tensors (device memory is host
// memory: no copy), after openreg.distributed's checks and the device's queue.
//
// The kernel is C++ so that the tensors of a collective never reach Python. In torch
// 2.13 a tensor that has a Python object gives that object a reference while C++ holds
// the tensor, and the thread that drops such a tensor takes the GIL
// (TensorImpl::decref_pyobject). gloo's threads drop a collective's tensors, often last,
// and a Python kernel gives every tensor it is called with a Python object, DDP's
// buckets included; a thread that asks for the GIL of a finalising interpreter aborts
// the process. Made and passed here, the aliases and the device tensors DDP hands over
// have no Python object, and gloo's threads free them as they free CPU buckets. Python
// sees the op's arguments with each device tensor as a meta tensor of its shape and
// dtype: enough for the checks.
#include "c10d_on_aliases.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

// openreg.distributed._before_collective(name, args): checks the process group and
// starts the ranks' agreement check; returns a function that waits for its answer, or
// None. Set once, never released (it must outlive every collective).
PyObject* g_before_collective = nullptr;

// Raises the Python error set on this thread as torch's python_error, kept so that it
// reaches Python intact from any thread (DDP calls collectives from autograd's).
[[noreturn]] void throw_python_error() {
  python_error e;  // torch/csrc/Exceptions.h (global namespace)
  e.persist();
  throw std::move(e);
}

void device_collective(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  const auto args = stack->end() - static_cast<std::ptrdiff_t>(n);
  std::set<c10::DeviceIndex> indices;
  {
    py::gil_scoped_acquire gil;
    py::tuple seen(n);
    for (size_t i = 0; i < n; ++i) {
      seen[i] = torch::jit::toPyObject(map_tensors(args[i], [&](const at::Tensor& t) -> at::Tensor {
        if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
        indices.insert(t.device().index());
        return at::empty(t.sizes(), t.options().device(c10::kMeta));
      }));
    }
    py::str name(schema.operator_name().name.substr(std::string("c10d::").size()));
    PyObject* wait = PyObject_CallFunctionObjArgs(g_before_collective, name.ptr(), seen.ptr(), nullptr);
    if (!wait) throw_python_error();
    py::object wait_for_agreement = py::reinterpret_steal<py::object>(wait);
    // Ordered after the work queued before it: the host waits for the queue (and an
    // earlier op's asynchronous error is raised here), while the ranks compare.
    {
      py::gil_scoped_release no_gil;
      const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
      for (c10::DeviceIndex index : indices) guard->synchronizeDevice(index);
    }
    if (!wait_for_agreement.is_none() && !PyObject_CallNoArgs(wait_for_agreement.ptr())) throw_python_error();
  }
  DeviceOfAlias devices;
  for (auto it = args; it != stack->end(); ++it) *it = to_aliases(*it, devices);
  op.callBoxed(stack);  // CPU tensors now: the op's CPU kernel, gloo
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(schema.returns().size()); it != stack->end(); ++it) {
    *it = it->isCustomClass() ? c10::IValue(device_work(it->toCustomClass<c10d::Work>(), devices))
                              : to_devices(*it, devices);
  }
}

// Swallows the dispatcher's one warning per op that its PrivateUse1 kernel is replaced:
// replacing torch's (which hands device tensors to gloo, which refuses them) is the point.
struct Quiet : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

void register_kernels(const std::vector<std::string>& names, py::object before_collective) {
  TORCH_CHECK(g_before_collective == nullptr, "openreg: the c10d kernels are registered already");
  g_before_collective = before_collective.release().ptr();
  static auto* library =
      new torch::Library(torch::Library::IMPL, "c10d", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  Quiet quiet;
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  for (const std::string& name : names) {
    library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&device_collective>());
  }
}

}  // namespace

void bind_c10d_on_aliases(py::module& m) {
  m.def("_register_c10d_kernels", &register_kernels,
        "registers the PrivateUse1 kernel of the c10d ops `names`; before_collective(name, args) is "
        "openreg.distributed's check");
}

}  // namespace openreg_python
