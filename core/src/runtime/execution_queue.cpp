#include "execution_queue.h"

#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <vector>

namespace openreg {

namespace {

// How long an idle worker, or a caller waiting for a task, spins before it sleeps:
// ops arrive every few microseconds, and a futex wake costs as much as a small op.
constexpr auto kSpin = std::chrono::microseconds(50);
// At most this many tasks wait in the queue; an enqueue beyond it blocks until the
// worker catches up (as CUDA's launch queue does), which bounds the memory that
// host-freed blocks, still owed to queued work, can hold.
constexpr size_t kMaxQueued = 4096;

// Releasing intra-op threads (set_release_threads). libgomp lets a team's threads wait
// for the team's next parallel region by spinning (~300,000 iterations) only while the
// process holds no more team threads than CPUs; beyond that they spin ~100 iterations
// and sleep, and every region pays wake-ups. The worker's team and a team the Python
// thread kept from its own torch CPU ops push a 2-CPU machine over: a 262K-element
// multiply at 2 threads went from 25 to 73-87 us once the Python thread had run one
// CPU op. So each side lets its team go when it turns to the device or away from it:
// - a host thread that enqueues or waits after kHostAway without doing either (it was
//   doing something else, maybe CPU ops). Not on every call: a thread that alternates
//   its own parallel regions with device ops (torch.compile's generated kernels) would
//   start a new team for each region, which made a compiled training step 2.5-4x slower;
// - the worker, once it has had no task for kIdleRelease, before it sleeps.
// A new team costs tens of microseconds.
constexpr auto kHostAway = std::chrono::milliseconds(2);
constexpr auto kIdleRelease = std::chrono::milliseconds(5);

// When this host thread last enqueued or waited (steady clock).
thread_local std::chrono::steady_clock::time_point t_last_queue_use{};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string describe_origin(const TaskOrigin& o) {
  std::string s = o.what;
  if (o.file) s += " (enqueued at " + *o.file + ":" + std::to_string(o.line) + ")";
  return s;
}

}  // namespace

ExecutionQueue::ExecutionQueue() = default;

ExecutionQueue::~ExecutionQueue() { stop(); }

void ExecutionQueue::set_worker_init(std::function<void()> init) {
  std::lock_guard<std::mutex> lock(mutex_);
  worker_init_ = std::move(init);
}

void ExecutionQueue::set_release_threads(void (*release)()) { release_threads_.store(release); }

void ExecutionQueue::host_uses_queue() {
  auto release = release_threads_.load(std::memory_order_relaxed);
  if (!release) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - t_last_queue_use >= kHostAway) release();
  t_last_queue_use = now;
}

uint64_t ExecutionQueue::push(Task task) {
  task.seq = next_seq_++;
  DeviceState& d = devices_[task.device];
  d.last_seq = task.seq;
  d.streams[task.stream].last_seq = task.seq;
  const uint64_t seq = task.seq;
  tasks_.push_back(std::move(task));
  // While stop() runs, the stopping worker drains what is pushed (stop() starts a new
  // one for anything pushed after it left): one worker at a time keeps the order.
  if (!worker_.joinable() && !stopping_) start_worker();
  return seq;
}

void ExecutionQueue::start_worker() {
  worker_ = std::thread([this] { worker_loop(); });
  worker_id_.store(worker_.get_id());
}

uint64_t ExecutionQueue::enqueue(int device, int64_t stream, Work work, TaskOrigin origin) {
  return enqueue_task(Task{0, device, stream, std::move(work), RawWork{}, origin, nullptr});
}

uint64_t ExecutionQueue::enqueue(int device, int64_t stream, RawWork work, TaskOrigin origin) {
  return enqueue_task(Task{0, device, stream, nullptr, work, origin, nullptr});
}

uint64_t ExecutionQueue::enqueue_task(Task task) {
  host_uses_queue();
  placement_.host_enqueues();
  if (tasks_size_.load(std::memory_order_relaxed) >= kMaxQueued) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = next_seq_ - kMaxQueued / 2;
    lock.unlock();
    wait_for(target);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t seq = push(std::move(task));
  tasks_size_.store(tasks_.size(), std::memory_order_relaxed);
  const bool wake = worker_sleeping_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return seq;
}

