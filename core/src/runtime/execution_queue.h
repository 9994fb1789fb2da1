// The execution queue: where device work runs, behind the thread that asked for it.
//
// An op is sized and its outputs allocated on the calling thread, then enqueued here
// as a task of its stream; the caller returns at once. One worker thread runs the
// tasks of every stream of every device in the order they were enqueued. That is a
// legal schedule of CUDA's stream semantics (streams may overlap, need not), and on
// a host CPU a second worker would only compete with the intra-op thread team for
// the same cores. It also makes the allocator's reuse safe without stream tracking:
// a block freed by the host is only reused by work enqueued later, which runs after
// every task enqueued before the free (docs/design.md, "Streams and the queue").
//
// Torch-free (unit-tested alone, also under ThreadSanitizer); core/src/runtime/streams.cpp
// connects it to c10's streams and events.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>

#include "interleaved_runs.h"
#include "worker_placement.h"

namespace openreg {

// Where a task was enqueued from: named by the error it may raise later.
struct TaskOrigin {
  const char* what = "";              // "aten::add.Tensor", "copy": static storage
  const std::string* file = nullptr;  // Python caller's file (interned, never freed), or null
  int line = 0;
};

// What a task throws to give its error a kind, kept through to the report (the torch
// side maps it to a Python exception class: an engine's status). Other exceptions: kind 0.
struct TaskError : std::runtime_error {
  TaskError(const std::string& message, int kind) : std::runtime_error(message), kind(kind) {}
  int kind;
};

// An error raised by queued work, reported at the next synchronisation point.
struct AsyncError : std::runtime_error {
  AsyncError(const std::string& message, int kind) : std::runtime_error(message), kind(kind) {}
  int kind;
};

// A recorded point in a stream (the state behind a c10 event).
struct QueueMarker {
  uint64_t seq = 0;  // the marker task's sequence number; 0: never recorded
  int device = -1;
  int64_t stream = 0;
  int64_t time_ns = 0;  // steady clock when the worker reached it; written before `seq` completes
};

// A task as two plain functions over one pointer: what the op path enqueues for every
// op, without std::function's allocation. `run` may throw (as Work); `drop` frees ctx
// and always runs once, after `run` or instead of it when the task is skipped.
// `sliceable`, when set, says the task may also run a slice at a time, interleaved with
// the tasks next to it (interleaved_runs.h).
struct RawWork {
  void (*run)(void* ctx) = nullptr;
  void (*drop)(void* ctx) = nullptr;
  void* ctx = nullptr;
  const SliceableWork* sliceable = nullptr;
};

class ExecutionQueue {
 public:
  // Runs a task; may throw (the message becomes the device's pending error).
  using Work = std::function<void()>;

  ExecutionQueue();
  ~ExecutionQueue();  // drains and joins the worker
  ExecutionQueue(const ExecutionQueue&) = delete;
  ExecutionQueue& operator=(const ExecutionQueue&) = delete;

  // Run on the worker thread before each batch of tasks (torch: its thread count).
  void set_worker_init(std::function<void()> init);
  // Releases the calling thread's intra-op threads (torch: its OpenMP team). Run on a
  // host thread that enqueues or waits after a while without doing either, and on the
  // worker once it has had no task for a while: threads parked in one thread's team
  // cost the other's its spinning (when and why: execution_queue.cpp).
  void set_release_threads(void (*release)());
  // On the worker, before each batch (from the init above): how many threads its kernels
  // run now. At one, it keeps off the CPU of the host thread that enqueues (placement).
  void set_worker_threads(int intra_op_threads) { placement_.worker_threads(intra_op_threads); }

  // Appends a task to `stream` of `device`; returns its sequence number (from 1).
  // While the device has a pending error, tasks of the stream that failed are skipped.
  uint64_t enqueue(int device, int64_t stream, Work work, TaskOrigin origin);
  uint64_t enqueue(int device, int64_t stream, RawWork work, TaskOrigin origin);

