// The openreg device runtime: devices, allocator, generators, engines. Internal to
// libopenreg_core and the Python glue; engines never see it.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "../engine/engine_host.h"

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
bool is_initialized();
std::string builtin_engine_dir();
// Engine files in the search dirs, without making the registry (which reads
// OPENREG_ENGINE): `import openreg` uses it.
std::vector<EngineFile> discover_engines();
// A tuned table for the `auto` chain, applied when the registry is made, if
// OPENREG_ENGINE is `auto` and OPENREG_ROUTES is not `off` by then.
void set_pending_tuned_routes(TunedRoutes tuned);

// ---- memory (allocator.cpp)
c10::Allocator* device_allocator();
void empty_cache();  // frees the device memory the allocator keeps for reuse
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);
struct MemoryStats {
  int64_t allocated = 0, allocated_peak = 0, reserved = 0, reserved_peak = 0;
  int64_t num_allocs = 0, num_frees = 0;
};
MemoryStats memory_stats(c10::DeviceIndex index);
void reset_peak_memory_stats(c10::DeviceIndex index);
void reset_accumulated_memory_stats(c10::DeviceIndex index);
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
