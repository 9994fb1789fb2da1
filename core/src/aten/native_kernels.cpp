// Metadata ops and copies: native PrivateUse1 kernels that never reach an engine.
// Device memory is host memory, so copies are CPU copies on aliases of it.
#include "../runtime/backend_meta.h"
#include "../runtime/runtime.h"
#include "cpu_alias.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <torch/library.h>

namespace openreg {

namespace {

c10::DeviceIndex target_index(std::optional<c10::Device> device) {
  c10::DeviceIndex idx = device && device->has_index() ? device->index() : current_device();
  check_device_index(idx);
  return idx;
}

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "openreg: only strided tensors are supported, got layout ",
              *layout);
  c10::DeviceGuard guard(c10::Device(kDevice, target_index(device)));
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool>) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "openreg: only strided tensors are supported, got layout ",
              *layout);
  c10::DeviceGuard guard(c10::Device(kDevice, target_index(device)));
  return at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// Makes sure `self`'s storage holds its current geometry, growing it if needed.
void ensure_storage(const at::Tensor& self) {
  if (self.numel() == 0) return;
  size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                 self.storage_offset());
  if (need > self.storage().nbytes()) resize_storage_bytes(self.storage(), need);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  if (memory_format && *memory_format != at::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                        c10::SymIntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kDevice, "openreg: set_() needs an openreg storage, got one on ",
              source.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset.expect_int());
  if (stride.empty()) {
    impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  } else {
    impl->set_sizes_and_strides(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
  }
  ensure_storage(self);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  c10::SymInt sizes[] = {c10::SymInt(n)};
  return set_storage(self, std::move(source), 0, sizes, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.sym_storage_offset(), src.sym_sizes(), src.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  at::Storage storage(at::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  c10::SymInt sizes[] = {c10::SymInt(0)};
  return set_storage(self, std::move(storage), 0, sizes, {});
}

// Copies run on the execution queue where CUDA's do: device to device, and host to
// device, always ordered after the work queued before them. The host waits only
// where CUDA's copies make it wait: for device-to-host copies (unless non_blocking
// into pinned memory). A pageable host source is staged first, so the caller may
// reuse it at once, as with cudaMemcpy.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // self is the source. Either side may be CPU; cpu_alias keeps CPU tensors as they are.
  copy_backend_meta(self, dst);  // clone, .to("openreg:1"), copy_ carry the tags
  if (dst.numel() == 0) return dst;
  check_not_in_bad_fork();
  const bool to_device = dst.device().type() == kDevice;
  const bool from_device = self.device().type() == kDevice;
  const c10::DeviceIndex dev = to_device ? dst.device().index() : self.device().index();
  at::Tensor to = cpu_alias(dst), from = cpu_alias(self);
  if (run_inline()) {
    to.copy_(from);
    return dst;
  }
  if (!to_device && !(non_blocking && is_pinned_ptr(dst.data_ptr()))) {
    synchronize_device(dev);
    to.copy_(from);
    return dst;
  }
  // The task holds fresh aliases of CPU operands, never the caller's tensors: a tensor
  // whose Python object died is released with the GIL, which the worker must not need.
  if (!from_device) from = non_blocking && is_pinned_ptr(self.data_ptr()) ? from.alias() : from.clone();
  if (!to_device) to = to.alias();
  enqueue_work(dev, [to, from]() mutable {
    // The worker has none of the caller's thread-local modes; these are plain CPU
    // aliases, and inference tensors among them may only be written in InferenceMode.
    c10::InferenceMode inference;
    try {
      to.copy_(from);
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  }, "copy_");
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, false);
}

// Tensor.record_stream: CUDA's allocator must not reuse the block until work queued on
// `s` is done. Here a freed block is only handed out to work enqueued later, which the
// one ordered queue runs after `s`'s (execution_queue.h): nothing to record.
void record_stream(at::Tensor& self, c10::Stream s) {
  TORCH_CHECK(s.device_type() == kDevice, "openreg: record_stream expects a stream of the openreg device, got one of ",
              s.device_type());
  check_device_index(s.device_index());
  (void)self;
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  synchronize_device(self.device().index());  // .item(): the host reads the value
  return at::_local_scalar_dense(cpu_alias(self));
}

// Whether `self.data = from` may swap from's storage and geometry into self's
// TensorImpl (nn.Module._apply relies on it to keep a Parameter, and so tied
// parameters, the same object across .to(device)). c10 allows it between dense
// CPU and CUDA tensors and leaves PrivateUse1 to the backend: here dense CPU and
// openreg tensors are compatible with each other, as CPU and CUDA are.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_cpu_or_device = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.is_quantized() &&
           (t.device().type() == kDevice || t.device().type() == c10::DeviceType::CPU);
  };
  if (dense_cpu_or_device(self) && dense_cpu_or_device(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace openreg
