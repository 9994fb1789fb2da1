#include "worker_placement.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace openreg {

namespace {

// OPENREG_WORKER_PLACEMENT=off: the system alone places the worker.
bool placement_off() {
  const char* env = std::getenv("OPENREG_WORKER_PLACEMENT");
  return env && (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0);
}

}  // namespace

void WorkerPlacement::worker_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  worker_tid_ = static_cast<pid_t>(syscall(SYS_gettid));
  CPU_ZERO(&usable_);
  can_spread_ = sched_getaffinity(0, sizeof(usable_), &usable_) == 0 && CPU_COUNT(&usable_) >= 2 && !placement_off();
  host_cpu_.store(-1, std::memory_order_relaxed);
  active_.store(false, std::memory_order_relaxed);
}

void WorkerPlacement::worker_threads(int intra_op_threads) {
  const bool want = can_spread_ && intra_op_threads == 1;
  if (want == active_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  active_.store(want, std::memory_order_relaxed);
  // Leaving: every usable CPU again, before a team of several threads inherits the mask.
  if (!want && host_cpu_.load(std::memory_order_relaxed) != -1) set_worker_mask(-1);
  host_cpu_.store(-1, std::memory_order_relaxed);
}

void WorkerPlacement::host_enqueues() {
  if (!active_.load(std::memory_order_relaxed)) return;
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu == host_cpu_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_.load(std::memory_order_relaxed)) return;
  // A host CPU the worker may not use anyway leaves its mask as it is.
  if (CPU_ISSET(cpu, &usable_)) set_worker_mask(cpu);
  host_cpu_.store(cpu, std::memory_order_relaxed);
}

void WorkerPlacement::set_worker_mask(int exclude_cpu) {
  cpu_set_t mask = usable_;
  if (exclude_cpu >= 0) CPU_CLR(exclude_cpu, &mask);
  // A failure (a mask the system refuses) leaves the worker where the system puts it,
  // as without placement; host_cpu_ still changes, so it is not retried on every op.
  sched_setaffinity(worker_tid_, sizeof(mask), &mask);
}

}  // namespace openreg