void ExecutionQueue::record(const std::shared_ptr<QueueMarker>& marker, int device, int64_t stream) {
  host_uses_queue();
  std::unique_lock<std::mutex> lock(mutex_);
  marker->device = device;
  marker->stream = stream;
  marker->seq = push(Task{0, device, stream, nullptr, RawWork{}, TaskOrigin{"event record"}, marker});
  tasks_size_.store(tasks_.size(), std::memory_order_relaxed);
  const bool wake = worker_sleeping_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

void ExecutionQueue::worker_loop() {
  placement_.worker_started();
  std::vector<Task> batch;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (tasks_.empty()) {
      if (stopping_) break;
      // Spin a little before sleeping: the next op is usually a few microseconds away.
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + kSpin;
      while (tasks_size_.load(std::memory_order_relaxed) == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      lock.lock();
      bool released = false;
      while (tasks_.empty() && !stopping_) {
        worker_sleeping_ = true;
        auto release = release_threads_.load(std::memory_order_relaxed);
        if (released || !release) {
          work_cv_.wait(lock);
        } else if (work_cv_.wait_for(lock, kIdleRelease) == std::cv_status::timeout && tasks_.empty()) {
          lock.unlock();
          {
            std::lock_guard<std::timed_mutex> running(task_mutex_);  // as a task: fork waits for it
            release();
          }
          lock.lock();
          released = true;
        }
        worker_sleeping_ = false;
      }
      continue;
    }
    for (auto& t : tasks_) batch.push_back(std::move(t));
    tasks_.clear();
    tasks_size_.store(0, std::memory_order_relaxed);
    std::function<void()> init = worker_init_;
    lock.unlock();
    if (init) init();
    for (size_t i = 0; i < batch.size();) {
      const size_t run = interleaved_run(batch, i);
      std::lock_guard<std::timed_mutex> running(task_mutex_);
      if (run >= 2) {
        run_interleaved(&batch[i], run);
        i += run;
      } else {
        run_task(batch[i]);
        ++i;
      }
    }
    batch.clear();
    lock.lock();
  }
}

bool ExecutionQueue::skipped(const Task& task) {
  if (!any_failed_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return devices_[task.device].streams[task.stream].failed;
}

void ExecutionQueue::fail(const Task& task, const std::string& error, int kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = devices_[task.device];
  d.streams[task.stream].failed = true;
  any_failed_.store(true, std::memory_order_release);
  if (d.error.empty()) {
    d.error_kind = kind;
    d.error = "openreg: asynchronous error in " + describe_origin(task.origin) + ": " + error +
              "\nErrors of queued device work are reported at the next synchronisation point; later work of "
              "the same stream was not run. Set OPENREG_LAUNCH_BLOCKING=1 to raise errors where the op is "
              "called.";
  }
}

void ExecutionQueue::run_task(Task& task) {
  if (task.marker) {
    task.marker->time_ns = now_ns();
  } else if (!skipped(task)) {
    try {
      if (task.raw.run) task.raw.run(task.raw.ctx);
      else task.work();
    } catch (const TaskError& e) {
      fail(task, e.what(), e.kind);
    } catch (const std::exception& e) {
      fail(task, e.what(), 0);
    } catch (...) {
      fail(task, "unknown exception", 0);
    }
  }
  finish(task);
}

size_t ExecutionQueue::interleaved_run(std::vector<Task>& batch, size_t first) {
  const SliceableWork* head = batch[first].raw.sliceable;
  if (!head || interleave_group_elements() == 0) return 0;
  const int device = batch[first].device;
  const int64_t stream = batch[first].stream;
  auto joins = [&](const Task& t) {  // same stream: an error stops the rest of the run's stream
    return t.raw.sliceable && !t.marker && t.device == device && t.stream == stream &&
           t.raw.sliceable->numel == head->numel;
  };
  size_t end = first + 1;
  for (;;) {
    while (end < batch.size() && joins(batch[end])) ++end;
    if (end < batch.size()) break;
    // The run reaches the batch's end: tasks enqueued since may continue it (the host
    // is usually still enqueuing an optimizer's ops when the worker reaches the first).
    std::lock_guard<std::mutex> lock(mutex_);
    if (tasks_.empty()) break;
    for (auto& t : tasks_) batch.push_back(std::move(t));
    tasks_.clear();
    tasks_size_.store(0, std::memory_order_relaxed);
  }
  if (end - first < 2) return 0;
  std::vector<TensorSpan> spans;
  for (size_t i = first; i < end; ++i) {
    const auto& own = batch[i].raw.sliceable->spans;
    spans.insert(spans.end(), own.begin(), own.end());
  }
  return spans_meet_elementwise(spans) ? end - first : 0;
}

// Each group of slices through every task, in enqueue order. A task that fails marks
// its stream failed; the run stops there (the tasks after it, whose earlier slices ran,
// count as done: later work of the stream is skipped as after any error).
void ExecutionQueue::run_interleaved(Task* tasks, size_t count) {
  bool any_skipped = false;
  for (size_t i = 0; i < count; ++i) any_skipped = any_skipped || skipped(tasks[i]);
  if (any_skipped) {
    for (size_t i = 0; i < count; ++i) run_task(tasks[i]);
    return;
  }
  const auto groups = slice_groups(tasks[0].raw.sliceable->numel, interleave_group_elements());
  bool failed = false;
  for (const auto& group : groups) {
    for (size_t i = 0; i < count && !failed; ++i) {
      const Task& t = tasks[i];
      try {
        t.raw.sliceable->run_slices(t.raw.ctx, group.data(), group.size());
      } catch (const TaskError& e) {
        fail(t, e.what(), e.kind);
        failed = true;
      } catch (const std::exception& e) {
        fail(t, e.what(), 0);
        failed = true;
      } catch (...) {
        fail(t, "unknown exception", 0);
        failed = true;
      }
    }
    if (failed) break;
  }
  for (size_t i = 0; i < count; ++i) finish(tasks[i]);
}

void ExecutionQueue::finish(Task& task) {
  // Release what the task holds before it counts as done.
  if (task.raw.drop) task.raw.drop(task.raw.ctx);
  task.raw = RawWork{};
  task.work = nullptr;
  task.marker.reset();
  completed_.store(task.seq, std::memory_order_seq_cst);
  // Wake sleeping waiters only once the earliest task one of them waits for ran: a
  // notify per task (a futex call each, and a waiter woken for nothing) slowed the
  // worker by a fifth on small ops while the host waited in .item().
  if (task.seq >= wake_at_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_at_.store(kNobody, std::memory_order_seq_cst);
    done_cv_.notify_all();
  }
}

void ExecutionQueue::wait_for(uint64_t seq) {
  if (done(seq) || on_worker_thread()) return;  // the worker itself: all before it ran
  host_uses_queue();
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!done(seq) && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  if (done(seq)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!done(seq)) {
    // Ask to be woken at `seq` (the earliest target of all waiters wins; the others
    // ask again when woken), then look once more before sleeping: the worker either
    // sees the request or has already stored a completion this check sees.
    uint64_t at = wake_at_.load(std::memory_order_seq_cst);
    while (seq < at && !wake_at_.compare_exchange_weak(at, seq, std::memory_order_seq_cst)) {
    }
    if (done(seq)) break;
    done_cv_.wait(lock);
  }
}

void ExecutionQueue::wait(uint64_t seq) { wait_for(seq); }

bool ExecutionQueue::query_stream(int device, int64_t stream) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto d = devices_.find(device);
  if (d == devices_.end()) return true;
  auto s = d->second.streams.find(stream);
  return s == d->second.streams.end() || done(s->second.last_seq);
}

void ExecutionQueue::throw_error_locked(int device) {
  for (auto& [index, d] : devices_) {
    if ((device >= 0 && index != device) || d.error.empty()) continue;
    std::string message = std::move(d.error);
    d.error.clear();
    const int kind = d.error_kind;
    for (auto& [id, s] : d.streams) s.failed = false;
    bool any = false;
    for (auto& [i, other] : devices_) any = any || !other.error.empty();
    any_failed_.store(any, std::memory_order_release);
    throw AsyncError(message, kind);
  }
}

void ExecutionQueue::synchronize_stream(int device, int64_t stream) {
  uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto d = devices_.find(device);
    if (d != devices_.end()) {
      auto s = d->second.streams.find(stream);
      if (s != d->second.streams.end()) target = s->second.last_seq;
    }
  }
  wait_for(target);
  rethrow_pending(device);
}

