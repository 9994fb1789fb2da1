#pragma once

// Keeps the execution queue's worker off the CPU of the host thread that enqueues.
//
// After a pause (the host slept in time.sleep, the worker went to sleep with no task),
// Linux woke the worker on the host's own CPU and kept the two there, one running while
// the other waited, with the other CPU idle: a BERT inference step at one torch thread
// took 4.6 ms against 3.6 stepping without pauses, the enqueueing no longer overlapping
// the kernels (docs/design.md, "Two threads on two cores"). So while the worker runs its
// kernels on one thread, it may run on every CPU the process may use but the one the
// enqueueing host thread was last seen on: the host thread checks its CPU as it enqueues
// (a few nanoseconds) and, when that CPU changed, sets the worker's CPU mask (a system
// call, only then). Nothing happens with one usable CPU, nor while the worker's kernels
// run several threads (threads of its OpenMP team inherit its mask when they start).
// OPENREG_WORKER_PLACEMENT=off leaves the worker to the system.

#include <atomic>
#include <mutex>

#include <sched.h>
#include <sys/types.h>

namespace openreg {

class WorkerPlacement {
 public:
  // On the worker thread, when it starts: remembers it and the CPUs it may use.
  void worker_started();
  // On the worker thread, before each batch of tasks: whether its kernels run one
  // thread now. While they run several, the worker may use every CPU again.
  void worker_threads(int intra_op_threads);
  // On a host thread that enqueues: keeps the worker off this thread's CPU.
  void host_enqueues();

 private:
  void set_worker_mask(int exclude_cpu);  // under mutex_; -1: every usable CPU

  std::mutex mutex_;
  pid_t worker_tid_ = 0;
  cpu_set_t usable_{};
  std::atomic<bool> active_{false};  // the worker runs one thread and has another CPU
  bool can_spread_ = false;          // usable_ holds two CPUs or more
  std::atomic<int> host_cpu_{-1};  // the host CPU the worker's mask was last set for
};

}  // namespace openreg
