// The device's face to torch.profiler (profiler.cpp; docs/design.md, "Profiler").
//
// Ops run on the execution queue's worker, behind the thread that called them, so an
// op's event on the calling thread only times its enqueueing. Where the work runs, each
// engine call is a RecordFunction scope named "openreg::<engine>::<op>": on the worker,
// under the profiler state its caller had when it enqueued the op (captured only while a
// profiler records on that thread: one thread-local read otherwise).
#pragma once

#include <ATen/record_function.h>
#include <c10/core/Device.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <functional>
#include <memory>
#include <optional>
#include <string_view>

namespace openreg::profiling {

// Whether a profiler records on this thread: one thread-local read.
inline bool active() {
  return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr;
}

// What the worker needs to record into the caller's profile: the profiler's state and
// its thread-local callbacks. The state is held weakly: a task that runs after the
// caller's profiler stopped (and released it) records nothing, rather than into a
// profile being collected.
struct Capture {
  std::weak_ptr<c10::ThreadLocalDebugInfo> debug_info;
  at::RecordFunctionTLS callbacks;
};

// The calling thread's profiler, or null when none records (the usual case).
inline std::unique_ptr<Capture> capture() {
  if (!active()) return nullptr;
  return std::unique_ptr<Capture>(new Capture{c10::ThreadLocalDebugInfo::current(), at::get_record_function_tls_()});
}

// On the worker, for one task: records into the profile `capture` came from (nothing
// when null or when that profiler has stopped), and restores the worker's state after.
class WorkerScope {
 public:
  explicit WorkerScope(const Capture* capture);
  ~WorkerScope();
  WorkerScope(const WorkerScope&) = delete;
  WorkerScope& operator=(const WorkerScope&) = delete;

 private:
  std::optional<c10::DebugInfoGuard> debug_info_;
  std::optional<at::RecordFunctionTLS> saved_callbacks_;
};

// One engine call as an event "openreg::<engine>::<op>", timed where it runs; nothing
// (one thread-local read) when no profiler records on this thread.
class KernelScope {
 public:
  KernelScope(std::string_view engine, std::string_view op) {
    if (active()) begin(engine, op);
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  void begin(std::string_view engine, std::string_view op);
  std::optional<at::RecordFunction> record_;
};

// Host work on the queue (copies): `work` recorded as "openreg::host::<what>" where it
// runs, into the calling thread's profile. Call only when active().
std::function<void()> traced_work(std::function<void()> work, const char* what);

// A device allocation (bytes > 0) or free (bytes < 0) for profile_memory=True: reported
// with the device's totals after it, when a memory profiler records on this thread.
void report_memory(void* ptr, int64_t bytes, c10::Device device);

}  // namespace openreg::profiling
