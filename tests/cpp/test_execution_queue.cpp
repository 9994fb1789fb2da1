// The execution queue (core/src/runtime/execution_queue.h), torch-free, written against
// the header's documented behaviour; also run under ThreadSanitizer (scripts/tsan.sh),
// which checks that what a task wrote is visible after the wait that says it ran.
#include "execution_queue.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace openreg {
namespace {

using namespace std::chrono_literals;

// A gate a task can block on until the test opens it.
class Latch {
 public:
  void open() {
    if (!opened_.exchange(true)) promise_.set_value();
  }
  void wait() const { future_.wait(); }

 private:
  std::atomic<bool> opened_{false};
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

// Runs f on another thread; true if it returned within the limit. Otherwise opens
// `gate` (so nothing stays blocked) before waiting for it, and returns false.
template <class F>
bool finishes_within(F f, std::chrono::seconds limit, Latch& gate) {
  auto fut = std::async(std::launch::async, f);
  bool in_time = fut.wait_for(limit) == std::future_status::ready;
  if (!in_time) gate.open();
  fut.get();
  return in_time;
}

TaskOrigin origin(const char* what = "test") { return TaskOrigin{what, nullptr, 0}; }

TEST(ExecutionQueue, SequenceNumbersStartAtOneAndIncrease) {
  ExecutionQueue q;
  uint64_t a = q.enqueue(0, 0, [] {}, origin());
  uint64_t b = q.enqueue(0, 1, [] {}, origin());
  uint64_t c = q.enqueue(1, 0, [] {}, origin());
  EXPECT_EQ(a, 1u);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  q.synchronize_all();
  EXPECT_TRUE(q.done(c));
}

TEST(ExecutionQueue, TasksOfAStreamRunInOrderOnTheWorker) {
  ExecutionQueue q;
  std::vector<int> order;  // written by the tasks only, read after synchronisation
  std::vector<bool> on_worker;
  for (int i = 0; i < 200; ++i) {
    q.enqueue(0, 0, [&, i] {
      order.push_back(i);
      on_worker.push_back(q.on_worker_thread());
    }, origin());
  }
  q.synchronize_stream(0, 0);
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_TRUE(on_worker[i]);
  }
  EXPECT_FALSE(q.on_worker_thread());
}

TEST(ExecutionQueue, EnqueueReturnsWhileATaskIsBlocked) {
  ExecutionQueue q;
  Latch gate;
  std::atomic<int> ran{0};
  uint64_t blocker = q.enqueue(0, 0, [&] { gate.wait(); }, origin());
  uint64_t last = 0;
  // 1000 tasks: well under the queue's bound (execution_queue.cpp), past which enqueue waits.
  bool returned = finishes_within([&] {
    for (int i = 0; i < 1000; ++i) last = q.enqueue(0, i % 3, [&] { ran++; }, origin());
  }, 20s, gate);
  EXPECT_TRUE(returned) << "enqueue blocked behind a running task";
  EXPECT_FALSE(q.done(blocker));
  EXPECT_FALSE(q.query_stream(0, 0));
  EXPECT_EQ(ran.load(), 0);
  gate.open();
  q.wait(last);
  EXPECT_TRUE(q.done(blocker));
  EXPECT_TRUE(q.query_stream(0, 0));
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ExecutionQueue, ManyProducersKeepEachStreamsOrder) {
  ExecutionQueue q;
  constexpr int kProducers = 4, kPerProducer = 3000, kDevices = 2, kStreams = 3;
  struct Entry {
    int producer, index;
  };
  // One log per stream, appended by that stream's tasks (which the queue serialises).
  std::vector<Entry> logs[kDevices][kStreams];
  std::vector<std::thread> producers;
  std::atomic<bool> seq_increasing{true};
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      uint64_t prev = 0;
      for (int i = 0; i < kPerProducer; ++i) {
        int dev = (p + i) % kDevices, stream = (i / 2) % kStreams;
        auto* log = &logs[dev][stream];
        uint64_t seq = q.enqueue(dev, stream, [log, p, i] { log->push_back({p, i}); }, origin());
        if (seq <= prev) seq_increasing = false;
        prev = seq;
        if (i % 500 == 499) q.synchronize_stream(dev, stream);  // syncs under contention
      }
    });
  }
  for (auto& t : producers) t.join();
  q.synchronize_all();
  EXPECT_TRUE(seq_increasing.load());

  size_t total = 0;
  for (auto& per_device : logs) {
    for (auto& log : per_device) {
      total += log.size();
      int last[kProducers];
      std::fill(last, last + kProducers, -1);
      for (const Entry& e : log) {
        ASSERT_GT(e.index, last[e.producer]) << "producer " << e.producer << "'s tasks ran out of order";
        last[e.producer] = e.index;
      }
    }
  }
  EXPECT_EQ(total, size_t(kProducers) * kPerProducer);
}

