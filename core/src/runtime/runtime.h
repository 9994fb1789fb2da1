// The openreg device runtime: devices, allocator, generators, engines. Internal to
// libopenreg_core and the Python glue; engines never see it.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "../engine/engine_host.h"
#include "execution_queue.h"

namespace openreg {

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

// ---- devices (device.cpp)
c10::DeviceIndex device_count();  // OPENREG_DEVICE_COUNT, default 2
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);  // range-checked
void set_current_device_unchecked(c10::DeviceIndex index);  // device_guard.cpp
// Throws a clear error unless 0 <= index < device_count().
void check_device_index(c10::DeviceIndex index);

// ---- engines (device.cpp): loaded at lazy init
Registry& registry();
RouteTable& route_table();  // decisions and call counts of the engine chain
void lazy_init();  // loads the engine chain; throws c10::Error with the loader's text
bool is_initialized();  // false in a child forked after initialisation
bool in_bad_fork();  // forked after the device's initialisation: may not use it (as CUDA)
// Throws CUDA's "Cannot re-initialize ... in forked subprocess" error in such a child.
void check_not_in_bad_fork();
std::string builtin_engine_dir();
// Engine files in the search dirs, without making the registry (which reads
// OPENREG_ENGINE): `import openreg` uses it.
std::vector<EngineFile> discover_engines();
// A tuned table for the `auto` chain, applied when the registry is made, if
// OPENREG_ENGINE is `auto` and OPENREG_ROUTES is not `off` by then.
void set_pending_tuned_routes(TunedRoutes tuned);

// ---- streams, events, where device work runs (streams.cpp; the queue: execution_queue.h)
bool launch_blocking();  // OPENREG_LAUNCH_BLOCKING=1: every op runs where it is called
void release_idle_intra_op_threads();  // the calling thread's OpenMP team (device.cpp)
c10::Stream current_stream(c10::DeviceIndex device);  // of this thread
c10::Stream exchange_stream(const c10::Stream& stream);  // makes it current; returns the old one
c10::Stream new_stream(c10::DeviceIndex device);
// Whether work runs on the calling thread now (launch blocking, or already on the worker).
bool run_inline();
// Runs `work` on the current stream of `device`: enqueued, or at once when run_inline().
// `what` (static storage) names it in the error it may raise.
void enqueue_work(c10::DeviceIndex device, std::function<void()> work, const char* what);
void enqueue_raw(c10::DeviceIndex device, RawWork work, const char* what);  // the same, allocation-free
// Runs `work` on the worker after the current stream's queued work, with the calling
// thread's thread-local state (grad mode, inference mode, autocast, profiler), and waits
// for it; what it throws is rethrown here. At once when run_inline().
void run_on_worker(c10::DeviceIndex device, const std::function<void()>& work, const char* what);
bool query_stream(const c10::Stream& stream);
// Wait for queued work, then raise its pending error as a RuntimeError (c10::Error).
void synchronize_stream(const c10::Stream& stream);
void synchronize_device(c10::DeviceIndex device);
void synchronize_all_devices();
// Waits for what is queued, leaving its errors pending: for readers of what the worker
// counts (openreg.stats(), route timings), and for Python's exit, before finalising, so
// that no queued op runs while the interpreter is being torn down.
void wait_for_queue();
// Events: the state behind c10's void* event handles.
void event_record(void** event, const c10::Stream& stream, c10::EventFlag flag);
bool event_query(void* event);
void event_synchronize(void* event);
void event_destroy(void* event);
double event_elapsed_ms(void* start, void* end);
// Where the Python caller is (file interned for the process, line): set by the Python
// module so that asynchronous errors name the line that enqueued the failing op.
using CallerLocationFn = void (*)(const std::string** file, int* line);
void set_caller_location_hook(CallerLocationFn fn);

// ---- properties (device_properties.cpp)
// The dtypes a device tensor can hold and convert between: those of the engine
// ABI (bridge::to_abi_dtype), for torch.accelerator.get_device_capability.
c10::DeviceCapability device_capability(c10::DeviceIndex index);

// ---- memory (allocator.cpp)
c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);
struct MemoryStats {
  int64_t allocated = 0, allocated_peak = 0, reserved = 0, reserved_peak = 0;
  int64_t num_allocs = 0, num_frees = 0;
};
MemoryStats memory_stats(c10::DeviceIndex index);
// Grows or shrinks a storage's allocation, keeping the common prefix.
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

// ---- random numbers (generator.cpp)
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator make_generator(c10::DeviceIndex index);
// Takes the next (seed, offset) of a generator (the device's default one when gen
// is undefined) and advances it; what engines receive as OPENREG_VALUE_GENERATOR.
void next_random_stream(const std::optional<at::Generator>& gen, c10::DeviceIndex index,
                        uint64_t* seed, uint64_t* offset);

}  // namespace openreg
