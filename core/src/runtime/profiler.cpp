// torch.profiler on the openreg device: engine calls as events where they run (see
// profiler.h), device memory in the memory profile, and PyTorch's PrivateUse1
// profiler stubs, whose events are markers on the device's queue.
#include "profiler.h"

#include "runtime.h"

#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <mutex>
#include <string_view>
#include <unordered_set>

namespace openreg::profiling {

namespace {

// Event names live as long as the process: RecordFunction keeps a view of its name.
std::string_view interned_name(std::string_view engine, std::string_view op) {
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();
  std::string name = "openreg::";
  name.append(engine).append("::").append(op);
  std::lock_guard<std::mutex> lock(mutex);
  return *names->insert(std::move(name)).first;
}

}  // namespace

WorkerScope::WorkerScope(const Capture* capture) {
  if (!capture) return;
  std::shared_ptr<c10::ThreadLocalDebugInfo> info = capture->debug_info.lock();
  if (!info) return;
  debug_info_.emplace(std::move(info));
  saved_callbacks_.emplace(at::get_record_function_tls_());
  at::set_record_function_tls_(capture->callbacks);
}

WorkerScope::~WorkerScope() {
  if (saved_callbacks_) at::set_record_function_tls_(*saved_callbacks_);
}

void KernelScope::begin(std::string_view engine, std::string_view op) {
  auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
  if (!callbacks) return;
  record_.emplace(std::move(*callbacks));
  record_->before(interned_name(engine, op), c10::ArrayRef<const c10::IValue>{});
}

std::function<void()> traced_work(std::function<void()> work, const char* what) {
  std::shared_ptr<Capture> profiler = capture();
  return [profiler = std::move(profiler), work = std::move(work), what] {
    WorkerScope scope(profiler.get());
    KernelScope event("host", what);
    work();
  };
}

void report_memory(void* ptr, int64_t bytes, c10::Device device) {
  if (!c10::memoryProfilingEnabled()) return;
  const MemoryStats s = memory_stats(device.index());
  c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<size_t>(s.allocated), static_cast<size_t>(s.reserved),
                                   device);
}

namespace {

// PyTorch's PrivateUse1 profiler stubs. Without them the profiler's device mode
// (use_device="openreg" with use_kineto=False) raised "PrivateUse1 used in profiler but not
// enabled" in every op's callback and reported garbage times. An event is a marker on the
// current stream, stamped when the worker reaches it, so an op's device time is the
// worker's time between its two markers (as CUDA events time the GPU, not the host).
// The worker's own events (the kernels, above) get none: their time is already the
// device's, counted once in the op that enqueued them.
struct Stubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex dev = current_device();
    if (device) *device = dev;
    if (cpu_ns) *cpu_ns = c10::getTime();
    if (execution_queue().on_worker_thread()) return;
    void* e = nullptr;
    event_record(&e, current_stream(dev), c10::EventFlag::BACKEND_DEFAULT);
    *event = std::shared_ptr<void>(e, [](void* p) { event_destroy(p); });
  }
  // In microseconds, as CUDA's stub answers.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    if (!a || !*a || !b || !*b) return 0.f;
    return static_cast<float>(event_elapsed_ms(a->get(), b->get()) * 1000.0);
  }
  // No annotation ranges on this device (CUDA's are NVTX's).
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(c10::Device(kDevice, current_device()));
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      guard.set_index(i);
      op(i);
    }
  }
  void synchronize() const override { wait_for_queue(); }
};

struct RegisterStubs {
  RegisterStubs() {
    static Stubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} g_register_stubs;

}  // namespace

}  // namespace openreg::profiling