TEST(ExecutionQueue, SynchronizeStreamWaitsForThatStreamOnly) {
  ExecutionQueue q;
  std::atomic<int> ran{0};
  for (int i = 0; i < 20; ++i) q.enqueue(0, 1, [&] {
      std::this_thread::sleep_for(1ms);
      ran++;
    }, origin());
  Latch gate;
  std::atomic<bool> later_ran{false};
  q.enqueue(0, 2, [&] { gate.wait(); }, origin());  // stream 2, after stream 1's work
  q.enqueue(0, 2, [&] { later_ran = true; }, origin());
  EXPECT_TRUE(finishes_within([&] { q.synchronize_stream(0, 1); }, 20s, gate))
      << "synchronize_stream waited for another stream's later work";
  EXPECT_EQ(ran.load(), 20);
  EXPECT_TRUE(q.query_stream(0, 1));
  EXPECT_FALSE(q.query_stream(0, 2));
  EXPECT_FALSE(later_ran.load());
  gate.open();
  q.synchronize_stream(0, 2);
  EXPECT_TRUE(later_ran.load());
}

TEST(ExecutionQueue, SynchronizeDeviceWaitsForThatDeviceOnly) {
  ExecutionQueue q;
  std::atomic<int> ran{0};
  for (int s = 0; s < 3; ++s) q.enqueue(0, s, [&] {
      std::this_thread::sleep_for(2ms);
      ran++;
    }, origin());
  Latch gate;
  std::atomic<bool> other_ran{false};
  q.enqueue(1, 0, [&] { gate.wait(); }, origin());
  q.enqueue(1, 1, [&] { other_ran = true; }, origin());
  EXPECT_TRUE(finishes_within([&] { q.synchronize_device(0); }, 20s, gate))
      << "synchronize_device waited for another device's later work";
  EXPECT_EQ(ran.load(), 3);
  EXPECT_FALSE(other_ran.load());
  gate.open();
  q.synchronize_device(1);
  EXPECT_TRUE(other_ran.load());
}

TEST(ExecutionQueue, SynchronizeAllWaitsForEveryDevice) {
  ExecutionQueue q;
  std::atomic<int> ran{0};
  for (int i = 0; i < 30; ++i) q.enqueue(i % 3, i % 2, [&] {
      std::this_thread::sleep_for(1ms);
      ran++;
    }, origin());
  q.synchronize_all();
  EXPECT_EQ(ran.load(), 30);
  for (int d = 0; d < 3; ++d) EXPECT_TRUE(q.query_stream(d, 0));
}

TEST(ExecutionQueue, SynchronizeWithNothingEnqueuedReturns) {
  ExecutionQueue q;
  q.synchronize_stream(0, 7);
  q.synchronize_device(3);
  q.synchronize_all();
  EXPECT_TRUE(q.query_stream(5, 5));
}

