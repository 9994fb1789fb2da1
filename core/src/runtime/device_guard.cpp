// The device guard: which openreg device and stream are current on this thread,
// and the stream and event operations c10 and torch.accelerator reach through it.
#include "runtime.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace openreg {

namespace {

thread_local c10::DeviceIndex t_current_device = 0;

// ---- device guard
struct OpenRegGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kDevice, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDevice, "openreg guard got a ", d.type(), " device");
    set_device(d.index() < 0 ? current_device() : d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) set_current_device_unchecked(d.index());
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  // Work runs synchronously on the calling thread, so events and streams are
  // always complete.
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

}  // namespace

c10::DeviceIndex current_device() { return t_current_device; }
void set_current_device_unchecked(c10::DeviceIndex index) { t_current_device = index; }

}  // namespace openreg
