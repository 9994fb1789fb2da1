// Crash attribution: a fatal signal during an engine call prints one line naming
// the engine, the op and its inputs, then the process dies as it would have.
//
// Per call the host only publishes a pointer to an EngineCallMark in this thread's
// slot; everything else happens in the handler, which is async-signal-safe: no
// malloc, no stdio, no locks, no thread-locals (a thread that never called an
// engine may not have its TLS block yet), only write(2) from a stack buffer.
#include "engine_host.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace openreg {

// One per thread that has called an engine: the mark of the call it is running.
// A fixed table, so that the handler can look at every thread's call.
struct alignas(64) CallSlot {
  std::atomic<long> tid{0};  // kernel thread id; 0: free
  std::atomic<const EngineCallMark*> current{nullptr};
};

namespace {

constexpr int kSlots = 256;
CallSlot g_slots[kSlots];
CallSlot g_overflow;  // threads beyond kSlots: marked but never reported
thread_local CallSlot* t_slot = nullptr;

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[NSIG];
std::atomic<bool> g_reported{false};

// Large enough for this handler and for the one it chains to (faulthandler).
constexpr size_t kAltStackBytes = 64 * 1024;

long current_tid() { return static_cast<long>(syscall(SYS_gettid)); }

// Gives the slot back and drops the alternate stack when the thread exits.
struct ThreadExit {
  CallSlot* slot = nullptr;
  void* alt_stack = nullptr;
  ~ThreadExit() {
    if (slot && slot != &g_overflow) {
      slot->current.store(nullptr, std::memory_order_relaxed);
      slot->tid.store(0, std::memory_order_release);
    }
    t_slot = &g_overflow;  // engine calls from later thread-exit code: never re-claim
    stack_t cur;
    if (alt_stack && sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == alt_stack && !(cur.ss_flags & SS_ONSTACK)) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
      std::free(alt_stack);
    }
  }
};

// A stack overflow leaves no stack to run the handler on: give each thread that
// calls engines its own signal stack, unless it has one (faulthandler's, ASan's).
void ensure_alt_stack(ThreadExit& exit_hook) {
  stack_t cur;
  if (sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;
  void* mem = std::malloc(kAltStackBytes);
  if (!mem) return;
  stack_t st{};
  st.ss_sp = mem;
  st.ss_size = kAltStackBytes;
  if (sigaltstack(&st, nullptr) == 0) exit_hook.alt_stack = mem;
  else std::free(mem);
}

CallSlot* claim_slot() {
  const long tid = current_tid();
  CallSlot* slot = &g_overflow;
  for (CallSlot& s : g_slots) {
    long expected = 0;
    if (s.tid.load(std::memory_order_relaxed) == 0 && s.tid.compare_exchange_strong(expected, tid)) {
      slot = &s;
      break;
    }
  }
  thread_local ThreadExit exit_hook;
  exit_hook.slot = slot;
  ensure_alt_stack(exit_hook);
  t_slot = slot;
  return slot;
}

// A forked child has one thread, with a new id: forget the parent's other threads.
void after_fork_in_child() {
  const long tid = current_tid();
  for (CallSlot& s : g_slots) {
    if (&s == t_slot) {
      s.tid.store(tid);
    } else {
      s.current.store(nullptr);
      s.tid.store(0);
    }
  }
  g_reported.store(false);
}

void report(int signal, const siginfo_t* info) {
  if (g_reported.exchange(true)) return;  // one line, even when several threads crash
  CrashContext where;
  where.signal = signal;
  where.crash_tid = current_tid();
  where.has_fault_address = info && signal != SIGABRT && info->si_code > 0;  // kernel-raised fault
  where.fault_address = where.has_fault_address ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  char line[2048];
  for (const CallSlot& s : g_slots) {
    if (s.tid.load(std::memory_order_relaxed) != where.crash_tid) continue;
    if (const EngineCallMark* mark = s.current.load(std::memory_order_acquire)) {
      where.call_tid = where.crash_tid;
      ssize_t ignored = write(STDERR_FILENO, line, format_crash_line(line, sizeof line, where, *mark));
      (void)ignored;
      return;
    }
    break;
  }
  // Not in an engine call on this thread: the engine's own workers (its OpenMP
  // team, the host pool running its parallel_for) crash this way. Name the calls
  // running on other threads.
  int shown = 0;
  for (const CallSlot& s : g_slots) {
    const long tid = s.tid.load(std::memory_order_relaxed);
    const EngineCallMark* mark = s.current.load(std::memory_order_acquire);
    if (!tid || tid == where.crash_tid || !mark) continue;
    where.call_tid = tid;
    ssize_t ignored = write(STDERR_FILENO, line, format_crash_line(line, sizeof line, where, *mark));
    (void)ignored;
    if (++shown == 4) break;
  }
}

// Hands the signal on as if this handler were not there: to the handler that was
// installed before (faulthandler prints Python's traceback), else the default
// action, so the process dies with the same signal and status as it would have.
void chain(int signal, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous[signal];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) return prev.sa_sigaction(signal, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    return prev.sa_handler(signal);
  }
  sigaction(signal, &prev, nullptr);
  // Blocked while this handler runs: delivered (and fatal) when it returns. A
  // fault re-executes its instruction and dies the same way.
  if (prev.sa_handler == SIG_DFL) raise(signal);
}

void on_fatal_signal(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  report(signal, info);
  errno = saved_errno;
  chain(signal, info, context);
}

}  // namespace

void install_crash_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
    struct sigaction action{};
    action.sa_sigaction = on_fatal_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (int signal : kSignals) sigaction(signal, &action, &g_previous[signal]);
  });
}

EngineCallMark::EngineCallMark(const Engine& e, const openreg_call* c, Kind k) : engine(&e), call(c), kind(k) {
  CallSlot* slot = t_slot ? t_slot : claim_slot();
  slot_ = slot;
  previous_ = slot->current.load(std::memory_order_relaxed);
  slot->current.store(this, std::memory_order_release);
}

EngineCallMark::~EngineCallMark() { slot_->current.store(previous_, std::memory_order_release); }

}  // namespace openreg