TEST(ExecutionQueue, MarkersDescribeTheirPointAndTimeIncreasesWithSeq) {
  ExecutionQueue q;
  std::vector<std::shared_ptr<QueueMarker>> markers;
  for (int i = 0; i < 40; ++i) {
    auto m = std::make_shared<QueueMarker>();
    q.enqueue(i % 2, i % 3, [] { std::this_thread::sleep_for(100us); }, origin());
    q.record(m, i % 2, i % 3);
    EXPECT_NE(m->seq, 0u);
    EXPECT_EQ(m->device, i % 2);
    EXPECT_EQ(m->stream, i % 3);
    markers.push_back(m);
  }
  for (size_t i = 1; i < markers.size(); ++i) EXPECT_GT(markers[i]->seq, markers[i - 1]->seq);
  q.wait(markers.back()->seq);
  for (auto& m : markers) EXPECT_TRUE(q.done(m->seq));
  for (size_t i = 1; i < markers.size(); ++i) EXPECT_GE(markers[i]->time_ns, markers[i - 1]->time_ns);
  EXPECT_GT(markers.front()->time_ns, 0);
}

TEST(ExecutionQueue, MarkerTimeIsWhenTheWorkerReachedIt) {
  ExecutionQueue q;
  auto start = std::make_shared<QueueMarker>(), end = std::make_shared<QueueMarker>();
  Latch gate;
  q.record(start, 0, 0);
  q.enqueue(0, 0, [&] {
    gate.wait();
    std::this_thread::sleep_for(20ms);
  }, origin());
  q.record(end, 0, 0);
  EXPECT_FALSE(q.done(end->seq));  // recording did not wait for the blocked task
  gate.open();
  q.wait(end->seq);
  EXPECT_GE(end->time_ns - start->time_ns, 20'000'000);
}

TEST(ExecutionQueue, MarkerWaitsForEarlierWorkOfItsStream) {
  ExecutionQueue q;
  Latch gate;
  q.enqueue(0, 0, [&] { gate.wait(); }, origin());
  auto m = std::make_shared<QueueMarker>();
  q.record(m, 0, 0);
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(q.done(m->seq));
  gate.open();
  q.wait(m->seq);
  EXPECT_TRUE(q.done(m->seq));
}

// ------------------------------------------------------------ asynchronous errors

const std::string kFile = "train_model.py";  // TaskOrigin::file is interned: lives forever

TaskOrigin failing_origin() { return TaskOrigin{"aten::add.Tensor", &kFile, 42}; }

uint64_t enqueue_throw(ExecutionQueue& q, int device, int64_t stream, const char* message) {
  return q.enqueue(device, stream, [message] { throw std::runtime_error(message); }, failing_origin());
}

