// Streams and events of the openreg devices, on the execution queue: which stream
// is current on each thread, where device work is enqueued, and how the host waits.
#include "runtime.h"

#include "profiler.h"

#include "../aten/engine_error.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>

namespace openreg {

namespace {

constexpr int kMaxDevices = 64;  // OPENREG_DEVICE_COUNT's limit
thread_local c10::StreamId t_current_stream[kMaxDevices] = {};
std::atomic<c10::StreamId> g_next_stream{1};  // 0 is every device's default stream

std::atomic<CallerLocationFn> g_caller_location{nullptr};

bool read_launch_blocking() {
  const char* env = std::getenv("OPENREG_LAUNCH_BLOCKING");
  return env && *env && std::strcmp(env, "0") != 0;
}

ExecutionQueue& queue() {
  // Not cached in a static reference: a forked child gets a new queue.
  ExecutionQueue& q = execution_queue();
  static std::atomic<ExecutionQueue*> prepared{nullptr};
  if (prepared.load(std::memory_order_acquire) != &q) {
    // The worker runs kernels with ATen's intra-op pool: keep its thread count the one
    // torch.set_num_threads set last (a new thread starts from the default).
    q.set_worker_init([&q] {
      at::init_num_threads();
      q.set_worker_threads(at::get_num_threads());
    });
    q.set_release_threads(release_idle_intra_op_threads);
    prepared.store(&q, std::memory_order_release);
  }
  return q;
}

// Async errors become c10 errors for Python: of their engine status's class, if any.
template <class F>
void rethrowing(F&& f) {
  try {
    f();
  } catch (const AsyncError& e) {
    raise_for_status(static_cast<openreg_status>(e.kind), e.what());
  }
}

struct EventState {
  std::mutex mutex;
  std::shared_ptr<QueueMarker> marker;  // the last record; null before the first
  bool timing = false;
};

std::shared_ptr<QueueMarker> marker_of(void* event) {
  if (!event) return nullptr;
  auto* e = static_cast<EventState*>(event);
  std::lock_guard<std::mutex> lock(e->mutex);
  return e->marker;
}

}  // namespace

bool launch_blocking() {
  static const bool blocking = read_launch_blocking();
  return blocking;
}

void set_caller_location_hook(CallerLocationFn fn) { g_caller_location.store(fn); }

// ---- streams

c10::Stream current_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, device), t_current_stream[device]);
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  const c10::DeviceIndex device = stream.device_index() < 0 ? current_device() : stream.device_index();
  c10::Stream old = current_stream(device);
  t_current_stream[device] = stream.id();
  return old;
}

c10::Stream new_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, device), g_next_stream.fetch_add(1));
}

bool run_inline() { return launch_blocking() || execution_queue().on_worker_thread(); }

void enqueue_work(c10::DeviceIndex device, std::function<void()> work, const char* what) {
  if (run_inline()) {
    rethrowing([&] { queue().rethrow_pending(device); });
    profiling::KernelScope event("host", what);
    work();
    return;
  }
  if (profiling::active()) work = profiling::traced_work(std::move(work), what);
  TaskOrigin origin{what};
  if (CallerLocationFn fn = g_caller_location.load(std::memory_order_relaxed)) fn(&origin.file, &origin.line);
  queue().enqueue(device, t_current_stream[device], std::move(work), origin);
}

void enqueue_raw(c10::DeviceIndex device, RawWork work, const char* what) {
  if (run_inline()) {
    struct Drop {
      RawWork& w;
      ~Drop() { w.drop(w.ctx); }
    } drop{work};
    rethrowing([&] { queue().rethrow_pending(device); });
    work.run(work.ctx);
    return;
  }
  TaskOrigin origin{what};
  if (CallerLocationFn fn = g_caller_location.load(std::memory_order_relaxed)) fn(&origin.file, &origin.line);
  queue().enqueue(device, t_current_stream[device], work, origin);
}

void run_on_worker(c10::DeviceIndex device, const std::function<void()>& work, const char* what) {
  if (run_inline()) {
    work();
    return;
  }
  const at::ThreadLocalState state;
  std::exception_ptr error;
  std::optional<TaskError> engine_error;  // raised here as its status's class, as inline
  const c10::StreamId stream = t_current_stream[device];
  queue().enqueue(
      device, stream,
      [&] {
        at::ThreadLocalStateGuard guard(state);
        try {
          work();
        } catch (const TaskError& e) {
          engine_error.emplace(e);
        } catch (...) {
          error = std::current_exception();
        }
      },
      TaskOrigin{what});
  rethrowing([&] { queue().synchronize_stream(device, stream); });
  if (error) std::rethrow_exception(error);
  if (engine_error) raise_for_status(static_cast<openreg_status>(engine_error->kind), engine_error->what());
}

bool query_stream(const c10::Stream& stream) { return queue().query_stream(stream.device_index(), stream.id()); }

void synchronize_stream(const c10::Stream& stream) {
  rethrowing([&] { queue().synchronize_stream(stream.device_index(), stream.id()); });
}

void synchronize_device(c10::DeviceIndex device) {
  rethrowing([&] { queue().synchronize_device(device); });
}

void synchronize_all_devices() {
  rethrowing([&] { queue().synchronize_all(); });
}

void wait_for_queue() { queue().wait_all(); }

// ---- events

void event_record(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  if (!*event) {
    auto* e = new EventState();
    e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    *event = e;
  }
  auto* e = static_cast<EventState*>(*event);
  auto marker = std::make_shared<QueueMarker>();
  if (run_inline()) {
    marker->device = stream.device_index();
    marker->stream = stream.id();
    marker->time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  } else {
    queue().record(marker, stream.device_index(), stream.id());
  }
  std::lock_guard<std::mutex> lock(e->mutex);
  e->marker = std::move(marker);
}

bool event_query(void* event) {
  auto m = marker_of(event);
  return !m || queue().done(m->seq);
}

void event_synchronize(void* event) {
  auto m = marker_of(event);
  if (!m) return;
  queue().wait(m->seq);
  rethrowing([&] { queue().rethrow_pending(m->device); });
}

void event_destroy(void* event) { delete static_cast<EventState*>(event); }

double event_elapsed_ms(void* start, void* end) {
  for (void* e : {start, end}) {
    TORCH_CHECK(e && static_cast<EventState*>(e)->timing,
                "openreg: elapsed_time needs two events created with enable_timing=True");
  }
  auto a = marker_of(start), b = marker_of(end);
  TORCH_CHECK(a && b, "openreg: elapsed_time needs both events recorded (event.record()) first");
  queue().wait(a->seq);
  queue().wait(b->seq);
  return static_cast<double>(b->time_ns - a->time_ns) / 1e6;
}

}  // namespace openreg
