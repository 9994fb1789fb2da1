// Devices, PrivateUse1 hooks, lazy engine initialisation and fork safety.
#include "runtime.h"

#include <ATen/Parallel.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <optional>

namespace openreg {

namespace {

c10::DeviceIndex read_device_count() {
  const char* env = std::getenv("OPENREG_DEVICE_COUNT");
  if (!env || !*env) return 2;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 64) {
    // Not fatal: import must never fail because of the environment.
    TORCH_WARN("openreg: OPENREG_DEVICE_COUNT='", env,
               "' is not a number from 1 to 64; using 2 devices");
    return 2;
  }
  return static_cast<c10::DeviceIndex>(n);
}

// ---- host services backed by ATen's intra-op pool
void aten_parallel_for(void*, int64_t begin, int64_t end, int64_t grain, openreg_parallel_fn fn,
                       void* user) {
  if (begin >= end) return;
  at::parallel_for(begin, end, grain < 1 ? 1 : grain,
                   [&](int64_t b, int64_t e) { fn(user, b, e); });
}

int32_t aten_num_threads(void*) { return at::get_num_threads(); }

}  // namespace

// The calling thread's OpenMP team (torch's intra-op threads) is freed: its threads
// exit, and the thread's next parallel region starts a new team. Nothing happens on
// a thread without a team or inside a parallel region. When and why: execution_queue.cpp.
void release_idle_intra_op_threads() { omp_pause_resource_all(omp_pause_soft); }

namespace {

// A tuned routing table handed over by `import openreg`, waiting for the
// registry: OPENREG_ENGINE and OPENREG_ROUTES are read when the registry is
// made (the device's first use), so a script may set them after the import.
std::mutex g_pending_mutex;
std::optional<TunedRoutes> g_pending_routes;

struct EngineState {
  EngineState()
      : registry(Registry::config_from_env(builtin_engine_dir()), make_services()),
        routes(registry) {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    const char* routes_env = std::getenv("OPENREG_ROUTES");
    const bool off = routes_env && std::string(routes_env) == "off";
    if (g_pending_routes && !off) registry.set_tuned_routes(std::move(*g_pending_routes));
    g_pending_routes.reset();
  }
  static openreg_host make_services() {
    openreg_host h = make_host_services();
    h.parallel_for = aten_parallel_for;
    h.get_num_threads = aten_num_threads;
    return h;
  }
  Registry registry;
  RouteTable routes;
};

EngineState& engine_state() {
  // Constructed on first use; Registry::config_from_env may throw for a bad
  // OPENREG_FALLBACK, in which case the next call tries again and throws again.
  static EngineState* state = new EngineState();  // never destroyed: engines live forever
  return *state;
}

std::atomic<bool> g_initialized{false};
// Set in a child forked after the device was initialised. Engines may own threads
// (an OpenMP pool, the execution queue's worker) that fork does not copy, and
// their state in the child is whatever those threads left mid-flight: as with
// CUDA, such a child may not use the device at all, only a fresh process can.
std::atomic<bool> g_in_bad_fork{false};

void mark_forked_child() {
  // Runs in the child, single-threaded. A grandchild inherits the flag as is.
  if (g_initialized.load(std::memory_order_relaxed)) {
    g_in_bad_fork.store(true, std::memory_order_relaxed);
    g_initialized.store(false, std::memory_order_relaxed);
  }
}

struct RegisterForkHandler {
  RegisterForkHandler() { pthread_atfork(nullptr, nullptr, mark_forked_child); }
} g_register_fork_handler;

// ---- PrivateUse1 hooks
struct OpenRegHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return make_generator(index < 0 ? current_device() : index);
  }
  at::Device getDeviceFromPtr(void*) const override {
    // All devices share host memory; the pointer alone does not tell them apart.
    return c10::Device(kDevice, current_device());
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count() && is_initialized();
  }
  void init() const override { lazy_init(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = current_device();
    set_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new OpenRegHooks()); }
} g_register_hooks;

}  // namespace

c10::DeviceIndex device_count() {
  static const c10::DeviceIndex n = read_device_count();
  return n;
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "openreg: invalid device index ", int(index),
                    ": there are ", int(device_count()), " openreg devices (openreg:0 to openreg:",
                    int(device_count()) - 1, "). Set OPENREG_DEVICE_COUNT for more");
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  set_current_device_unchecked(index);
}

void set_pending_tuned_routes(TunedRoutes tuned) {
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  g_pending_routes = std::move(tuned);
}

std::vector<EngineFile> discover_engines() {
  return Registry(Registry::config_from_env(builtin_engine_dir()), make_host_services()).discover();
}

Registry& registry() {
  try {
    return engine_state().registry;
  } catch (const EngineError& e) {
    TORCH_CHECK(false, e.what());
  }
}

RouteTable& route_table() {
  try {
    return engine_state().routes;
  } catch (const EngineError& e) {
    TORCH_CHECK(false, e.what());
  }
}

void lazy_init() {
  if (g_initialized.load(std::memory_order_acquire)) return;
  check_not_in_bad_fork();
  try {
    registry().chain();
  } catch (const EngineError& e) {
    TORCH_CHECK(false, e.what());
  }
  g_initialized.store(true, std::memory_order_release);
}

bool is_initialized() { return g_initialized.load(std::memory_order_acquire); }

bool in_bad_fork() { return g_in_bad_fork.load(std::memory_order_relaxed); }

void check_not_in_bad_fork() {
  // CUDA's words (torch/cuda/__init__.py, _lazy_init), so that code and habits
  // written for CUDA recognise the error.
  TORCH_CHECK(!in_bad_fork(),
              "openreg: Cannot re-initialize openreg in forked subprocess. To use openreg with "
              "multiprocessing, you must use the 'spawn' start method");
}

std::string builtin_engine_dir() {
  // Engines are installed next to libopenreg_core.so.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&builtin_engine_dir), &info) && info.dli_fname) {
    std::string p = info.dli_fname;
    auto slash = p.rfind('/');
    if (slash != std::string::npos) return p.substr(0, slash);
  }
  return ".";
}

}  // namespace openreg