TEST(ExecutionQueueErrors, ErrorSurfacesAtNextSyncWithOpAndCallerLine) {
  ExecutionQueue q;
  enqueue_throw(q, 0, 0, "shapes do not match");
  try {
    q.synchronize_stream(0, 0);
    FAIL() << "the task's error was not reported";
  } catch (const AsyncError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("shapes do not match"), std::string::npos) << msg;
    EXPECT_NE(msg.find("aten::add.Tensor"), std::string::npos) << msg;
    EXPECT_NE(msg.find("train_model.py:42"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(q.synchronize_stream(0, 0));  // reported once
  EXPECT_NO_THROW(q.synchronize_all());
}

TEST(ExecutionQueueErrors, OriginWithoutFileStillNamesTheOp) {
  ExecutionQueue q;
  q.enqueue(0, 0, [] { throw std::runtime_error("bad"); }, TaskOrigin{"copy", nullptr, 0});
  try {
    q.synchronize_all();
    FAIL() << "the task's error was not reported";
  } catch (const AsyncError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("bad"), std::string::npos) << msg;
    EXPECT_NE(msg.find("copy"), std::string::npos) << msg;
  }
}

TEST(ExecutionQueueErrors, ErrorKindOfATaskErrorIsKept) {
  ExecutionQueue q;
  q.enqueue(0, 0, [] { throw TaskError("engine said no", 3); }, failing_origin());
  try {
    q.synchronize_all();
    FAIL() << "the task's error was not reported";
  } catch (const AsyncError& e) {
    EXPECT_EQ(e.kind, 3);
    EXPECT_NE(std::string(e.what()).find("engine said no"), std::string::npos) << e.what();
  }
  enqueue_throw(q, 0, 0, "plain");  // any other exception: kind 0
  try {
    q.synchronize_all();
    FAIL() << "the task's error was not reported";
  } catch (const AsyncError& e) {
    EXPECT_EQ(e.kind, 0);
  }
}

TEST(ExecutionQueueErrors, LaterTasksOfTheFailedStreamAreSkippedOthersRun) {
  ExecutionQueue q;
  std::atomic<bool> before{false}, same_stream{false}, other_stream{false}, other_device{false};
  q.enqueue(0, 1, [&] { before = true; }, origin());
  enqueue_throw(q, 0, 1, "boom");
  uint64_t skipped = q.enqueue(0, 1, [&] { same_stream = true; }, origin());
  q.enqueue(0, 2, [&] { other_stream = true; }, origin());
  uint64_t last = q.enqueue(1, 1, [&] { other_device = true; }, origin());
  q.wait(skipped);  // returns for a skipped task too
  q.wait(last);
  EXPECT_TRUE(before.load());
  EXPECT_FALSE(same_stream.load());
  EXPECT_TRUE(other_stream.load());
  EXPECT_TRUE(other_device.load());
  EXPECT_THROW(q.synchronize_device(0), AsyncError);
  // Reported: the stream runs again.
  std::atomic<bool> after{false};
  q.enqueue(0, 1, [&] { after = true; }, origin());
  EXPECT_NO_THROW(q.synchronize_stream(0, 1));
  EXPECT_TRUE(after.load());
  EXPECT_FALSE(same_stream.load());
}

TEST(ExecutionQueueErrors, OnlyTheFailedDevicesSyncThrows) {
  ExecutionQueue q;
  enqueue_throw(q, 0, 0, "boom on 0");
  q.enqueue(1, 0, [] {}, origin());
  EXPECT_NO_THROW(q.synchronize_device(1));
  EXPECT_NO_THROW(q.synchronize_stream(1, 0));
  EXPECT_THROW(q.synchronize_device(0), AsyncError);
  EXPECT_NO_THROW(q.synchronize_device(0));
}

TEST(ExecutionQueueErrors, SynchronizeAllReportsAnyDevice) {
  ExecutionQueue q;
  q.enqueue(0, 0, [] {}, origin());
  enqueue_throw(q, 1, 3, "boom on 1");
  EXPECT_THROW(q.synchronize_all(), AsyncError);
  EXPECT_NO_THROW(q.synchronize_all());
}

TEST(ExecutionQueueErrors, WaitAllWaitsAndLeavesTheErrorPending) {
  ExecutionQueue q;
  std::atomic<int> ran{0};
  enqueue_throw(q, 0, 0, "boom");
  for (int i = 0; i < 10; ++i) q.enqueue(1, 0, [&] {
      std::this_thread::sleep_for(1ms);
      ran++;
    }, origin());
  EXPECT_NO_THROW(q.wait_all());
  EXPECT_EQ(ran.load(), 10);
  EXPECT_THROW(q.synchronize_all(), AsyncError);
  EXPECT_NO_THROW(q.synchronize_all());
}

TEST(ExecutionQueueErrors, RethrowPendingThrowsOnceWithoutWaiting) {
  ExecutionQueue q;
  uint64_t seq = enqueue_throw(q, 0, 0, "boom");
  q.wait(seq);
  EXPECT_NO_THROW(q.rethrow_pending(1));  // device 1 has no error
  EXPECT_THROW(q.rethrow_pending(0), AsyncError);
  EXPECT_NO_THROW(q.rethrow_pending(0));
  EXPECT_NO_THROW(q.rethrow_pending(-1));

  seq = enqueue_throw(q, 1, 0, "boom again");
  q.wait(seq);
  Latch gate;
  q.enqueue(0, 0, [&] { gate.wait(); }, origin());
  // -1: any device's error, without waiting for the blocked task.
  EXPECT_TRUE(finishes_within([&] { EXPECT_THROW(q.rethrow_pending(-1), AsyncError); }, 20s, gate));
  EXPECT_NO_THROW(q.rethrow_pending(-1));
  gate.open();
  q.synchronize_all();
}

TEST(ExecutionQueueErrors, DestroyingAQueueWithAPendingErrorDoesNotThrow) {
  auto q = std::make_unique<ExecutionQueue>();
  uint64_t seq = enqueue_throw(*q, 0, 0, "never reported");
  q->wait(seq);
  EXPECT_NO_THROW(q.reset());
}

// ------------------------------------------------------------ raw tasks

// A RawWork's context: counts its runs and drops (the test reads them after a sync).
struct RawCounts {
  int runs = 0, drops = 0;
  bool fail = false;
};

RawWork raw_task(RawCounts* c) {
  RawWork w;
  w.run = [](void* ctx) {
    auto* c = static_cast<RawCounts*>(ctx);
    c->runs++;
    if (c->fail) throw std::runtime_error("raw task failed");
  };
  w.drop = [](void* ctx) { static_cast<RawCounts*>(ctx)->drops++; };
  w.ctx = c;
  return w;
}

TEST(ExecutionQueueRaw, RunThenDropOnceInStreamOrder) {
  ExecutionQueue q;
  std::vector<int> order;
  RawCounts raw;
  q.enqueue(0, 0, [&] { order.push_back(1); }, origin());
  q.enqueue(0, 0, raw_task(&raw), origin());
  q.enqueue(0, 0, [&] { order.push_back(raw.runs == 1 && raw.drops == 1 ? 3 : -3); }, origin());
  q.synchronize_stream(0, 0);
  EXPECT_EQ(raw.runs, 1);
  EXPECT_EQ(raw.drops, 1);
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
}

TEST(ExecutionQueueRaw, ThrowingRunIsReportedAndStillDropped) {
  ExecutionQueue q;
  RawCounts failing{0, 0, true}, skipped, other;
  q.enqueue(0, 0, raw_task(&failing), failing_origin());
  q.enqueue(0, 0, raw_task(&skipped), origin());  // same stream, after the failure
  q.enqueue(0, 1, raw_task(&other), origin());
  try {
    q.synchronize_device(0);
    FAIL() << "the raw task's error was not reported";
  } catch (const AsyncError& e) {
    EXPECT_NE(std::string(e.what()).find("raw task failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train_model.py:42"), std::string::npos) << e.what();
  }
  EXPECT_EQ(failing.runs, 1);
  EXPECT_EQ(failing.drops, 1);
  EXPECT_EQ(skipped.runs, 0);  // skipped: dropped instead of run
  EXPECT_EQ(skipped.drops, 1);
  EXPECT_EQ(other.runs, 1);
  EXPECT_EQ(other.drops, 1);
}

// ------------------------------------------------------------ worker lifetime

TEST(ExecutionQueue, StopDrainsJoinsAndEnqueueRestarts) {
  ExecutionQueue q;
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) q.enqueue(0, i % 2, [&] {
      std::this_thread::sleep_for(50us);
      ran++;
    }, origin());
  q.stop();
  EXPECT_EQ(ran.load(), 100);
  q.stop();  // twice is harmless
  std::thread::id worker;
  uint64_t seq = q.enqueue(0, 0, [&] { worker = std::this_thread::get_id(); ran++; }, origin());
  q.synchronize_all();
  EXPECT_TRUE(q.done(seq));
  EXPECT_EQ(ran.load(), 101);
  EXPECT_NE(worker, std::this_thread::get_id());
}

