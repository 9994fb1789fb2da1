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
  c10::Stream getStream(c10::Device d) const override { return current_stream(index_of(d)); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDevice, index_of(d)));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return new_stream(index_of(d)); }
  c10::Stream getNewStream(c10::Device d, int) const override { return new_stream(index_of(d)); }
  c10::Stream exchangeStream(c10::Stream s) const override { return exchange_stream(s); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    return device_capability(index_of(d));
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "openreg: event device index ",
                int(device_index), " does not match recording stream's device index ", int(stream.device_index()),
                ": an event belongs to the device it was first recorded on");
    event_record(event, stream, flag);
  }
  // Every stream feeds the one ordered queue (execution_queue.h), so work enqueued
  // after the wait runs after the event's point anyway.
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override { return event_query(event); }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override { event_destroy(event); }
  bool queryStream(const c10::Stream& stream) const override { return query_stream(stream); }
  void synchronizeStream(const c10::Stream& stream) const override { synchronize_stream(stream); }
  void synchronizeEvent(void* event) const override { event_synchronize(event); }
  void synchronizeDevice(const c10::DeviceIndex index) const override { synchronize_device(index); }
  // A block the host frees is only reused by work enqueued later, which the single
  // ordered queue runs after every use already queued: nothing to record.
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    return event_elapsed_ms(start, end);
  }

 private:
  static c10::DeviceIndex index_of(c10::Device d) { return d.index() < 0 ? current_device() : d.index(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

}  // namespace

c10::DeviceIndex current_device() { return t_current_device; }
void set_current_device_unchecked(c10::DeviceIndex index) { t_current_device = index; }

}  // namespace openreg