void ExecutionQueue::synchronize_device(int device) {
  uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto d = devices_.find(device);
    if (d != devices_.end()) target = d->second.last_seq;
  }
  wait_for(target);
  rethrow_pending(device);
}

void ExecutionQueue::wait_all() {
  uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    target = next_seq_ - 1;
  }
  wait_for(target);
}

void ExecutionQueue::synchronize_all() {
  wait_all();
  rethrow_pending(-1);
}

void ExecutionQueue::rethrow_pending(int device) {
  if (!any_failed_.load(std::memory_order_acquire) || on_worker_thread()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  throw_error_locked(device);
}

void ExecutionQueue::stop() {
  std::thread worker;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_.joinable() || on_worker_thread()) return;
    stopping_ = true;
    worker = std::move(worker_);
  }
  work_cv_.notify_one();
  worker.join();
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
  worker_id_.store(std::thread::id());
  if (!tasks_.empty()) start_worker();  // pushed after the old worker's last look
}

void ExecutionQueue::forget_worker_after_fork() {
  // The child has no worker thread: its handle is moved to an object never
  // destroyed, so nothing joins it (this queue itself is abandoned, see below).
  new std::thread(std::move(worker_));
}

bool ExecutionQueue::hold_for_fork(int timeout_ms) {
  return task_mutex_.try_lock_for(std::chrono::milliseconds(timeout_ms));
}