// An enqueue while stop() joins must neither start a second worker (which could exit on
// `stopping_` and leave later tasks with no worker: seen under TSAN within ~50 rounds
// before the fix) nor be left behind.
TEST(ExecutionQueue, EnqueueWhileStoppingStillRuns) {
  for (int round = 0; round < 200; ++round) {
    ExecutionQueue q;
    std::atomic<int> ran{0};
    for (int i = 0; i < 50; ++i) q.enqueue(0, 0, [&] { ran++; }, origin());
    std::thread producer([&] {
      for (int i = 0; i < 200; ++i) q.enqueue(0, 1, [&] { ran++; }, origin());
    });
    q.stop();
    producer.join();
    // Polled, not synchronize_all(): with no worker left that would never return.
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (ran.load() < 250 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(ran.load(), 250) << "round " << round << ": tasks enqueued during stop() never ran";
  }
}

TEST(ExecutionQueue, DestructorDrainsTheQueue) {
  std::atomic<int> ran{0};
  {
    ExecutionQueue q;
    for (int i = 0; i < 50; ++i) q.enqueue(0, 0, [&] {
        std::this_thread::sleep_for(100us);
        ran++;
      }, origin());
  }
  EXPECT_EQ(ran.load(), 50);
}

thread_local bool t_initialised = false;

TEST(ExecutionQueue, WorkerInitRunsOnTheWorkerBeforeTasks) {
  ExecutionQueue q;
  std::atomic<int> inits{0};
  std::atomic<bool> init_on_worker{true};
  q.set_worker_init([&] {
    t_initialised = true;
    inits++;
    if (!q.on_worker_thread()) init_on_worker = false;
  });
  std::vector<bool> seen;  // tasks only
  for (int i = 0; i < 10; ++i) q.enqueue(0, 0, [&] { seen.push_back(t_initialised); }, origin());
  q.synchronize_all();
  EXPECT_GE(inits.load(), 1);
  EXPECT_TRUE(init_on_worker.load());
  ASSERT_EQ(seen.size(), 10u);
  for (bool s : seen) EXPECT_TRUE(s);
  EXPECT_FALSE(t_initialised);  // not on this thread
  // A restarted worker is a new thread: it is initialised too.
  q.stop();
  bool after_restart = false;
  q.enqueue(0, 0, [&] { after_restart = t_initialised; }, origin());
  q.synchronize_all();
  EXPECT_TRUE(after_restart);
}

// Counts the calls of the release hook, on host threads and on the worker.
std::atomic<int> g_host_releases{0};
std::atomic<int> g_worker_releases{0};
std::atomic<ExecutionQueue*> g_releasing_queue{nullptr};
void count_release() { (g_releasing_queue.load()->on_worker_thread() ? g_worker_releases : g_host_releases)++; }

template <class P>
bool becomes_true_within(P p, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(ExecutionQueue, HostsReleaseThreadsWhenTheyComeBackToTheQueueTheWorkerWhenIdle) {
  ExecutionQueue q;
  g_releasing_queue = &q;
  g_host_releases = 0;
  g_worker_releases = 0;
  q.set_release_threads(count_release);
  std::this_thread::sleep_for(10ms);  // this thread has been away from any queue
  Latch gate;
  q.enqueue(0, 0, [&] { gate.wait(); }, origin());
  EXPECT_EQ(g_host_releases.load(), 1);
  // Back-to-back calls do not release again (a few may, if this thread was descheduled).
  for (int i = 0; i < 100; ++i) q.enqueue(0, 0, [] {}, origin());
  EXPECT_LT(g_host_releases.load(), 5);
  const int before_wait = g_host_releases.load();
  std::thread waiter([&] { q.synchronize_all(); });  // a thread new to the queue waits
  EXPECT_TRUE(becomes_true_within([&] { return g_host_releases.load() == before_wait + 1; }, 5000ms));
  EXPECT_EQ(g_worker_releases.load(), 0);  // the worker is busy
  gate.open();
  waiter.join();
  // Idle, the worker releases its threads once, then sleeps until the next task.
  EXPECT_TRUE(becomes_true_within([] { return g_worker_releases.load() == 1; }, 5000ms));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(g_worker_releases.load(), 1);
  // This thread comes back after a while: it releases again, and so does the worker.
  const int before_return = g_host_releases.load();
  q.enqueue(0, 0, [] {}, origin());
  EXPECT_EQ(g_host_releases.load(), before_return + 1);
  q.synchronize_all();
  EXPECT_TRUE(becomes_true_within([] { return g_worker_releases.load() == 2; }, 5000ms));
  q.stop();
  g_releasing_queue = nullptr;
}

// Worker placement (worker_placement.h): with its kernels on one thread, the worker keeps
// off the CPU of the host thread that enqueues.

// Pins the calling thread to one CPU for its lifetime, then gives it back its mask.
class PinnedToOneCpu {
 public:
  PinnedToOneCpu() {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    for (cpu_ = 0; cpu_ < CPU_SETSIZE && !CPU_ISSET(cpu_, &saved_); ++cpu_) {
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu_, &one);
    sched_setaffinity(0, sizeof(one), &one);
  }
  ~PinnedToOneCpu() { sched_setaffinity(0, sizeof(saved_), &saved_); }
  int cpu() const { return cpu_; }
  const cpu_set_t& usable() const { return saved_; }

 private:
  cpu_set_t saved_;
  int cpu_ = 0;
};

// Starts the worker, from this thread as it is (a new thread inherits its creator's mask).
void start_worker(ExecutionQueue& q) {
  q.enqueue(0, 0, [] {}, origin());
  q.synchronize_all();
}

// The worker's CPU mask as a task sees it (the mask is set by enqueues after the worker's
// first batch).
cpu_set_t worker_mask(ExecutionQueue& q) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  q.enqueue(0, 0, [&] { sched_getaffinity(0, sizeof(mask), &mask); }, origin());
  q.synchronize_all();
  return mask;
}

bool more_than_one_cpu() {
  cpu_set_t mask;
  return sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_COUNT(&mask) >= 2;
}

TEST(ExecutionQueuePlacement, OneThreadWorkerKeepsOffTheEnqueuingThreadsCpu) {
  if (!more_than_one_cpu()) GTEST_SKIP() << "one usable CPU";
  ExecutionQueue q;
  q.set_worker_init([&q] { q.set_worker_threads(1); });
  start_worker(q);
  PinnedToOneCpu host;
  cpu_set_t mask = worker_mask(q);
  EXPECT_FALSE(CPU_ISSET(host.cpu(), &mask));
  EXPECT_EQ(CPU_COUNT(&mask), CPU_COUNT(&host.usable()) - 1);  // every other usable CPU
  int ran_on = -1;
  q.enqueue(0, 0, [&] { ran_on = sched_getcpu(); }, origin());
  q.synchronize_all();
  EXPECT_NE(ran_on, host.cpu());
}

TEST(ExecutionQueuePlacement, WorkerOfSeveralThreadsMayUseEveryCpuAgain) {
  if (!more_than_one_cpu()) GTEST_SKIP() << "one usable CPU";
  ExecutionQueue q;
  std::atomic<int> threads{1};
  q.set_worker_init([&] { q.set_worker_threads(threads.load()); });
  start_worker(q);
  PinnedToOneCpu host;
  cpu_set_t mask = worker_mask(q);
  ASSERT_FALSE(CPU_ISSET(host.cpu(), &mask));
  threads = 2;  // as torch.set_num_threads(2): the next batch gives the worker every CPU back
  mask = worker_mask(q);
  EXPECT_TRUE(CPU_EQUAL(&mask, &host.usable()));
}

TEST(ExecutionQueuePlacement, OffLeavesTheWorkerToTheSystem) {
  if (!more_than_one_cpu()) GTEST_SKIP() << "one usable CPU";
  setenv("OPENREG_WORKER_PLACEMENT", "off", 1);
  ExecutionQueue q;
  q.set_worker_init([&q] { q.set_worker_threads(1); });
  start_worker(q);  // reads the variable
  unsetenv("OPENREG_WORKER_PLACEMENT");
  PinnedToOneCpu host;
  cpu_set_t mask = worker_mask(q);
  EXPECT_TRUE(CPU_EQUAL(&mask, &host.usable()));
}

TEST(ExecutionQueue, ProcessQueueIsOneObject) {
  ExecutionQueue& q = execution_queue();
  EXPECT_EQ(&q, &execution_queue());
  std::atomic<bool> ran{false};
  q.enqueue(0, 0, [&] { ran = true; }, origin());
  q.synchronize_all();
  EXPECT_TRUE(ran.load());
}

}  // namespace
}  // namespace openreg