  // Enqueues a marker on the stream and makes `marker` describe it.
  void record(const std::shared_ptr<QueueMarker>& marker, int device, int64_t stream);

  bool done(uint64_t seq) const { return completed_.load(std::memory_order_acquire) >= seq; }
  void wait(uint64_t seq);  // blocks until task `seq` ran (or was skipped)

  bool query_stream(int device, int64_t stream) const;  // its last task done?
  // Block until the stream's (device's, every device's) enqueued work ran, then throw the
  // pending error of that device (every device), if any, as an AsyncError.
  void synchronize_stream(int device, int64_t stream);
  void synchronize_device(int device);
  void synchronize_all();
  void wait_all();  // as synchronize_all, leaving errors pending
  // Throws the device's pending error (-1: any device's) without waiting; clears it.
  void rethrow_pending(int device);

  bool on_worker_thread() const { return std::this_thread::get_id() == worker_id_.load(); }
  // Drains the queue and joins the worker; enqueue starts a new one afterwards.
  void stop();
  // In a forked child: the worker thread was not copied. Forget it without joining.
  void forget_worker_after_fork();
  // Around fork(): hold the worker between two tasks, so that the child inherits no lock
  // it held mid-op (torch's dispatcher table among them). Waits at most `timeout_ms`
  // for the running task; true if the worker is held (then resume_after_fork()).
  bool hold_for_fork(int timeout_ms);
  void resume_after_fork();

 private:
  struct Task {
    uint64_t seq;
    int device;
    int64_t stream;
    Work work;
    RawWork raw;
    TaskOrigin origin;
    std::shared_ptr<QueueMarker> marker;  // a marker task when set
  };
  struct StreamState {
    uint64_t last_seq = 0;
    bool failed = false;  // skipping until the device's error is reported
  };
  struct DeviceState {
    uint64_t last_seq = 0;
    std::string error;  // pending, "" when none
    int error_kind = 0;
    std::unordered_map<int64_t, StreamState> streams;
  };

  uint64_t push(Task task);  // under mutex_
  uint64_t enqueue_task(Task task);
  void start_worker();  // under mutex_
  void worker_loop();
  void run_task(Task& task);
  // The tasks of batch[first, ...) that run interleaved with batch[first] (at least
  // two, else 0); may move newly enqueued tasks to the batch's end first.
  size_t interleaved_run(std::vector<Task>& batch, size_t first);
  void run_interleaved(Task* tasks, size_t count);
  bool skipped(const Task& task);
  void fail(const Task& task, const std::string& error, int kind);
  void finish(Task& task);  // releases what the task holds, then counts it done
  void wait_for(uint64_t seq);
  void host_uses_queue();  // on a host thread that enqueues or waits: maybe release
  void throw_error_locked(int device);  // device -1: the first pending

  mutable std::mutex mutex_;
  std::timed_mutex task_mutex_;  // held by the worker while it runs a task
  std::condition_variable work_cv_;  // worker waits for tasks
  std::condition_variable done_cv_;  // callers wait for completion
  std::deque<Task> tasks_;
  std::unordered_map<int, DeviceState> devices_;
  uint64_t next_seq_ = 1;
  std::atomic<uint64_t> completed_{0};
  std::atomic<size_t> tasks_size_{0};   // tasks_.size(), read without the lock
  std::atomic<bool> any_failed_{false};  // some device has a pending error
  static constexpr uint64_t kNobody = UINT64_MAX;
  std::atomic<uint64_t> wake_at_{kNobody};  // the earliest task a sleeping waiter waits for
  bool worker_sleeping_ = false;
  bool stopping_ = false;
  std::thread worker_;
  std::atomic<std::thread::id> worker_id_{};
  std::function<void()> worker_init_;
  std::atomic<void (*)()> release_threads_{nullptr};
  WorkerPlacement placement_;
};

// The process's queue (created on first use, stopped at exit).
ExecutionQueue& execution_queue();

}  // namespace openreg