void ExecutionQueue::resume_after_fork() { task_mutex_.unlock(); }

namespace {

std::atomic<ExecutionQueue*> g_queue{nullptr};
std::mutex g_queue_mutex;
bool g_held_for_fork = false;  // only the forking thread touches it

void stop_at_exit() {
  if (ExecutionQueue* q = g_queue.load()) q->stop();
}

// A task never needs the GIL, which the forking thread may hold, so the wait ends with
// the running task; the bound is a safety net, not an expected path.
void hold_before_fork() {
  ExecutionQueue* q = g_queue.load();
  g_held_for_fork = q && q->hold_for_fork(5000);
}

void resume_in_parent() {
  if (ExecutionQueue* q = g_queue.load(); q && g_held_for_fork) q->resume_after_fork();
  g_held_for_fork = false;
}

void forget_after_fork() {
  // The parent's queue is abandoned (leaked): its locks may be held by a thread that
  // does not exist here. The child starts with no queue; it may make a new one.
  if (ExecutionQueue* q = g_queue.exchange(nullptr)) q->forget_worker_after_fork();
  new (&g_queue_mutex) std::mutex();
}

}  // namespace

ExecutionQueue& execution_queue() {
  if (ExecutionQueue* q = g_queue.load(std::memory_order_acquire)) return *q;
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  if (ExecutionQueue* q = g_queue.load()) return *q;
  static const bool registered = [] {
    std::atexit(stop_at_exit);
    pthread_atfork(hold_before_fork, resume_in_parent, forget_after_fork);
    return true;
  }();
  (void)registered;
  auto* q = new ExecutionQueue();  // never destroyed: stopped at exit, abandoned in a forked child
  g_queue.store(q, std::memory_order_release);
  return *q;
}

}  // namespace openreg
